#!/usr/bin/env bash
# The browser the real-environment tests drive (tests/test_browser.py, tests/test_hub.py):
# Debian's `chromium` package, at /usr/bin/chromium. Playwright (a Python package in the dev
# extras) is pointed at that executable; it never downloads a browser of its own.
#
# Idempotent and quiet: does nothing when chromium is already there. Installs it with apt only
# when running as root on a Debian-like system; otherwise it says what to run and exits 0, and
# the browser tests skip with that reason (a learner without root still gets a green suite).
set -euo pipefail
CHROMIUM=${COURSE_CHROMIUM:-/usr/bin/chromium}
if [ -x "$CHROMIUM" ]; then
  exit 0
fi
if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "ci/browser-deps.sh: no Chromium at $CHROMIUM and cannot install it here (needs root and apt):" \
       "the browser tests will skip. Install it with: sudo apt-get install chromium" >&2
  exit 0
fi
echo "ci/browser-deps.sh: installing Debian's chromium (once) for the browser tests"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
export DEBIAN_FRONTEND=noninteractive
if ! { apt-get update -qq && apt-get install -y -qq --no-install-recommends chromium fonts-dejavu-core; } >"$log" 2>&1; then
  cat "$log" >&2
  echo "ci/browser-deps.sh: apt-get install chromium failed (above); the browser tests will skip" >&2
  exit 0
fi
