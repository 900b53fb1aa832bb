#!/usr/bin/env bash
# call1 of session 20: branch topk-push against main (base: .xfer/base, 4524152). push (.xfer/push, patch 1 alone): the
# cluster's coarse histograms added into rank 0's, rank 0 finding the threshold, the first barrier's wait after the
# pass, relaxed arrivals where a rank publishes nothing; head (this checkout, main + topk-push.patch): push, winners
# stored after the last barrier, candidates ranked by warp votes.
# 1. head's top-k and chained-op GPU tests, beside the peers' builds; 2. the top-k A/B at B 1, 8, 32, 64 x 4K, 64K,
# 256K keys, equal and +-30 % next_n 2, k 512, fp8, base and head; 3. ncu of head's top-k and SGLang's at 1 x 64K,
# 1 x 4K and 8 x 64K (session 19's profile_topk.py); 4. push on the same shapes; 5. a second round of head and base
# (each step's results kept as the device time allows). From the repo root:
#   run(command="bash bench/results/h100-2026-12-05-s20/call1.sh", carry=[".whl", ".xfer/pk", ".xfer/base",
#       ".xfer/push"], timeout_s=600)
cd "$(dirname "$0")/../../.."
source scripts/device_call.sh
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
( in_tree head $R/pytest_topk_gpu.log 200 python3 -m pytest -p no:cacheprovider -rs tests/test_topk_gpu.py \
  tests/test_topk_native.py ) &
PT=$!
peers_ready
wait $PT; echo "tests done $(el)"
grep -E "^(FAILED|ERROR)|passed|failed" $R/pytest_topk_gpu.log | cut -c1-300 | head -12
snap call1
SHAPES=(--batches 1,8,32,64 --keys 4096,65536,262144 --ks 512 --others "" --time-limit 45)
topk_ab 1 "base head" -- "${SHAPES[@]}"
snap call1
in_tree head $R/ncu_head.log 90 ncu --clock-control none -k regex:topk -c 12 --section SpeedOfLight \
  --section WarpStateStats --section InstructionStats --section LaunchStats --section SourceCounters \
  -o $R/prof_head python3 $ROOT/bench/results/h100-2026-12-05-s19/profile_topk.py 1:65536:equal:1 1:4096:equal:1 \
  8:65536:equal:1
ncu --import $R/prof_head.ncu-rep --page details > $R/details_head.txt 2>&1
ncu --import $R/prof_head.ncu-rep --page source --csv --print-source sass 2> $R/src.err | gzip > $R/src_head.csv.gz
grep -E "^  [a-zA-Z_].*\(|Duration|Executed Instructions  " $R/details_head.txt | cut -c1-120 | head -30
rm -f $R/prof_head.ncu-rep
snap call1
topk_ab 1 "push" -- "${SHAPES[@]}"
snap call1
for f in $R/topk_*_1.*; do mv "$f" "${f/_1./_r1.}"; done  # round 1's, before ab's second run names its own _1
topk_ab 1 "head base" -- "${SHAPES[@]}"
pack call1
