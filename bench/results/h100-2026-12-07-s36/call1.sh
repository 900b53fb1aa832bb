#!/usr/bin/env bash
# Session 36's first call: session 35's aligned-smem.patch (the wgmma paths' dynamic shared memory declared 1024-B
# aligned) beside main, then main's read-side batches beside DeepGEMM:
# 1. the patched tree's reader GPU tests (fp8, fp4, bf16: ragged lengths, next_n 1-4, the TMA and cp.async variants),
#    while DeepGEMM builds;
# 2. main and the patched tree in alternating processes, two rounds: the shipped launch of fp8, fp4 and bf16 at
#    next_n 1 and 4 (scripts/reader_mtp_bench.py, no peer);
# 3. main's read-side batches (kgen.reader_check.BATCH_SHAPES): fp8 beside DeepGEMM in the same process, fp4 and bf16
#    as fractions of copy, in the time left (the JSON is rewritten after every shape).
#   run(command="bash bench/results/h100-2026-12-07-s36/call1.sh", carry=[".whl", ".xfer/pk"], timeout_s=600)
# Read: python bench/results/h100-2026-12-06-s26/reader_trees.py DIR/r mtp main aligned;
#       python bench/results/h100-2026-12-07-s33/batches_table.py DIR/r/batches.json
cd "$(dirname "$0")/../../.."
PATCH=bench/results/h100-2026-12-07-s35/aligned-smem.patch
mkdir -p .xfer/main .xfer/aligned
cp -r kgen templates specs scripts .xfer/main/
cp -r kgen templates specs scripts tests pyproject.toml .xfer/aligned/
(cd .xfer/aligned && patch -s -p1 < "../../$PATCH")
source scripts/device_call.sh
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
in_tree aligned $R/pytest_aligned.log 150 python3 -m pytest -p no:cacheprovider -rs tests/test_gpu_indexer.py \
  -k "kernel_matches or tma_variant_matches or keys_in_registers"
grep -E "^(FAILED|ERROR)|passed|failed" "$R/pytest_aligned.log" | cut -c1-300 | head -8
snap call1
S=32:65536:equal:1,32:65536:equal:4,128:16384:uniform:1,128:16384:uniform:4,1:65536:equal:1,1:65536:equal:4
KGEN_BENCH_PEER=0 ab 2 "main aligned" mtp 100 -- env MTP_ALTERNATIVES=0 MTP_SHAPES=$S python3 \
  scripts/reader_mtp_bench.py {out} specs/dsv4/indexer_fp8.yaml specs/dsv4/indexer_fp4.yaml specs/indexer_bf16.yaml
snap call1
peers_ready
in_tree head $R/batches.log $(( 570 - ($(date +%s) - T0) )) python3 bench/results/h100-2026-12-07-s33/batches.py \
  $R/batches.json specs/dsv4/indexer_fp8.yaml specs/dsv4/indexer_fp4.yaml specs/indexer_bf16.yaml
pack call1
