#!/usr/bin/env bash
# Session 34's second call: main with fp4's MTP launches on the keys-in-registers cubin (ring of 2), DeepGEMM built
# on the machine:
# 1. the GPU tests of fp4 and of the ops (the launches now pick the cubin by shape) while the peers build;
# 2. the read side's batches (kgen.reader_check.BATCH_SHAPES, what `kgen bench --readers-only` times), fp8 beside
#    DeepGEMM in the same process, then fp4 and bf16 (no peer: fraction of copy), the JSON rewritten after every
#    shape (session 33's batches.py).
#   run(command="bash bench/results/h100-2026-12-07-s34/call2.sh", carry=[".whl", ".xfer/pk"], timeout_s=600)
# Read: python bench/results/h100-2026-12-07-s33/batches_table.py DIR/r/batches.json
cd "$(dirname "$0")/../../.."
source scripts/device_call.sh
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
tests_beside_peers head -p no:cacheprovider -m gpu tests/test_gpu_indexer.py tests/test_ops_gpu.py tests/test_gpu.py
snap call2
in_tree head $R/batches.log $(( 570 - ($(date +%s) - T0) )) python3 bench/results/h100-2026-12-07-s33/batches.py \
  $R/batches.json specs/dsv4.yaml
pack call2
