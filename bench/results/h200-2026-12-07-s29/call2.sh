#!/usr/bin/env bash
# Session 29's second call: head = the slot transform as it lands (call1's three failures were its host check that a
# block table cover max_seq_len, which the engines' tables need not do: that check dropped, the kernel reads no
# page past the table, -1). The top-k's GPU tests and the ops' host cost, without waiting for the peers' builds.
#   run(command="bash bench/results/h200-2026-12-07-s29/call2.sh", carry=[".whl", ".xfer/pk"], timeout_s=400)
cd "$(dirname "$0")/../../.."
source scripts/device_call.sh
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
in_tree head $R/pytest_head.log 240 python3 -m pytest -p no:cacheprovider -rs tests/test_topk_gpu.py \
  tests/test_topk_native.py
grep -E "^(FAILED|ERROR)|passed|failed" "$R/pytest_head.log" | cut -c1-300 | head -12
snap call2
in_tree head $R/host.log 60 python3 scripts/host_breakdown.py --json $R/host.json
pack call2
