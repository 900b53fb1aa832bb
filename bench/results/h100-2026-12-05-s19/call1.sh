#!/usr/bin/env bash
# call1 of session 19. 1. The top-k GPU tests of branch topk-prefetch (tree .xfer/pf), beside the peers' builds;
# 2. ncu of kgen's top-k and SGLang's on the same logits (profile_topk.py: 16 x 256K, 1 x 256K equal, 16 x 256K
# +-30 % next_n 2) on main (head): SpeedOfLight, MemoryWorkloadAnalysis, WarpStateStats, InstructionStats,
# LaunchStats, Occupancy, SchedulerStats, SourceCounters; 3. the top-k A/B of pf against head at rows of 4K and 8K
# keys (the one-CTA path the prefetch touches), equal and +-30 % next_n 2, k 512, two rounds. From the repo root:
#   run(command="bash bench/results/h100-2026-12-05-s19/call1.sh", carry=[".whl", ".xfer/pk", ".xfer/pf"],
#       timeout_s=600)
cd "$(dirname "$0")/../../.."
HERE=bench/results/h100-2026-12-05-s19
source scripts/device_call.sh
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
( in_tree pf $R/pytest_topk_gpu_pf.log 230 python3 -m pytest -q -s -p no:cacheprovider -rs tests/test_topk_gpu.py ) \
  > $R/pytest_pf.status 2>&1 &
PT=$!
peers_ready
wait $PT; cat $R/pytest_pf.status
grep -E "^(FAILED|ERROR)|passed|failed" $R/pytest_topk_gpu_pf.log | cut -c1-300 | head -12
snap call1
timeout 200 ncu --clock-control none -k regex:topk -c 12 --section SpeedOfLight --section MemoryWorkloadAnalysis \
  --section WarpStateStats --section InstructionStats --section LaunchStats --section Occupancy \
  --section SchedulerStats --section SourceCounters -o $R/prof python3 $HERE/profile_topk.py > $R/ncu.log 2>&1
echo "ncu rc=$? $(el)"; tail -3 $R/ncu.log | cut -c1-200
ncu --import $R/prof.ncu-rep --page details > $R/details.txt 2>&1
ncu --import $R/prof.ncu-rep --page source --csv --print-source sass 2> $R/src.err | gzip > $R/src.csv.gz
grep -E "^  [a-zA-Z_].*\(|Duration|Executed Instructions  |Memory Throughput|Registers Per" $R/details.txt \
  | cut -c1-120 | head -60
rm -f $R/prof.ncu-rep
snap call1
topk_ab 2 "pf head" -- --batches 1,8,32,64 --keys 4096,8192 --ks 512 --others "" --time-limit 60
pack call1
