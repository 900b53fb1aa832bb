#!/usr/bin/env bash
# call3 of session 21, for the next session with a device: call2's steps 3 and 4, which the device time cut. 1. The
# plan's bounds with main's kernel, now that a cluster's coarse merge costs less: wide4k (TOPK_WIDE_SLICE_KEYS 4096:
# rows of 64K on 16 CTAs where they fit, as SGLang's top-k runs them), slice4k (TOPK_SLICE_KEYS 4096 too: 32K on 8),
# one8k (TOPK_ONE_CTA_KEYS 8192: 16K on clusters of 2), against head (this checkout) at B 1 and 8 x 16K, 32K, 64K
# keys, two rounds; 2. ncu of head's top-k and SGLang's at 1 x 64K, 1 x 4K and 8 x 64K. Each tree is main with one
# line of kgen/topk_plan.py changed, made from the repo root as:
#   for t in "wide4k:TOPK_WIDE_SLICE_KEYS = TOPK_SLICE_KEYS:TOPK_WIDE_SLICE_KEYS = 4096" \
#            "slice4k:TOPK_SLICE_KEYS = 8192:TOPK_SLICE_KEYS = 4096" \
#            "one8k:TOPK_ONE_CTA_KEYS = 16384:TOPK_ONE_CTA_KEYS = 8192"; do
#     IFS=: read -r n old new <<< "$t"; rm -rf .xfer/$n; mkdir -p .xfer/$n
#     git archive HEAD kgen templates specs scripts | tar -x -C .xfer/$n
#     sed -i "s/^$old\$/$new/" .xfer/$n/kgen/topk_plan.py; grep -q "^$new\$" .xfer/$n/kgen/topk_plan.py; done
#   run(command="bash bench/results/h100-2026-12-06-s21/call3.sh", carry=[".whl", ".xfer/pk", ".xfer/wide4k",
#       ".xfer/slice4k", ".xfer/one8k"], timeout_s=300)
# Read: python bench/results/h100-2026-12-06-s21/trees_table.py DIR/r head wide4k slice4k one8k
cd "$(dirname "$0")/../../.."
source scripts/device_call.sh
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
peers_ready
topk_ab 2 "head wide4k slice4k one8k" -- --batches 1,8 --keys 16384,32768,65536 --ks 512 --others "" --time-limit 30
snap call3
topk_ncu head 1:65536:equal:1 1:4096:equal:1 8:65536:equal:1
pack call3
