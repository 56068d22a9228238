#!/usr/bin/env bash
# MathJax for the book (`make book`, tests/test_book.py): Debian's libjs-mathjax, at
# /usr/share/javascript/mathjax, copied into the site so that its math needs no network.
# Idempotent and quiet when it is there; installed once with apt as root, else the book's test skips
# (and `make book` stops), saying what to run ($COURSE_MATHJAX names another MathJax 2 folder).
set -euo pipefail
. "$(dirname "$0")/apt-once.sh"
MATHJAX=${COURSE_MATHJAX:-/usr/share/javascript/mathjax}
apt_once ci/book-deps.sh -f "$MATHJAX/MathJax.js" MathJax "the book's test" libjs-mathjax
