#!/usr/bin/env bash
# Session 36's third call: fp8's MTP launches of 2 tokens load the keys-in-registers cubin (READER_WG_KEY_REGISTER_TOKENS
# 3 -> 2; this checkout, head) beside main before it (.xfer/main: `git archive 8bd2096 kgen templates specs scripts`),
# no peer:
# 1. head's fp8 reader GPU tests (ragged lengths, next_n 1-4, both cubins by name and through the launch choice,
#    eager op calls);
# 2. main and head, one process each (the device time left allowed one round): fp8 at next_n 2 on six of call2's shapes through each
#    tree's shipped launch.
#   run(command="bash bench/results/h100-2026-12-07-s36/call3.sh", carry=[".whl", ".xfer/pk", ".xfer/main"],
#       timeout_s=240)
# Read: python bench/results/h100-2026-12-06-s26/reader_trees.py DIR/r mtp main head
cd "$(dirname "$0")/../../.."
NO_PEERS=1 source scripts/device_call.sh
export KGEN_BENCH_PEER=0
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
in_tree head $R/pytest_head.log 90 python3 -m pytest -p no:cacheprovider -q -rs tests/test_gpu_indexer.py \
  -k "fp8 and (kernel_matches or tma_variant_matches or keys_in_registers or eager)"
grep -E "^(FAILED|ERROR)|passed|failed" "$R/pytest_head.log" | cut -c1-300 | head -8
snap call3
S=8:65536:uniform:2,64:4096:pm30:2,1:65536:equal:2,32:4096:equal:2,32:65536:equal:2,128:16384:uniform:2
ab 1 "main head" mtp 30 -- env MTP_ALTERNATIVES=0 MTP_SHAPES=$S python3 scripts/reader_mtp_bench.py {out} \
  specs/dsv4/indexer_fp8.yaml
pack call3
