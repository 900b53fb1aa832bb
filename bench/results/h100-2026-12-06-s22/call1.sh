#!/usr/bin/env bash
# call1 of session 22: 1. the top-k's GPU tests of main (beside the peers' builds); 2. session 21's call3 step 1, the
# plan's bounds with main's kernel: wide4k (TOPK_WIDE_SLICE_KEYS 4096: rows of 64K on 16 CTAs of 4K where they fit),
# slice4k (TOPK_SLICE_KEYS 4096: 32K on 8), one8k (TOPK_ONE_CTA_KEYS 8192: 16K on clusters of 2) against head, B 1
# 8 and 32 x 4K, 16K, 32K, 64K keys, two rounds (trees made as bench/results/h100-2026-12-06-s21/call3.sh says),
# beside t512 and t256 (TOPK_THREADS 512 and 256, the second with TOPK_RANK_CAP 256: fewer warps for a short row's
# fixed steps, the prologue and the threshold scans, which a scheduler issues for every warp); 3. on an
# H200 only: the whole top-k bench of main (scripts/topk_shapes.py's default shapes: fp8 k 512 and 2048, B 1, 8, 32,
# 64 x 4K, 64K, 256K, equal lengths and +-30 % with next_n 2; bf16 and fp4 at B 1 and 32 x 64K).
#   run(command="bash bench/results/h100-2026-12-06-s22/call1.sh", carry=[".whl", ".xfer/pk", ".xfer/wide4k", ".xfer/slice4k",
#       ".xfer/one8k", ".xfer/t512", ".xfer/t256"], timeout_s=600)
# Read: python bench/results/h100-2026-12-06-s21/trees_table.py DIR/r/plan head wide4k slice4k one8k t512 t256
cd "$(dirname "$0")/../../.."
source scripts/device_call.sh
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$GPU"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
( in_tree head $R/pytest_topk_gpu.log 200 python3 -m pytest -p no:cacheprovider -rs tests/test_topk_gpu.py \
  tests/test_topk_native.py ) &
PT=$!
peers_ready
wait $PT; echo "tests done $(el)"
grep -E "^(FAILED|ERROR)|passed|failed" $R/pytest_topk_gpu.log | cut -c1-300 | head -12
snap call1
mkdir -p $R/plan
topk_ab 2 "head wide4k slice4k one8k t512 t256" -- --batches 1,8,32 --keys 4096,16384,32768,65536 --ks 512 \
  --others "" --time-limit 30
mv $R/topk_*_1.* $R/topk_*_2.* $R/plan/
snap call1
case $GPU in
  *H200*) in_tree head $R/full_head.log 180 python3 scripts/topk_shapes.py --json $R/full_head.json \
            --time-limit 150 ;;
esac
pack call1
