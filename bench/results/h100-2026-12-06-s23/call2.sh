#!/usr/bin/env bash
# call2 of session 23. Tree rank: main (0ade3f2, vote and chain2 landed) with rank-split.patch (the rank count of a
# threshold bin's candidates split over 2^p lanes a candidate, p = log2(1024) - ceil(log2(n)) up to a warp, the parts
# added by p shuffles: the chain on the block's critical path n / 2^p shared loads instead of n). 1. rank's GPU tests
# beside the peers' builds, then head's (the landed vote and chain2 together, first on a GPU here); 2. rank against
# head at B 1, 8, 32, 64 x 4K, 64K, 256K, k 512, equal and +-30 % (next_n 2), two rounds, the second in reverse
# order, and at k 2048 (B 1, 8 x 64K, 256K) two rounds; 3. ncu of head at 8 x 64K equal, k 512 and k 2048 (why k
# 2048 costs the cluster path more), and at 1 x 4K k 512. Made from the repository root as:
#   rm -rf .xfer/rank && mkdir -p .xfer/rank && git archive HEAD kgen templates specs scripts tests pyproject.toml |
#     tar -x -C .xfer/rank && patch -p1 -d .xfer/rank < bench/results/h100-2026-12-06-s23/rank-split.patch
#   run(command="bash bench/results/h100-2026-12-06-s23/call2.sh", carry=[".whl", ".xfer/pk", ".xfer/rank"],
#       timeout_s=600)
# Read: python bench/results/h100-2026-12-06-s21/trees_table.py DIR/r/ab head rank (and DIR/r/k2048)
cd "$(dirname "$0")/../../.."
source scripts/device_call.sh
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$GPU"
tests_beside_peers rank tests/test_topk_gpu.py tests/test_topk_native.py
in_tree head $R/pytest_head.log 200 python3 -m pytest -p no:cacheprovider -rs tests/test_topk_gpu.py \
  tests/test_topk_native.py
grep -E "^(FAILED|ERROR)|passed|failed" $R/pytest_head.log | cut -c1-300 | head -12
snap call2
SHAPES=(--batches 1,8,32,64 --keys 4096,65536,262144 --ks 512 --others "" --time-limit 80)
K2048=(--batches 1,8 --keys 65536,262144 --ks 2048 --others "" --time-limit 60)
mkdir -p $R/ab $R/k2048
topk_ab 1 "head rank" -- "${SHAPES[@]}"
mv $R/topk_*_1.* $R/ab/
topk_ab 1 "head rank" -- "${K2048[@]}"
mv $R/topk_*_1.* $R/k2048/
snap call2
topk_ab 1 "rank head" -- "${SHAPES[@]}"
for f in $R/topk_*_1.*; do mv "$f" "$R/ab/$(basename "${f/_1./_2.}")"; done  # round 2
topk_ab 1 "rank head" -- "${K2048[@]}"
for f in $R/topk_*_1.*; do mv "$f" "$R/k2048/$(basename "${f/_1./_2.}")"; done
snap call2
TOPK_PROFILE=bench/results/h100-2026-12-06-s23/profile_topk.py topk_ncu head 8:65536:equal:1:512 \
  8:65536:equal:1:2048 1:4096:equal:1:512
pack call2
