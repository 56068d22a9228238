#!/usr/bin/env bash
# The whole test suite, as `make test` runs it (CI too, through .ci/run).
#  1. pytest on tests/: course_lib unit tests, and every notebook in notebooks/ (and
#     solutions/) executed with papermill in the smoke profile; executed copies go to
#     ci/executed/.
#     tests/test_slurm.py submits notebooks/beyond/ncf_ddp.sbatch to a one-node SLURM it starts
#     (packages from ci/install-slurm.sh); tests/test_slurm_multinode.py the same on two nodes of the
#     virtual cluster (course_lib/cluster.py: network namespaces on shaped links, as root), and
#     tests/test_multinode.py torchrun across those nodes without SLURM.
#  2. nbval re-executes the executed lessons, each up to its last cell marked `# NBVAL_CHECK_OUTPUT`,
#     and compares those cells' outputs with the papermill run's: deterministic outputs must agree.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
export COURSE_PROFILE=smoke
# The suite checks the CPU tier on every machine (references are CPU results); GPUs are
# hidden here for nbval's kernels as tests/conftest.py hides them for pytest's. The GPU
# tier's tests: COURSE_TEST_GPU=1 pytest tests/test_gpu.py (ci/gpu-check.sh).
export CUDA_VISIBLE_DEVICES=
# One compute thread per process unless the caller chose otherwise. The suite's models are tiny,
# and on a busy machine (a shared login node, CI next to other jobs) OpenMP's spinning threads
# are what make it slow: lesson 01's smoke lr sweep took 478 s with torch's default 2 threads
# and 42 s with 1, on a 2-core box at load 9.
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
export PYTHONDONTWRITEBYTECODE=1
# Workers (pytest-xdist): one more than the machine's cores, at least 3 and at most 4. The lessons' chain
# holds one worker from start to end, and much of the rest waits on what it started (JupyterHub, SLURM,
# torchrun's rendezvous, podman, Chromium) rather than computing, so a third worker fills the second
# core's idle time; beyond 4 the lessons' chain alone sets the time. Each worker imports torch, and
# most tests are single-threaded. COURSE_TEST_WORKERS=N sets the number (0: one process, in order).
DEFAULT_WORKERS=$(( $(nproc 2>/dev/null || echo 2) + 1 ))
DEFAULT_WORKERS=$(( DEFAULT_WORKERS < 3 ? 3 : DEFAULT_WORKERS > 4 ? 4 : DEFAULT_WORKERS ))
WORKERS=${COURSE_TEST_WORKERS:-$DEFAULT_WORKERS}
start=$(date +%s)

# The linter first: seconds, and a lint error fails the suite before anything slow runs. The
# configuration is pyproject.toml's [tool.ruff]; `make lint` fixes what ruff can fix by itself.
"$(dirname "$PY")/ruff" check --no-cache course_lib tests ci notebooks solutions exercises

# System packages for tests/test_slurm.py (SLURM and MUNGE from apt, as root only; else the tests skip)
bash ci/install-slurm.sh
# System packages for tests/test_image.py (podman, mmdebstrap and runc from apt, as root only; else the tests skip)
bash ci/container-deps.sh

# Every temporary file of the suite goes into one private folder (mode 0700, a random name),
# removed when the suite ends, however it ends short of SIGKILL. Tools the tests drive leave
# theirs behind otherwise: ipykernel's `install` an empty tmp*_kernels folder each time (it
# copies the spec out of a mkdtemp and never removes it), torchrun a torchelastic_* folder per
# job, an untouched exercise its module folder. (After the apt step: apt's sandbox user
# could not read a private TMPDIR.) The name is short: multiprocessing's socket
# paths below it must stay under 108 bytes (course_lib/dist.py).
SUITE_TMP=$(mktemp -d "${TMPDIR:-/tmp}/ctest.XXXXXX")
# 0711, not mktemp's 0700: munged (tests/test_slurm.py) refuses a socket under a folder others cannot
# traverse ("Socket is inaccessible: execute permissions for all required"). Others still cannot list
# it, and everything the tests make in it has a random name and mode 0700 (mkdtemp).
chmod 711 "$SUITE_TMP"
trap 'rm -rf "$SUITE_TMP"' EXIT
# A signal ends the script through `exit`, so the EXIT trap above still runs (bash skips it when an
# untrapped signal kills it: a stopped suite left its folder behind).
trap 'exit 129' HUP
trap 'exit 130' INT
trap 'exit 143' TERM
export TMPDIR="$SUITE_TMP"

rm -rf ci/executed
# --dist loadgroup: the lessons, which read each other's saved results, run in order on one worker
# (tests/conftest.py schedules them); everything else goes to whichever worker is free.
# --durations: the slowest tests and their times, the first place to look when the suite grows.
"$PY" -m pytest tests -p no:cacheprovider -n "$WORKERS" --dist loadgroup --durations=20
unit_end=$(date +%s)

# The lessons only: the solutions have no `# NBVAL_CHECK_OUTPUT` cell (tests/test_repo.py keeps it
# so), so nbval would only run them a second time; their strict checks ran in the papermill phase.
mapfile -t executed < <(find ci/executed/notebooks -name '*.ipynb' 2>/dev/null | sort)
if [ "${#executed[@]}" -eq 0 ]; then
  echo "ci/test.sh: no executed lessons in ci/executed/notebooks: tests/test_notebooks.py did not run" >&2
  exit 1
fi
# nbval re-executes each lesson up to its last marked cell (ci/expected_outputs.py --prefixes): no later cell can
# change a marked output, and papermill has already run every cell. A lesson with no marked cell is not re-run.
rm -rf ci/executed/nbval
mapfile -t prefixes < <("$PY" ci/expected_outputs.py --executed ci/executed --prefixes ci/executed/nbval)
if [ "${#prefixes[@]}" -eq 0 ]; then
  echo "ci/test.sh: ci/expected_outputs.py wrote no lesson for nbval (is any cell marked # NBVAL_CHECK_OUTPUT?)" >&2
  exit 1
fi
# nbval's kernels save results too: into a copy of the papermill run's results, never into the
# learner's runs/interactive/. With every lesson's inputs already there, the notebooks no longer
# depend on each other's order, and nbval spreads them over the workers, one notebook per worker at
# a time (--dist loadscope keeps a notebook's cells together, in one kernel).
rm -rf ci/executed/nbval-results
cp -r ci/executed/results ci/executed/nbval-results
COURSE_RESULTS_DIR="$PWD/ci/executed/nbval-results" COURSE_CHECKS_STRICT=1 \
  "$PY" -m pytest --nbval-lax --nbval-cell-timeout=600 -p no:cacheprovider -n "$WORKERS" --dist loadscope "${prefixes[@]}"
end=$(date +%s)
echo "make test: wall time $((end - start)) s (pytest incl. papermill $((unit_end - start)) s, nbval $((end - unit_end)) s)"
