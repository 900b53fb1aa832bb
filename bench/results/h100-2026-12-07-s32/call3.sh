#!/usr/bin/env bash
# Session 32's lean call (call2 found no machine in six starts; 700 s of device time were left): main
# (.xfer/pk/main.tar.xz: git archive of d8ae45b) against head (this checkout: 71c148b, the evict-first cubin choosing
# its L2 policy on the device), no peer built or loaded:
# 1. the reader, main then head (scripts/reader_mtp_bench.py, MTP_ALTERNATIVES=0): the shipped cubin and the same
#    without the evict-first policy (ef0) at 8 x 64K uniform (keys 40 MB: the host picks the evict-first cubin from
#    8 x max_seq_len) and controls;
# 2. head's TMA reader tests (the evict-first cubin under both policies) and the writer bench's host record.
#   run(command="bash bench/results/h100-2026-12-07-s32/call3.sh", carry=[".whl", ".xfer/pk"], timeout_s=420)
# Read: python bench/results/h100-2026-12-07-s32/ef_table.py DIR/r
cd "$(dirname "$0")/../../.."
[ -d .xfer/main ] || { mkdir -p .xfer/main && tar -xJf .xfer/pk/main.tar.xz -C .xfer/main; }
NO_PEERS=1 source scripts/device_call.sh
export KGEN_BENCH_PEER=0
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
S=8:65536:uniform:2,8:65536:uniform:1,32:65536:uniform:1,1:262144:equal:1,64:4096:pm30:2
ab 1 "main head" ef 80 -- env MTP_ALTERNATIVES=0 MTP_SHAPES="$S" MTP_TUNES='{"ef0": {"kReaderWgEvictFirst": 0}}' \
  python3 scripts/reader_mtp_bench.py {out} specs/dsv4/indexer_fp8.yaml
snap call3
in_tree head $R/pytest_head.log 150 python3 -m pytest -p no:cacheprovider -q tests/test_gpu_indexer.py -k tma \
  tests/test_gpu.py::test_bench_smoke
grep -E "^(FAILED|ERROR)|passed|failed" "$R/pytest_head.log" | cut -c1-300 | head -8
pack call3
