#!/usr/bin/env bash
# GPU check: on a machine with one or more GPUs — often an offline compute node — install
# what the course needs from a wheelhouse (no index), run the GPU tier's tests, every lesson
# in the smoke profile on the GPU, and the benchmarks, and print the figures a report needs
# (`FIGURE <lesson>.<quantity> = <value>`, one per line). Budget: 10 minutes on one
# H100-class GPU; each stage prints its time, and the end says whether the budget held.
#
#   make wheelhouse                    # once, where PyPI is reachable (WHEEL_PYTHON=3.12 for the node's Python)
#   bash ci/gpu-check.sh               # on the GPU node, from the checkout (with its wheelhouse/)
#
# Settings (environment):
#   PY=/path/python       the interpreter with the node's CUDA torch (default: .venv/bin/python, else python3);
#                         missing packages are installed from the wheelhouse into it when it is a virtual
#                         environment's, else into the venv GPU_VENV names (made with --system-site-packages
#                         from PY, so it sees the node's torch): never into a system's or a module's Python
#   GPU_VENV=dir          that venv (default: .venv-gpu in the checkout)
#   WHEELHOUSE=dir        where the wheels are (default: wheelhouse/ when it exists; none: install nothing)
#   OUT=dir               executed notebooks, results and benchmark logs (default: runs/gpu-check-<time>)
#   CHECK_PROFILE=smoke   the lessons' profile (full: `make course`'s lessons, far over the budget)
#   CHECK_NOTEBOOKS="..." which lessons (default: notebooks/; "none": no lesson)
#   CHECK_BENCH=0         no benchmarks
#   ALLOW_CPU=1           dry run on a machine without a GPU (the suite does this, without lessons and
#                         benchmarks: tests/test_repo.py; both are tested on their own there)
#
# `make test` never needs it: the suite checks the CPU tier everywhere (tests/conftest.py).
set -uo pipefail
cd "$(dirname "$0")/.."
if [ -z "${PY:-}" ]; then
  if [ -x .venv/bin/python ]; then PY=.venv/bin/python; else PY=python3; fi
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
OUT=${OUT:-runs/gpu-check-$(date +%Y%m%d-%H%M%S)}
PROFILE=${CHECK_PROFILE:-smoke}
BUDGET_S=600
mkdir -p "$OUT"
start=$(date +%s)
stage_start=$start
status=0

stage() {  # the time of the stage that ended, then the next one's title
  local now; now=$(date +%s)
  [ "$now" -gt "$start" ] && echo "   (stage took $((now - stage_start)) s)"
  stage_start=$now
  echo "== $1"
}

if [ -z "${WHEELHOUSE:-}" ] && [ -d wheelhouse ]; then WHEELHOUSE=wheelhouse; fi
if [ -n "${WHEELHOUSE:-}" ]; then
  if ! "$PY" -c 'import sys; sys.exit(sys.prefix == sys.base_prefix)'; then  # not a venv: make the one we name
    GPU_VENV=${GPU_VENV:-.venv-gpu}
    echo "== $PY is not a virtual environment's Python: installing into the venv $GPU_VENV instead" \
         "(made from it with --system-site-packages; GPU_VENV names another)"
    if [ ! -x "$GPU_VENV/bin/python" ] && ! "$PY" -m venv --system-site-packages "$GPU_VENV"; then
      echo "gpu-check: could not make the venv $GPU_VENV with $PY -m venv (Debian: apt-get install python3-venv)" >&2
      exit 2
    fi
    PY=$GPU_VENV/bin/python
  fi
  echo "== installing from $WHEELHOUSE (no index) into $PY"
  if [ ! -f "$WHEELHOUSE/requirements.txt" ]; then
    echo "gpu-check: $WHEELHOUSE/requirements.txt is missing: build the folder with 'make wheelhouse'" >&2
    exit 2
  fi
  if ! "$PY" -m pip install --quiet --no-index --find-links "$WHEELHOUSE" -r "$WHEELHOUSE/requirements.txt"; then
    echo "gpu-check: $WHEELHOUSE lacks a wheel this Python needs ($("$PY" -V 2>&1)). Rebuild it where PyPI is" \
         "reachable with 'make wheelhouse WHEEL_PYTHON=<this node's X.Y>'." >&2
    exit 2
  fi
fi

echo "== hardware"
"$PY" - <<'PY' || exit 2
import importlib.util, os, sys
missing = [m for m in ("torch", "numpy", "matplotlib", "tqdm", "psutil", "tokenizers", "ipykernel", "papermill",
                       "nbformat", "pytest") if importlib.util.find_spec(m) is None]
if missing:
    sys.exit(f"gpu-check: {sys.executable} lacks {', '.join(missing)}. On an offline node: 'make wheelhouse' "
             "where PyPI is reachable, copy wheelhouse/ beside this checkout, and run this again.")
import torch
from course_lib import hardware, tiers
hw = hardware.detect()
print(hw)
if hw.gpu_count == 0 and not os.environ.get("ALLOW_CPU"):
    sys.exit("gpu-check: no CUDA GPU visible (torch %s); set ALLOW_CPU=1 for a dry run" % torch.__version__)
print(tiers.plan(hw, os.environ.get("CHECK_PROFILE", "smoke")))
PY

stage "GPU tier tests (tests/test_gpu.py; they skip without a GPU)"
COURSE_TEST_GPU=1 "$PY" -m pytest tests/test_gpu.py -q -p no:cacheprovider || status=1

stage "lessons, $PROFILE profile, on this machine's tier"
if [ "${CHECK_NOTEBOOKS:-}" = none ]; then
  echo "   skipped (CHECK_NOTEBOOKS=none)"
else
  # shellcheck disable=SC2086
  "$PY" ci/run_notebooks.py --profile "$PROFILE" --quiet --out "$OUT" ${CHECK_NOTEBOOKS:-notebooks} || status=1
fi

dev=$("$PY" -c "import torch; print('cuda' if torch.cuda.is_available() else 'cpu')")
if [ "$dev" = cuda ]; then
  ncf_args="--device cuda"
  bert_args="--device cuda"
else  # the dry run: the same commands, sized for a CPU
  ncf_args="--device cpu --profile smoke"
  bert_args="--device cpu --model tiny --seq-len 32 --batch-size 8 --steps 2"
fi
if [ "${CHECK_BENCH:-1}" = 0 ]; then
  stage "benchmarks"
  echo "   skipped (CHECK_BENCH=0)"
else
  stage "NCF loader benchmark"
  # shellcheck disable=SC2086
  "$PY" -m course_lib.bench ncf $ncf_args | tee "$OUT/bench_ncf.txt" || status=1
  stage "BERT training throughput (lesson 07's GPU figure: sequences/s with AMP, BERT-base at 128 tokens)"
  # shellcheck disable=SC2086
  "$PY" -m course_lib.bench bert $bert_args | tee "$OUT/bench_bert.txt" || status=1
fi

stage "figures"
if [ -d "$OUT/results" ]; then "$PY" -m course_lib.summary --figures "$OUT/results" || status=1; else echo "   no lesson ran"; fi
took=$(( $(date +%s) - start ))
echo "   (stage took $(( $(date +%s) - stage_start )) s)"
budget="within the ${BUDGET_S} s budget"
[ "$took" -le "$BUDGET_S" ] || budget="OVER the ${BUDGET_S} s budget"
echo "gpu-check: $( [ $status -eq 0 ] && echo ok || echo FAILED ) in $took s ($budget); executed notebooks in $OUT"
exit $status
