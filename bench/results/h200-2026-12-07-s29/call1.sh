#!/usr/bin/env bash
# Session 29's call: head = the working tree with the fused slot transform (`indexer_topk_slots`: the top-k's
# body as select_row, then the row's indices mapped to cache slots in place; indexer_topk's machine code moved by
# the restructure), base = main 143d0f4 (packed into .xfer/pk/base.tar.xz, carried with the peers).
# 1. head's GPU tests of the top-k (the slots ops and their chain among them) beside SGLang's top-k build;
# 2. the top-k alone, base against head, at B 1, 8, 32, 64 x 4K, 64K, 256K, k 512, equal and +-30 % (next_n 2),
#    two rounds, the second in reverse order (SGLang's top-k in the same processes);
# 3. while the call has spent less than 380 s, head's whole top-k bench (the peers in the same process).
#   run(command="bash bench/results/h200-2026-12-07-s29/call1.sh", carry=[".whl", ".xfer/pk"], timeout_s=600)
# Read: python bench/results/h100-2026-12-06-s21/trees_table.py DIR/r/ab base head
#       python bench/results/h100-2026-12-06-s22/full_table.py DIR/r/full_head.json
cd "$(dirname "$0")/../../.."
[ -d .xfer/base ] || tar -xJf .xfer/pk/base.tar.xz -C .xfer
source scripts/device_call.sh
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
tests_beside_peers head tests/test_topk_gpu.py tests/test_topk_native.py
snap call1
SHAPES=(--batches 1,8,32,64 --keys 4096,65536,262144 --ks 512 --others "" --time-limit 80)
mkdir -p $R/ab
topk_ab 1 "base head" -- "${SHAPES[@]}"
mv $R/topk_*_1.* $R/ab/
topk_ab 1 "head base" -- "${SHAPES[@]}"
for f in $R/topk_*_1.*; do mv "$f" "$R/ab/$(basename "${f/_1./_2.}")"; done  # round 2
snap call1
if (( $(date +%s) - T0 < 380 )); then
  in_tree head $R/full_head.log 150 python3 scripts/topk_shapes.py --json $R/full_head.json --time-limit 130
fi
pack call1
