#!/usr/bin/env bash
# GPU check: on a machine with one or more GPUs, run the test suite with CUDA visible,
# execute the lessons in their full profile, and print every figure they measured, one
# line each (`FIGURE <lesson>.<quantity> = <value>`). Budget: 8 minutes on one GPU.
#
#   bash ci/gpu-check.sh              # uses $PY, else .venv/bin/python, else python3
#   OUT=/tmp/x bash ci/gpu-check.sh   # where executed notebooks and results go
#   ALLOW_CPU=1 CHECK_PROFILE=smoke bash ci/gpu-check.sh   # dry run on a CPU-only machine
#
# It installs nothing (GPU nodes are often offline): it needs torch with CUDA, pytest,
# papermill and nbformat importable, and puts this checkout on PYTHONPATH. `make test`
# never needs it.
set -uo pipefail
cd "$(dirname "$0")/.."
if [ -z "${PY:-}" ]; then
  if [ -x .venv/bin/python ]; then PY=.venv/bin/python; else PY=python3; fi
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
OUT=${OUT:-runs/gpu-check-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$OUT"
start=$(date +%s)
status=0

echo "== hardware"
"$PY" - <<'PY' || exit 2
import os, sys, torch
from course_lib import hardware
hw = hardware.detect()
print(hw)
if hw.gpu_count == 0 and not os.environ.get("ALLOW_CPU"):
    sys.exit("gpu-check: no CUDA GPU visible (torch %s); set ALLOW_CPU=1 for a dry run" % torch.__version__)
PY

echo "== unit tests (CUDA visible; notebooks run below in the full profile)"
"$PY" -m pytest tests -q -x -p no:cacheprovider --ignore=tests/test_notebooks.py || status=1

echo "== lessons, ${CHECK_PROFILE:-full} profile"
"$PY" ci/run_notebooks.py --profile "${CHECK_PROFILE:-full}" --quiet --out "$OUT" notebooks || status=1

echo "== NCF loader benchmark"
if "$PY" -c "import course_lib.bench" 2>/dev/null; then
  dev=$("$PY" -c "import torch; print('cuda' if torch.cuda.is_available() else 'cpu')")
  "$PY" -m course_lib.bench ncf --device "$dev" | tee "$OUT/bench_ncf.txt" || status=1
fi

echo "== BERT-base training throughput (lesson 07's GPU goal: sequences/s with AMP at 128 tokens)"
if [ "${CHECK_PROFILE:-full}" = smoke ]; then bert_args="--model tiny --seq-len 32 --batch-size 8 --steps 2"; else bert_args=""; fi
"$PY" -m course_lib.bench bert --device "${dev:-cpu}" $bert_args | tee "$OUT/bench_bert.txt" || status=1

echo "== figures"
"$PY" -m course_lib.summary --figures "$OUT/results"
echo "gpu-check: $( [ $status -eq 0 ] && echo ok || echo FAILED ) in $(( $(date +%s) - start )) s; executed notebooks in $OUT"
exit $status
