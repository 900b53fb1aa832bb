#!/usr/bin/env bash
# call2 of session 21: the branch as it lands (head: session 20's patch with the rank count's winners stored at their
# slots and no vote_select; the kernel of call1's novote, the same SASS) against main before it (base, 4524152's
# kernel). 1. head's top-k and chained-op GPU tests beside the peers' builds; 2. the plan's bounds, now that a
# cluster's coarse merge costs less (the kernel is head's in each): wide4k (TOPK_WIDE_SLICE_KEYS 4096: rows of 64K
# on 16 CTAs where they fit), slice4k (TOPK_SLICE_KEYS 4096 too: 32K on 8), one8k (TOPK_ONE_CTA_KEYS 8192: 16K on
# 2), head, B 1 and 8 x 16K, 32K, 64K keys, two rounds (plan_*.json); 3. ncu of head's top-k and SGLang's at 1 x 64K,
# 1 x 4K and 8 x 64K (session 19's profile_topk.py); 4. one round of the top-k A/B over every shape of
# scripts/topk_shapes.py (fp8 at k 512 and 2048, bf16 and fp4 keys at B 1 and 32 x 64K). From the repo root:
#   run(command="bash bench/results/h100-2026-12-06-s21/call2.sh", carry=[".whl", ".xfer/pk", ".xfer/base",
#       ".xfer/wide4k", ".xfer/slice4k", ".xfer/one8k"], timeout_s=480)
cd "$(dirname "$0")/../../.."
source scripts/device_call.sh
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
( in_tree head $R/pytest_topk_gpu.log 200 python3 -m pytest -p no:cacheprovider -rs tests/test_topk_gpu.py \
  tests/test_topk_native.py ) &
PT=$!
peers_ready
wait $PT; echo "tests done $(el)"
grep -E "^(FAILED|ERROR)|passed|failed" $R/pytest_topk_gpu.log | cut -c1-300 | head -12
snap call2
topk_ab 2 "head wide4k slice4k one8k" -- --batches 1,8 --keys 16384,32768,65536 --ks 512 --others "" --time-limit 30
snap call2
for f in $R/topk_*_1.* $R/topk_*_2.*; do mv "$f" "${f/topk_/plan_}"; done  # step 2's, before step 4 names its own
in_tree head $R/ncu_head.log 90 ncu --clock-control none -k regex:topk -c 12 --section SpeedOfLight \
  --section WarpStateStats --section InstructionStats --section LaunchStats --section SourceCounters \
  -o $R/prof_head python3 $ROOT/bench/results/h100-2026-12-05-s19/profile_topk.py 1:65536:equal:1 1:4096:equal:1 \
  8:65536:equal:1
ncu --import $R/prof_head.ncu-rep --page details > $R/details_head.txt 2>&1
ncu --import $R/prof_head.ncu-rep --page source --csv --print-source sass 2> $R/src.err | gzip > $R/src_head.csv.gz
grep -E "^  [a-zA-Z_].*\(|Duration|Executed Instructions  " $R/details_head.txt | cut -c1-120 | head -30
rm -f $R/prof_head.ncu-rep
snap call2
ab 1 "base head" topk 150 -- python3 "$ROOT/scripts/topk_shapes.py" --json {out} --time-limit 110
pack call2
