#!/usr/bin/env bash
# Session 2's writer confirmation run on the GPU machine (bench/results/h200-2026-11-30/writer2/README.md),
# steps in order, each under its own limit (seconds):
#   1. bench/writer_experiments.py --plan writer3: the shipped per-N launch, exact vs numerics fast -> lab.json
#   2. kgen test of every shipped variant (byte-exact, N = 1 ... 1M) -> test.json
#   3. kgen test of the fp8 indexer with numerics: fast (its stated tolerance) -> test_fast.json
#   4. kgen test --sample 50 --seed 31 (random accepted specs; per-N shapes and fast ones among them) -> sample.json
#   5. kgen bench of the shipped specs -> bench.json (+ the fast fp8 indexer -> bench_fast.json)
#   6. ncu of PROFILE_SPECS at 1M tokens -> ncu.txt
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/device_env.sh
export KGEN_BENCH_COMPILE=0
gpu_clocks
SPECS="specs/dsv4.yaml specs/dsv32_indexer.yaml"
FAST=/tmp/indexer_fp8_fast.yaml
fast_fp8_spec "$FAST"
cp $FAST "$OUT/indexer_fp8_fast.yaml"
step "lab writer3"
lim "${T_LAB:-70}" "$PY" bench/writer_experiments.py --plan writer3 --json "$OUT/lab.json" > "$OUT/lab.txt" 2>&1
echo "lab rc $?"; cut -c1-40,95-400 "$OUT/lab.txt" | tail -40
step "kgen test $SPECS"
lim "${T_TEST:-70}" "$PY" -m kgen test $SPECS --json > "$OUT/test.json"; echo "test rc $?"
step "kgen test $FAST"
lim "${T_FAST:-30}" "$PY" -m kgen test $FAST --json > "$OUT/test_fast.json"; echo "test fast rc $?"
step "kgen test --sample 50 --seed 31"
lim "${T_SAMPLE:-50}" "$PY" -m kgen test --sample 50 --seed 31 --json > "$OUT/sample.json"; echo "sample rc $?"
step "kgen bench $SPECS"
KGEN_BENCH_BUDGET_S=$(( ${T_BENCH:-90} - 10 )) lim "${T_BENCH:-90}" "$PY" -m kgen bench $SPECS \
  --json "$OUT/bench.json" > "$OUT/bench.txt" 2>&1; echo "bench rc $?"; tail -30 "$OUT/bench.txt"
lim "${T_BENCH_FAST:-25}" "$PY" -m kgen bench $FAST --json "$OUT/bench_fast.json" > "$OUT/bench_fast.txt" 2>&1
echo "bench fast rc $?"; tail -8 "$OUT/bench_fast.txt"
profile_step 60
step "summary"
"$PY" bench/lab_summary.py "$OUT" test.json test_fast.json sample.json
