#!/usr/bin/env bash
# Session 33's second call: main as it stands (this checkout), DeepGEMM built on the machine:
# 1. every GPU test but the peers' two files (`pytest -m gpu`), while DeepGEMM and SGLang's top-k build;
# 2. the read side's batches (kgen.reader_check.BATCH_SHAPES, what `kgen bench --readers-only` times: equal, +-30 %
#    and uniform lengths, next_n 1, 2 and 4), fp8 beside DeepGEMM in the same process, then fp4 and bf16 (no peer:
#    fraction of copy), in the time left (the JSON is rewritten after every shape).
#   run(command="bash bench/results/h100-2026-12-07-s33/call2.sh", carry=[".whl", ".xfer/pk"], timeout_s=600)
# Read: python bench/results/h100-2026-12-07-s33/batches_table.py DIR/r/batches.json
cd "$(dirname "$0")/../../.."
source scripts/device_call.sh
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
in_tree head $R/pytest_gpu.log 240 python3 -m pytest -m gpu -q -p no:cacheprovider -rs \
  --junitxml=$R/pytest_gpu.xml --ignore=tests/test_peer_sglang_gpu.py --ignore=tests/test_peer_sglang_topk_gpu.py
grep -E "^(FAILED|ERROR)" $R/pytest_gpu.log | cut -c1-300 | head -12
snap call2
peers_ready
in_tree head $R/batches.log $(( 560 - ($(date +%s) - T0) )) python3 bench/results/h100-2026-12-07-s33/batches.py $R/batches.json \
  specs/dsv4.yaml
pack call2
