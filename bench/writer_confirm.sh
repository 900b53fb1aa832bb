#!/usr/bin/env bash
# The writer-speed confirmation run on the GPU machine (bench/results/h200-2026-11-30/README.md), steps
# in order of importance, each under its own time limit:
#   1. kgen test of every shipped variant (byte-exact against the reference, N = 1 ... 1M)
#   2. kgen test --sample 50 (random accepted specs)
#   3. kgen bench (production-like inputs, random positions) -> bench.json; consecutive positions for
#      the fp8 indexer -> bench_consecutive.json
#   4. pytest -m gpu (PDL under graph capture, decode plans, shipped + random specs)
#   5. bench/writer_experiments.py --plan run2 (launch shapes side by side) -> lab.json
#   6. ncu of PROFILE_SPECS at 1M tokens -> ncu.txt
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/device_env.sh
export KGEN_BENCH_COMPILE=0
gpu_clocks
SPECS="specs/dsv4.yaml specs/dsv32_indexer.yaml"
step "kgen test $SPECS"
lim "${T_TEST:-100}" "$PY" -m kgen.cli test $SPECS --json > "$OUT/test.json"; echo "test rc $?"
step "kgen test --sample 50 --seed 30"
lim "${T_SAMPLE:-80}" "$PY" -m kgen.cli test --sample 50 --seed 30 --json > "$OUT/sample.json"; echo "sample rc $?"
step "kgen bench $SPECS"
KGEN_BENCH_BUDGET_S=$(( ${T_BENCH:-150} - 15 )) lim "${T_BENCH:-150}" "$PY" -m kgen.cli bench $SPECS \
  --json "$OUT/bench.json" > "$OUT/bench.txt" 2>&1; echo "bench rc $?"; tail -45 "$OUT/bench.txt"
step "kgen bench --positions consecutive (fp8 indexer)"
lim "${T_CONSEC:-40}" "$PY" -m kgen.cli bench specs/dsv4/indexer_fp8.yaml --positions consecutive --tokens 65536 \
  --tokens 1048576 --json "$OUT/bench_consecutive.json" > "$OUT/bench_consecutive.txt" 2>&1; echo "consecutive rc $?"
step "pytest -m gpu"
KGEN_GPU_SAMPLES=${KGEN_GPU_SAMPLES:-4} lim "${T_PYTEST:-120}" "$PY" -m pytest -m gpu -q -p no:cacheprovider \
  ${PYTEST_K:+-k "$PYTEST_K"} --junitxml="$OUT/junit.xml" tests/ > "$OUT/pytest.txt" 2>&1; echo "pytest rc $?"; tail -5 "$OUT/pytest.txt"
step "lab run2"
lim "${T_LAB:-90}" "$PY" bench/writer_experiments.py --plan run2 --json "$OUT/lab.json" > "$OUT/lab.txt" 2>&1
echo "lab rc $?"; cut -c1-30,95-230 "$OUT/lab.txt" | tail -60
profile_step 80
step "summary"
"$PY" bench/lab_summary.py "$OUT" test.json sample.json
