#!/usr/bin/env bash
# System packages for tests/test_slurm.py: Debian's SLURM controller, node daemon and client
# commands, and MUNGE (slurmctld slurmd slurm-client munge, ~13 s to install); and for the virtual
# cluster (course_lib/cluster.py: tests/test_cluster.py, test_multinode.py, test_slurm_multinode.py)
# ip, tc and ss (iproute2), unshare and nsenter (util-linux).
#
# Idempotent and quiet: nothing happens when the programs are there. It installs with apt-get only
# when run as root on a Debian-like system; otherwise it says what is missing and exits 0, and the
# SLURM tests skip with that reason. The tests start their own daemons with their own key and
# configuration in a temp dir, so the packages' services are not wanted: where no policy-rc.d
# exists, one is put in place for the install so the packages do not start the system's munge,
# slurmctld or slurmd (slurmd would fail anyway without /etc/slurm/slurm.conf).
set -euo pipefail

export PATH="$PATH:/usr/sbin:/sbin"
missing=()
for c in munged munge slurmctld slurmd sbatch sinfo squeue scontrol scancel ip tc ss unshare nsenter; do
  command -v "$c" >/dev/null || missing+=("$c")
done
[ "${#missing[@]}" -eq 0 ] && exit 0

packages=(slurmctld slurmd slurm-client munge iproute2 util-linux)
if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null; then
  echo "ci/install-slurm.sh: ${missing[*]} not found; to run tests/test_slurm.py, install as root:" \
       "apt-get install ${packages[*]} (the SLURM and virtual-cluster tests skip meanwhile)" >&2
  exit 0
fi

log=$(mktemp)
# COURSE_POLICY_RC_D: tests/test_ci_scripts.py only (a fake apt-get, a policy file in its temp dir)
policy=${COURSE_POLICY_RC_D:-/usr/sbin/policy-rc.d}
cleanup() { rm -f "$log"; if [ -n "${own_policy:-}" ]; then rm -f "$policy"; fi; }
# On any exit: bash runs an EXIT trap on `exit` and at the end of the script, but a signal it does not
# trap kills it without one (a cancelled CI job's SIGTERM left policy-rc.d behind, and every later
# package install on the machine could not start its services). Trapped, each signal exits, and the
# EXIT trap runs (after the foreground apt-get returns: bash runs traps between commands).
trap cleanup EXIT
trap 'exit 129' HUP
trap 'exit 130' INT
trap 'exit 143' TERM
if [ ! -e "$policy" ]; then
  printf '#!/bin/sh\nexit 101\n' > "$policy" && chmod 755 "$policy" && own_policy=1
fi

install() { DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${packages[@]}" >>"$log" 2>&1; }
echo "ci/install-slurm.sh: installing ${packages[*]} (apt-get) for tests/test_slurm.py" >&2
# an empty package list on a fresh machine: update once and try again
if ! install && ! { apt-get update -qq >>"$log" 2>&1 && install; }; then
  echo "ci/install-slurm.sh: apt-get could not install ${packages[*]}; the SLURM tests will skip. Its output:" >&2
  tail -n 20 "$log" >&2
  exit 0
fi
# Not started at boot either: the tests start their own daemons. policy-rc.d only stops the install from
# starting them; the packages' postinst still enabled them (systemd unit links, SysV rc links).
for service in munge slurmctld slurmd; do
  if command -v deb-systemd-helper >/dev/null; then deb-systemd-helper disable "$service.service" >>"$log" 2>&1 || true; fi
  if command -v update-rc.d >/dev/null; then update-rc.d "$service" disable >>"$log" 2>&1 || true; fi
done
exit 0
