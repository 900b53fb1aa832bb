#!/usr/bin/env bash
# Session 29's third call: main as it stands after the slots landed (04e164c: the selection writes through int*
# again, indexer_topk's sm_90a SASS main's exactly; the graph test parametrized over both ops): the top-k's GPU tests.
#   run(command="bash bench/results/h200-2026-12-07-s29/call3.sh", carry=[".whl", ".xfer/pk"], timeout_s=300)
cd "$(dirname "$0")/../../.."
source scripts/device_call.sh
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
in_tree head $R/pytest_head.log 200 python3 -m pytest -p no:cacheprovider -rs tests/test_topk_gpu.py \
  tests/test_topk_native.py
grep -E "^(FAILED|ERROR)|passed|failed" "$R/pytest_head.log" | cut -c1-300 | head -12
pack call3
