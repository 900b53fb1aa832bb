#!/usr/bin/env bash
# Session 34's first call: session 33's call3 (prepared, not run), then the GPU tests of the final tree.
# 1. the GPU test of fp4's keys-in-registers cubin (tests/test_gpu_indexer.py -k fp4_keys_in_registers);
# 2. fp4 keys at next_n 1, 2 and 4: the shipped cp.async cubin beside the pair cubin, the ring of 2 stages, the
#    keys-in-registers cubin (kReaderWgKeyRegisters) and it on the ring of 2, one process, the same tensors
#    (scripts/reader_mtp_bench.py);
# 3. pytest -m gpu on this tree (280 s at most; session 33's cut at 240 s left the top-k's tests unrun).
#   run(command="bash bench/results/h100-2026-12-07-s34/call1.sh", carry=[".whl", ".xfer/pk"], timeout_s=600)
# Read: python bench/results/h100-2026-12-06-s24/mtp_table.py DIR/r/fp4.json pairs/shipped s2/shipped kr/shipped \
#         kr_s2/shipped
cd "$(dirname "$0")/../../.."
NO_PEERS=1 source scripts/device_call.sh
export KGEN_BENCH_PEER=0
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
in_tree head $R/pytest_fp4.log 90 python3 -m pytest -p no:cacheprovider -q -rs tests/test_gpu_indexer.py \
  -k fp4_keys_in_registers
grep -E "^(FAILED|ERROR)|passed|failed" "$R/pytest_fp4.log" | cut -c1-300 | head -6
snap call1
S=32:65536:equal:1,32:65536:equal:2,32:65536:equal:4,128:16384:uniform:2,128:16384:uniform:4,1:65536:equal:4
T='{"pairs": {"kReaderWgPairs": 1}, "s2": {"kReaderWgStages": 2}, "kr": {"kReaderWgKeyRegisters": 1},'
T="$T"' "kr_s2": {"kReaderWgKeyRegisters": 1, "kReaderWgStages": 2}}'
in_tree head $R/fp4.log 150 env MTP_ALTERNATIVES=0 MTP_SHAPES="$S" MTP_TUNES="$T" \
  python3 scripts/reader_mtp_bench.py $R/fp4.json specs/dsv4/indexer_fp4.yaml
cut -c1-250 $R/fp4.log | tail -7
snap call1
in_tree head $R/pytest_gpu.log 280 python3 -m pytest -p no:cacheprovider -q -rs -m gpu tests/test_topk_gpu.py \
  tests/test_gpu_indexer.py tests/test_ops_gpu.py tests/test_gpu.py tests/test_engines_gpu.py
grep -E "^(FAILED|ERROR)|passed|failed" "$R/pytest_gpu.log" | cut -c1-300 | head -12
pack call1
