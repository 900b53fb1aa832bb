#!/usr/bin/env bash
# Session 31's sixth call: the one-CTA top-k's row held in registers from its first read to its sweep (head: this
# checkout's working tree with topk-held-row.patch applied, `git apply`) against main (the tree "main",
# .xfer/pk/main.tar.xz: git archive of main), no peer built or loaded:
# 1. head's top-k GPU tests;
# 2. the top-k rows at rows of 4K and 16K keys (one CTA a row), main then head, one round (scripts/topk_shapes.py).
#   run(command="bash bench/results/h100-2026-12-07-s31/call6.sh", carry=[".whl", ".xfer/pk"], timeout_s=300)
# As it ran in session 31 (the patch's first form, generic lambdas) NVRTC 13.0 refused head's top-k, and main's
# bench spent its time limit building SGLang's top-k (its kit was unpacked): both mended below and in the patch.
# Read: python bench/results/h100-2026-12-06-s21/trees_table.py DIR/r main head
cd "$(dirname "$0")/../../.."
[ -d .xfer/main ] || { mkdir -p .xfer/main && tar -xJf .xfer/pk/main.tar.xz -C .xfer/main; }
NO_PEERS=1 source scripts/device_call.sh
export KGEN_BENCH_PEER=0  # topk_shapes.py would build SGLang's top-k from the unpacked kit
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
in_tree head $R/pytest_head.log 90 python3 -m pytest -p no:cacheprovider -q tests/test_topk_gpu.py tests/test_topk_native.py
grep -E "^(FAILED|ERROR)|passed|failed" "$R/pytest_head.log" | cut -c1-300 | head -8
snap call6
topk_ab 1 "main head" -- --batches 1,64 --keys 4096,16384 --ks 512 --others "" --time-limit 45
pack call6
