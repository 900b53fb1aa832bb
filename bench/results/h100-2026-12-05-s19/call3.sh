#!/usr/bin/env bash
# call3 of session 19: branch topk-values (head: this checkout, the sweep testing a value against the bin's floor
# first) against main (base: .xfer/base, 2da97cc).
# 1. head's top-k GPU tests, beside the peers' builds; 2. the top-k at B 1-64 x 4K, 64K, 256K keys, equal and +-30 %
# next_n 2, k 512, fp8, SGLang's top-k and DeepGEMM's logits beside, base and head alternating; 3. ncu of head's
# top-k and SGLang's at 16 x 256K and 1 x 256K (profile_topk.py); 4. a second A/B round. From the repo root:
#   run(command="bash bench/results/h100-2026-12-05-s19/call3.sh", carry=[".whl", ".xfer/pk", ".xfer/base"],
#       timeout_s=600)
cd "$(dirname "$0")/../../.."
HERE=bench/results/h100-2026-12-05-s19
source scripts/device_call.sh
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
( in_tree head $R/pytest_topk_gpu_head.log 200 python3 -m pytest -q -p no:cacheprovider -rs tests/test_topk_gpu.py ) &
PT=$!
peers_ready
wait $PT; echo "tests done $(el)"
grep -E "^(FAILED|ERROR)|passed|failed" $R/pytest_topk_gpu_head.log | cut -c1-300 | head -12
snap call3
SHAPES=(--batches 1,8,16,32,64 --keys 4096,65536,262144 --ks 512 --others "" --time-limit 80)
topk_ab 1 "base head" -- "${SHAPES[@]}"
snap call3
timeout 90 ncu --clock-control none -k regex:topk -c 12 --section SpeedOfLight --section WarpStateStats \
  --section InstructionStats --section LaunchStats --section SourceCounters -o $R/prof python3 $HERE/profile_topk.py \
  > $R/ncu.log 2>&1
echo "ncu rc=$? $(el)"
ncu --import $R/prof.ncu-rep --page details > $R/details.txt 2>&1
ncu --import $R/prof.ncu-rep --page source --csv --print-source sass 2> $R/src.err | gzip > $R/src.csv.gz
grep -E "^  [a-zA-Z_].*\(|Duration|Executed Instructions  " $R/details.txt | cut -c1-120 | head -40
rm -f $R/prof.ncu-rep
snap call3
for f in $R/topk_*_1.*; do mv "$f" "${f/_1./_r1.}"; done  # round 1's, before ab's second run names its own _1
topk_ab 1 "head base" -- "${SHAPES[@]}"
pack call3
