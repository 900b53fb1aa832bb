#!/usr/bin/env bash
# Session 33's third call (prepared; no machine was left to run it): main as it stands (this checkout), no peer:
# 1. the GPU test of fp4's keys-in-registers cubin (tests/test_gpu_indexer.py -k fp4_keys_in_registers: its
#    asynchronous wgmma on the hardware);
# 2. fp4 keys at next_n 1, 2 and 4 (call2: next_n 4 took 2.2-3.5x next_n 1's time, fp8 1.66-1.83x): the shipped
#    cp.async cubin beside the pair cubin (two tokens per m64n128 group), the ring of 2 stages (3 CTAs per SM at
#    next_n 4 against 2), the keys-in-registers cubin (each token two m64n32 groups, the next issued before the
#    last is summed: kReaderWgKeyRegisters) and it on the ring of 2, one process, the same tensors
#    (scripts/reader_mtp_bench.py).
#   run(command="bash bench/results/h100-2026-12-07-s33/call3.sh", carry=[".whl", ".xfer/pk"], timeout_s=300)
# Read: python bench/results/h100-2026-12-06-s24/mtp_table.py DIR/r/fp4.json pairs/shipped s2/shipped kr/shipped \
#         kr_s2/shipped
cd "$(dirname "$0")/../../.."
NO_PEERS=1 source scripts/device_call.sh
export KGEN_BENCH_PEER=0
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
in_tree head $R/pytest_fp4.log 90 python3 -m pytest -p no:cacheprovider -q -rs tests/test_gpu_indexer.py \
  -k fp4_keys_in_registers
grep -E "^(FAILED|ERROR)|passed|failed" "$R/pytest_fp4.log" | cut -c1-300 | head -6
snap call3
S=32:65536:equal:1,32:65536:equal:2,32:65536:equal:4,128:16384:uniform:2,128:16384:uniform:4,1:65536:equal:4
T='{"pairs": {"kReaderWgPairs": 1}, "s2": {"kReaderWgStages": 2}, "kr": {"kReaderWgKeyRegisters": 1},'
T="$T"' "kr_s2": {"kReaderWgKeyRegisters": 1, "kReaderWgStages": 2}}'
in_tree head $R/fp4.log 150 env MTP_ALTERNATIVES=0 MTP_SHAPES="$S" MTP_TUNES="$T" \
  python3 scripts/reader_mtp_bench.py $R/fp4.json specs/dsv4/indexer_fp4.yaml
cut -c1-250 $R/fp4.log | tail -7
pack call3
