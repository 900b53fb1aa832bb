#!/usr/bin/env bash
# Session 33's third call: main after the revert of 71c148b (this checkout), no peer built:
# 1. fp4 keys at next_n 1, 2 and 4 (call2: next_n 4 took 3.5-3.9x next_n 1's time on 32-128 rows, fp8 1.7-2.0x):
#    the shipped cp.async cubin beside the pair cubin (two tokens per m64n128 group), the ring of 2 stages (more
#    CTAs per SM at next_n 4: 3 against 2) and both, one process, the same tensors (scripts/reader_mtp_bench.py).
# (The top-k's GPU tests on this tree were cut for the device time left: its kernels and the reader are d8ae45b's,
# whose tests passed in call1.)
#   run(command="bash bench/results/h100-2026-12-07-s33/call3.sh", carry=[".whl", ".xfer/pk"], timeout_s=200)
# Read: python bench/results/h100-2026-12-06-s24/mtp_table.py DIR/r/fp4.json pairs/shipped s2/shipped pairs_s2/shipped
cd "$(dirname "$0")/../../.."
NO_PEERS=1 source scripts/device_call.sh
export KGEN_BENCH_PEER=0
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
S=32:65536:equal:1,32:65536:equal:2,32:65536:equal:4,128:16384:uniform:2,128:16384:uniform:4,1:65536:equal:4
in_tree head $R/fp4.log 150 env MTP_ALTERNATIVES=0 MTP_SHAPES="$S" \
  MTP_TUNES='{"pairs": {"kReaderWgPairs": 1}, "s2": {"kReaderWgStages": 2}, "pairs_s2": {"kReaderWgPairs": 1, "kReaderWgStages": 2}}' \
  python3 scripts/reader_mtp_bench.py $R/fp4.json specs/dsv4/indexer_fp4.yaml
cut -c1-250 $R/fp4.log | tail -9
pack call3
