#!/usr/bin/env bash
# Session 3's writer confirmation run on the GPU machine (bench/results/h200-2026-11-30/writer3/README.md),
# steps in order, each under its own limit (seconds):
#   1. bench/writer_experiments.py --plan writer6: main's kernel and launch (OLD_INCLUDE) against this tree's
#      shipped specs, same process, N = 1 ... 1M -> lab.json, lab.txt
#   2. kgen test of every shipped variant (byte-exact, N = 1 ... 1M) -> test.json
#   3. kgen bench of the shipped specs -> bench.json, bench.txt
#   4. ncu of PROFILE_SPECS at 1M tokens -> ncu.txt, profile.log
#   5. kgen test --sample 50 --seed 31 (random accepted specs; staged shapes among them) -> sample.json
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/device_env.sh
export KGEN_BENCH_COMPILE=0
gpu_clocks
SPECS="specs/dsv4.yaml specs/dsv32_indexer.yaml"
step "lab writer6"
lim "${T_LAB:-50}" "$PY" bench/writer_experiments.py ${OLD_INCLUDE:+--old-include "$OLD_INCLUDE"} --plan writer6 \
  --json "$OUT/lab.json" > "$OUT/lab.txt" 2>&1
echo "lab rc $?"; tail -1 "$OUT/lab.txt"
step "kgen test $SPECS"
lim "${T_TEST:-60}" "$PY" -m kgen test $SPECS --json > "$OUT/test.json"; echo "test rc $?"
step "kgen bench $SPECS"
KGEN_BENCH_BUDGET_S=$(( ${T_BENCH:-60} - 10 )) lim "${T_BENCH:-60}" "$PY" -m kgen bench $SPECS \
  --json "$OUT/bench.json" > "$OUT/bench.txt" 2>&1; echo "bench rc $?"; tail -12 "$OUT/bench.txt"
profile_step 50
step "kgen test --sample 50 --seed 31"
lim "${T_SAMPLE:-45}" "$PY" -m kgen test --sample 50 --seed 31 --json > "$OUT/sample.json"; echo "sample rc $?"
step "summary"
"$PY" bench/lab_summary.py "$OUT" test.json sample.json lab.json
