# shellcheck shell=bash
# The flags container/build.sh and the image's tests pass to podman (sourced; sets the array PODMAN_FLAGS).
# $PODMAN_FLAGS, when set, is taken as it is (split at spaces). The default: runc, and ulimits no higher than this
# shell's. Why: where root lacks CAP_SYS_RESOURCE (a sandboxed VM), podman's default limits for a container
# (nofile 1048576, nproc 4194304) cannot be set and every `podman run` fails with "setrlimit ... Operation not
# permitted"; nproc above the kernel's pid_max was refused there too. crun also refuses cgroups mounted in hybrid
# mode (v1 controllers with a v2 hierarchy beside them), where runc runs.
if [ -n "${PODMAN_FLAGS:-}" ]; then
  read -r -a PODMAN_FLAGS <<< "$PODMAN_FLAGS"
else
  _nproc=$(ulimit -u)
  _pid_max=$(cat /proc/sys/kernel/pid_max 2>/dev/null || echo 32768)
  if [ "$_nproc" = unlimited ] || [ "$_nproc" -gt "$_pid_max" ]; then _nproc=$_pid_max; fi
  _nofile=$(ulimit -n)
  [ "$_nofile" = unlimited ] && _nofile=1048576
  PODMAN_FLAGS=(--ulimit "nofile=$_nofile:$_nofile" --ulimit "nproc=$_nproc:$_nproc")
  command -v runc >/dev/null && PODMAN_FLAGS=(--runtime runc "${PODMAN_FLAGS[@]}")
  unset _nproc _pid_max _nofile
fi
