#!/usr/bin/env bash
# call2 of session 21. head: call1's novote without staging the winners of ranks other than 0 (session 20's patch 5
# made NVRTC spill 24 bytes a thread in the top-k: tests/test_compile.py); rank 0 still arrives relaxed at the last
# barrier. staged: main as call1 left it (novote, spilling). base: main's kernel before the patch (4524152).
# 1. head's top-k and chained-op GPU tests beside the peers' builds; 2. the top-k A/B of base, head and staged at B 1,
# 8, 32, 64 x 4K, 64K, 256K keys, equal and +-30 % next_n 2, k 512, fp8, two rounds (the second reversed); 3. the
# plan's bounds with head's kernel, now that a cluster's coarse merge costs less: wide4k (TOPK_WIDE_SLICE_KEYS 4096:
# rows of 64K on 16 CTAs where they fit), slice4k (TOPK_SLICE_KEYS 4096 too: 32K on 8), one8k (TOPK_ONE_CTA_KEYS
# 8192: 16K on 2), against head at B 1 and 8 x 16K, 32K, 64K keys, two rounds (plan_*.json); 4. ncu of head's top-k
# and SGLang's at 1 x 64K, 1 x 4K and 8 x 64K (session 19's profile_topk.py). From the repo root:
#   run(command="bash bench/results/h100-2026-12-06-s21/call2.sh", carry=[".whl", ".xfer/pk", ".xfer/base",
#       ".xfer/staged", ".xfer/wide4k", ".xfer/slice4k", ".xfer/one8k"], timeout_s=450)
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
SHAPES=(--batches 1,8,32,64 --keys 4096,65536,262144 --ks 512 --others "" --time-limit 45)
topk_ab 1 "base head staged" -- "${SHAPES[@]}"
for f in $R/topk_*_1.*; do mv "$f" "${f/_1./_r1.}"; done  # round 1's, before the second run names its own _1
snap call2
topk_ab 1 "staged head base" -- "${SHAPES[@]}"
for f in $R/topk_*_1.*; do mv "$f" "${f/_1./_r2.}"; done
snap call2
mkdir -p $R/plan
topk_ab 2 "head wide4k slice4k one8k" -- --batches 1,8 --keys 16384,32768,65536 --ks 512 --others "" --time-limit 30
mv $R/topk_*_1.* $R/topk_*_2.* $R/plan/
snap call2
in_tree head $R/ncu_head.log 90 ncu --clock-control none -k regex:topk -c 12 --section SpeedOfLight \
  --section WarpStateStats --section InstructionStats --section LaunchStats --section SourceCounters \
  -o $R/prof_head python3 $ROOT/bench/results/h100-2026-12-05-s19/profile_topk.py 1:65536:equal:1 1:4096:equal:1 \
  8:65536:equal:1
ncu --import $R/prof_head.ncu-rep --page details > $R/details_head.txt 2>&1
ncu --import $R/prof_head.ncu-rep --page source --csv --print-source sass 2> $R/src.err | gzip > $R/src_head.csv.gz
grep -E "^  [a-zA-Z_].*\(|Duration|Executed Instructions  " $R/details_head.txt | cut -c1-120 | head -30
rm -f $R/prof_head.ncu-rep
pack call2
