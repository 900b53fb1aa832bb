#!/usr/bin/env bash
# Session 34's second call: main with fp4's MTP launches on the keys-in-registers cubin (ring of 2), no peer (the
# session's device time was nearly spent on machines that did not start; fp8's code is unchanged since session 33's
# run beside DeepGEMM):
# 1. the reader's GPU tests of fp4 through the shipped launch choice (ragged lengths at next_n 1, 2 and 4);
# 2. the read side's batches (kgen.reader_check.BATCH_SHAPES, what `kgen bench --readers-only` times) of fp4 and
#    fp8 (fp4's goal is per key against fp8 in the same process), the JSON rewritten after every shape (session
#    33's batches.py).
#   run(command="bash bench/results/h100-2026-12-07-s34/call2.sh", carry=[".whl", ".xfer/pk"], timeout_s=330)
# Read: python bench/results/h100-2026-12-07-s33/batches_table.py DIR/r/batches.json
cd "$(dirname "$0")/../../.."
NO_PEERS=1 source scripts/device_call.sh
export KGEN_BENCH_PEER=0
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
in_tree head $R/pytest_fp4.log 90 python3 -m pytest -p no:cacheprovider -rs tests/test_gpu_indexer.py \
  -k "fp4 and (kernel_matches or keys_in_registers)"
grep -E "^(FAILED|ERROR)|passed|failed" "$R/pytest_fp4.log" | cut -c1-300 | head -6
snap call2
in_tree head $R/batches.log $(( 300 - ($(date +%s) - T0) )) python3 bench/results/h100-2026-12-07-s33/batches.py \
  $R/batches.json specs/dsv4/indexer_fp4.yaml specs/dsv4/indexer_fp8.yaml
pack call2
