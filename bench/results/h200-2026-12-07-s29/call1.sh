#!/usr/bin/env bash
# Session 29's call: head = the working tree with the fused slot transform (then a patch on 051387f: indexer_topk_slots,
# the top-k's body as select_row, then the row's indices mapped to cache slots in place; indexer_topk's SASS is
# main's but for one instruction's place, NVRTC 13.5 sm_90a fp8), base = main 143d0f4 (.xfer/pk/base.tar.xz).
# 1. head's GPU tests of the top-k (the slots ops and their chain among them) beside SGLang's top-k build; the
#    ops' host cost per eager call (scripts/host_breakdown.py: the slots ops' beside indexer_topk's);
# 2. head's top-k bench at B 1, 8, 32, 64 x 4K, 64K, 256K, k 512, equal and +-30 % (next_n 2), fp8: every row,
#    the slots ones (kgen_slots, kgen_select_slots, SGLang's top-k with its page table) among them;
# 3. while the call has spent less than 330 s: base against head, the top-k alone at the same shapes, one round
#    each order; then head's bench at k 2048 and the bf16 / fp4 variants.
#   run(command="bash bench/results/h200-2026-12-07-s29/call1.sh", carry=[".whl", ".xfer/pk"], timeout_s=600)
# Read: python bench/results/h100-2026-12-06-s22/full_table.py DIR/r/slots_head.json
#       python bench/results/h100-2026-12-06-s21/trees_table.py DIR/r/ab base head
cd "$(dirname "$0")/../../.."
[ -d .xfer/base ] || tar -xJf .xfer/pk/base.tar.xz -C .xfer
source scripts/device_call.sh
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
tests_beside_peers head tests/test_topk_gpu.py tests/test_topk_native.py
in_tree head $R/host.log 60 python3 scripts/host_breakdown.py --json $R/host.json
snap call1
SHAPES=(--batches 1,8,32,64 --keys 4096,65536,262144 --ks 512 --others "")
in_tree head $R/slots_head.log 150 python3 scripts/topk_shapes.py --json $R/slots_head.json "${SHAPES[@]}" \
  --time-limit 130
snap call1
if (( $(date +%s) - T0 < 330 )); then
  mkdir -p $R/ab
  topk_ab 1 "base head" -- "${SHAPES[@]}" --time-limit 80
  mv $R/topk_*_1.* $R/ab/
  snap call1
  topk_ab 1 "head base" -- "${SHAPES[@]}" --time-limit 80
  for f in $R/topk_*_1.*; do mv "$f" "$R/ab/$(basename "${f/_1./_2.}")"; done  # round 2
  snap call1
fi
if (( $(date +%s) - T0 < 450 )); then
  in_tree head $R/k2048_head.log 100 python3 scripts/topk_shapes.py --json $R/k2048_head.json --batches 1,8 \
    --keys 65536,262144 --ks 2048 --time-limit 80
fi
pack call1
