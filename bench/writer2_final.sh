#!/usr/bin/env bash
# Session 2's writer verification of the landed state on the GPU machine (bench/results/h200-2026-11-30/writer2):
#   1. kgen test --sample 50 --seed 31 (the sampler draws per-N launch shapes and numerics fast) -> sample.json
#   2. kgen test of the fp8 indexer with numerics: fast (its stated tolerance)                 -> test_fast.json
#   3. pytest -m gpu (shipped variants through the op at N up to 65536, CUDA graphs, PDL)      -> pytest.txt
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/device_env.sh
FAST=/tmp/indexer_fp8_fast.yaml
fast_fp8_spec "$FAST"
step "kgen test --sample 50 --seed 31"
lim "${T_SAMPLE:-70}" "$PY" -m kgen test --sample 50 --seed 31 --json > "$OUT/sample.json"; echo "sample rc $?"
if [ "${T_FAST:-30}" != 0 ]; then
  step "kgen test $FAST"
  lim "${T_FAST:-30}" "$PY" -m kgen test $FAST --json > "$OUT/test_fast.json"; echo "test fast rc $?"
fi
step "pytest -m gpu ${PYTEST_K:+-k $PYTEST_K}"
KGEN_GPU_SAMPLES=${KGEN_GPU_SAMPLES:-4} lim "${T_PYTEST:-90}" "$PY" -m pytest -m gpu -q -p no:cacheprovider \
  ${PYTEST_K:+-k "$PYTEST_K"} tests/ > "$OUT/pytest.txt" 2>&1; echo "pytest rc $?"; tail -6 "$OUT/pytest.txt"
step "summary"
"$PY" bench/lab_summary.py "$OUT" sample.json test_fast.json
