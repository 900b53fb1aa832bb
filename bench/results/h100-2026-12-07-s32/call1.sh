#!/usr/bin/env bash
# Session 32's first call: the one-CTA top-k's row held in registers (head: this checkout's working tree with
# ../h100-2026-12-07-s31/topk-held-row.patch applied) against main (.xfer/pk/main.tar.xz, git archive of main),
# no peer built or loaded:
# 1. head's top-k GPU tests;
# 2. the top-k rows at 1, 8 and 64 rows of 4K, 8K (the held edge) and 16K keys (one CTA a row, read twice in both
#    trees: the control), k 512, equal (next_n 1) and +-30 % (next_n 2), main and head alternating, two rounds.
#   run(command="bash bench/results/h100-2026-12-07-s32/call1.sh", carry=[".whl", ".xfer/pk"], timeout_s=600)
# Read: python bench/results/h100-2026-12-06-s21/trees_table.py DIR/r main head
cd "$(dirname "$0")/../../.."
[ -d .xfer/main ] || { mkdir -p .xfer/main && tar -xJf .xfer/pk/main.tar.xz -C .xfer/main; }
NO_PEERS=1 source scripts/device_call.sh
export KGEN_BENCH_PEER=0  # topk_shapes.py would build SGLang's top-k from the unpacked kit
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
in_tree head $R/pytest_head.log 120 python3 -m pytest -p no:cacheprovider -q tests/test_topk_gpu.py tests/test_topk_native.py
grep -E "^(FAILED|ERROR)|passed|failed" "$R/pytest_head.log" | cut -c1-300 | head -8
snap call1
topk_ab 2 "main head" -- --batches 1,8,64 --keys 4096,8192,16384 --ks 512 --others "" --time-limit 100
pack call1
