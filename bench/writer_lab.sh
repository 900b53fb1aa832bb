#!/usr/bin/env bash
# The writer-speed lab run on the GPU machine (bench/results/h200-2026-11-30/README.md):
#   OLD_INCLUDE=DIR PLAN=full|base bash bench/writer_lab.sh
# 1. bench/writer_experiments.py: old vs new kernel headers and launch shapes, side by side in one
#    process on kgen bench's inputs -> $OUT/lab.json, $OUT/lab.txt
# 2. scripts/device_run.sh profile: ncu (registers, occupancy, DRAM throughput, stalls) + SASS opcode
#    histograms of PROFILE_SPECS at 1M tokens -> $OUT/ncu.txt, $OUT/*.sass
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/device_env.sh
gpu_clocks
timeout -s INT -k 10 "${T_LAB:-300}" "$PY" bench/writer_experiments.py ${OLD_INCLUDE:+--old-include "$OLD_INCLUDE"} \
  --plan "${PLAN:-full}" --json "$OUT/lab.json" 2>&1 | tee "$OUT/lab.txt" | tail -n "${TAIL:-400}"
echo "lab rc ${PIPESTATUS[0]}"
if [ -n "${PROFILE_SPECS:-}" ]; then
  OUT=$OUT KGEN_SKIP_WHEELS=1 bash scripts/device_run.sh profile > "$OUT/profile.log" 2>&1
  echo "profile rc $?"
  grep -E "^---|Registers Per|Achieved Occupancy|DRAM Throughput|Compute \(SM\) Thr|Executed Ipc A|Theoretical Occ|Duration|Block Limit Reg|Memory Throughput" "$OUT/ncu.txt" | head -60
fi
