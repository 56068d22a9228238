#!/usr/bin/env bash
# Build the course's OCI image with podman, from Debian's packages and PyPI's wheels alone (`make image`).
#
#   container/build.sh            # prints the image's name on its last line: localhost/largebatch-course:cpu
#
# 1. A Debian bookworm root file system from Debian's archive (mmdebstrap), imported as the base image
#    (localhost/largebatch-course-base:bookworm); rebuilt only when its package list changes.
# 2. Every wheel the course needs, downloaded here for the image's Python (3.11, manylinux x86_64), torch's CPU
#    build included; the course's tracked files copied as they are committed.
# 3. `podman build --network=none` from container/Containerfile.
#
# The image is labelled with a hash of everything that goes into it (the course's tracked files, the Containerfile,
# the requirements); when an image of that name already carries the same hash, nothing is rebuilt. A cold build
# takes several minutes (the root file system and the wheels); a cached one a second.
#
# PODMAN_FLAGS: added to `podman build` and `podman run` (container/run.sh). The default, `--runtime runc` and
# ulimits no higher than this shell's, lets podman run where root lacks CAP_SYS_RESOURCE (it cannot give a
# container higher limits than its own) and cgroups are mounted in hybrid mode (crun refuses those); on an
# ordinary machine it costs nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
NAME=${IMAGE_NAME:-localhost/largebatch-course:cpu}
BASE=localhost/largebatch-course-base:bookworm
PY=${PY:-.venv/bin/python}
SUITE=bookworm
PACKAGES=python3,python3-venv,ca-certificates,procps,iproute2,git
for tool in podman mmdebstrap git; do
  command -v "$tool" >/dev/null || { echo "container/build.sh: $tool is missing; as root run ci/container-deps.sh" >&2; exit 2; }
done
# shellcheck source=container/podman-flags.sh
. container/podman-flags.sh

# What goes into the image, and its hash
COURSE_FILES=(course_lib notebooks solutions exercises data ci pyproject.toml README.md Makefile environment.yml)
requirements=$("$PY" ci/requirements.py --image)
inputs=$( { git ls-files -s -- "${COURSE_FILES[@]}" container; echo "$requirements"; echo "$SUITE $PACKAGES"; } \
          | sha256sum | cut -c1-16)
dirty=$(git status --porcelain -- "${COURSE_FILES[@]}" container)
if [ -n "$dirty" ]; then
  echo "container/build.sh: uncommitted changes to the course's files; the image takes what is committed:" >&2
  echo "$dirty" | head -5 >&2
fi
if [ "$(podman image inspect --format '{{ index .Labels "course.inputs" }}' "$NAME" 2>/dev/null)" = "$inputs" ]; then
  echo "container/build.sh: $NAME is up to date (inputs $inputs)"
  echo "$NAME"
  exit 0
fi

work=$(mktemp -d "${TMPDIR:-/var/tmp}/course-image.XXXXXX")
trap 'rm -rf "$work"' EXIT
start=$(date +%s)

base_inputs=$(echo "$SUITE $PACKAGES" | sha256sum | cut -c1-16)
if [ "$(podman image inspect --format '{{ index .Labels "base.inputs" }}' "$BASE" 2>/dev/null)" != "$base_inputs" ]; then
  echo "container/build.sh: Debian $SUITE root file system ($PACKAGES), from Debian's archive"
  mmdebstrap --quiet --variant=apt --include="$PACKAGES" "$SUITE" "$work/rootfs.tar"
  podman import --change "LABEL base.inputs=$base_inputs" --change "CMD /bin/bash" "$work/rootfs.tar" "$BASE" >/dev/null
  rm -f "$work/rootfs.tar"
fi

echo "container/build.sh: wheels for Python 3.11 (manylinux x86_64), torch's CPU build included"
mkdir -p "$work/context/wheels" "$work/context/course"
echo "$requirements" > "$work/context/wheels/requirements.txt"
"$PY" -m pip download --quiet --dest "$work/context/wheels" --only-binary=:all: --python-version 3.11 \
  --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 --platform manylinux1_x86_64 --platform any \
  -r "$work/context/wheels/requirements.txt" setuptools wheel
git archive --format=tar HEAD -- "${COURSE_FILES[@]}" | tar -x -C "$work/context/course"

echo "container/build.sh: podman build (no network)"
podman build "${PODMAN_FLAGS[@]}" --quiet --network=none --build-arg "BASE=$BASE" \
  --build-arg "REQUIREMENTS=$(echo "$requirements" | sha256sum | cut -c1-16)" --label "course.inputs=$inputs" \
  -f container/Containerfile -t "$NAME" "$work/context" >/dev/null
size=$(podman image inspect --format '{{ .Size }}' "$NAME")
echo "container/build.sh: built in $(( $(date +%s) - start )) s, $(( size / 1000000 )) MB (inputs $inputs)"
echo "$NAME"
