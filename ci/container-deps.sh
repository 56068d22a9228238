#!/usr/bin/env bash
# What `make image` and tests/test_image.py need: podman, mmdebstrap (a Debian root file system from Debian's
# archive) and runc, from Debian's packages. Installs them once as root on a Debian-like system; otherwise says what
# to run and exits 0 (the image's tests then skip with that reason).
set -euo pipefail
missing=()
for tool in podman mmdebstrap runc; do command -v "$tool" >/dev/null || missing+=("$tool"); done
[ "${#missing[@]}" -eq 0 ] && exit 0
if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "ci/container-deps.sh: ${missing[*]} missing and cannot be installed here (needs root and apt):" \
       "the image's tests will skip. Install them with: sudo apt-get install podman mmdebstrap runc uidmap" >&2
  exit 0
fi
echo "ci/container-deps.sh: installing Debian's podman, mmdebstrap and runc (once) for the image"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
export DEBIAN_FRONTEND=noninteractive
if ! { apt-get update -qq && apt-get install -y -qq podman mmdebstrap runc uidmap; } >"$log" 2>&1; then
  cat "$log" >&2
  echo "ci/container-deps.sh: apt-get install failed (above); the image's tests will skip" >&2
fi
