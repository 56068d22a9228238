#!/usr/bin/env bash
# The browser the real-environment tests drive (tests/test_browser.py, tests/test_hub.py):
# Debian's `chromium` package, at /usr/bin/chromium. Playwright (a Python package in the dev
# extras) is pointed at that executable; it never downloads a browser of its own.
#
# Idempotent and quiet: does nothing when chromium is already there. Installs it with apt only
# when running as root on a Debian-like system; otherwise it says what to run and exits 0, and
# the browser tests skip with that reason (a learner without root still gets a green suite).
set -euo pipefail
. "$(dirname "$0")/apt-once.sh"
CHROMIUM=${COURSE_CHROMIUM:-/usr/bin/chromium}
apt_once ci/browser-deps.sh -x "$CHROMIUM" Chromium "the browser tests" chromium fonts-dejavu-core
