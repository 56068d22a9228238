# Sourced by ci/browser-deps.sh and ci/book-deps.sh: install a Debian package once, for the tests that need it.
#
#   apt_once SCRIPT TEST PATH WHAT PURPOSE PACKAGE...
#
# Does nothing when `[ TEST PATH ]` holds (the package, or the user's own copy, is there). Installs the packages
# with apt only when running as root on a Debian-like system; otherwise, or when apt fails, it says what to run
# and returns 0: PURPOSE (e.g. "the browser tests") skips with that reason, and `make test` goes on.
apt_once() {
  local script=$1 test=$2 path=$3 what=$4 purpose=$5
  shift 5
  if [ "$test" "$path" ]; then
    return 0
  fi
  if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "$script: no $what at $path and cannot install it here (needs root and apt):" \
         "$purpose will skip. Install it with: sudo apt-get install $1" >&2
    return 0
  fi
  echo "$script: installing Debian's $1 (once) for $purpose"
  local log
  log=$(mktemp)
  export DEBIAN_FRONTEND=noninteractive
  if ! { apt-get update -qq && apt-get install -y -qq --no-install-recommends "$@"; } >"$log" 2>&1; then
    cat "$log" >&2
    echo "$script: apt-get install $1 failed (above); $purpose will skip" >&2
  fi
  rm -f "$log"
  return 0
}
