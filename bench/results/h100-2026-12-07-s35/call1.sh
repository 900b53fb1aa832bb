#!/usr/bin/env bash
# Session 35's first call: this checkout (score_halves issues every token of a held tile, so that its token index is
# the unrolled loop's) beside main before it (.xfer/base: `git archive 8a0f0e2 kgen templates specs scripts`), no peer:
# 1. the reader's GPU tests of fp8 and fp4 in this checkout (ragged lengths at next_n 1, 2 and 4; the launch choice
#    and the keys-in-registers cubins by name);
# 2. fp8 and fp4 keys at next_n 1 and 4, each tree's shipped launch, two rounds of the two trees' processes in turn
#    (scripts/reader_mtp_bench.py);
# 3. the read side's batches (kgen.reader_check.BATCH_SHAPES) of fp4 and fp8 in the time left (session 34's call2).
#   run(command="bash bench/results/h100-2026-12-07-s35/call1.sh", carry=[".whl", ".xfer/pk", ".xfer/base"],
#       timeout_s=600)
# Read: python bench/results/h100-2026-12-06-s26/reader_trees.py DIR/r mtp base head;
#       python bench/results/h100-2026-12-07-s33/batches_table.py DIR/r/batches.json
cd "$(dirname "$0")/../../.."
NO_PEERS=1 source scripts/device_call.sh
export KGEN_BENCH_PEER=0
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
in_tree head $R/pytest_gpu.log 150 python3 -m pytest -p no:cacheprovider -rs tests/test_gpu_indexer.py \
  -k "(fp8 or fp4) and (kernel_matches or tma_variant_matches or keys_in_registers)"
grep -E "^(FAILED|ERROR)|passed|failed" "$R/pytest_gpu.log" | cut -c1-300 | head -8
snap call1
S=32:65536:equal:1,32:65536:equal:4,128:16384:uniform:4,32:65536:pm30:4,1:65536:equal:4
ab 2 "base head" mtp 85 -- env MTP_ALTERNATIVES=0 MTP_SHAPES=$S python3 scripts/reader_mtp_bench.py {out} \
  specs/dsv4/indexer_fp8.yaml specs/dsv4/indexer_fp4.yaml
snap call1
in_tree head $R/batches.log $(( 570 - ($(date +%s) - T0) )) python3 bench/results/h100-2026-12-07-s33/batches.py \
  $R/batches.json specs/dsv4/indexer_fp4.yaml specs/dsv4/indexer_fp8.yaml
pack call1
