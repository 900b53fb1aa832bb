#!/usr/bin/env bash
# call1 of session 21: which parts of session 20's patch to keep. Trees: base (main 4524152's kernel), push (session
# 20's patch 1: the coarse merge through rank 0), s20 (its six patches), head (this checkout: s20 with the few
# candidates' winners stored at their rank's slot, no atomic), novote (head without vote_select: rank_select for
# every bin of at most kTopkRankCap candidates).
# 1. head's top-k and chained-op GPU tests, beside the peers' builds; 2. the top-k A/B of the five trees at B 1, 8, 32,
# 64 x 4K, 64K, 256K keys, equal and +-30 % next_n 2, k 512, fp8, two rounds (the second in the reverse order). From
# the repo root:
#   run(command="bash bench/results/h100-2026-12-06-s21/call1.sh", carry=[".whl", ".xfer/pk", ".xfer/base",
#       ".xfer/push", ".xfer/s20", ".xfer/novote"], timeout_s=480)
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
topk_ab 1 "base head s20 novote push" -- "${SHAPES[@]}"
snap call1
for f in $R/topk_*_1.*; do mv "$f" "${f/_1./_r1.}"; done  # round 1's, before the second run names its own _1
topk_ab 1 "push novote s20 head base" -- "${SHAPES[@]}"
pack call1
