#!/usr/bin/env bash
# call2 of session 20, call1 cut to the device time left (about 220 s): head's top-k and chained-op GPU tests, then
# one round of the top-k A/B of base (main 4524152) and head (main + topk-push.patch) at B 1 and 8 x 4K, 64K, 256K
# keys. From the repo root of the patched checkout:
#   run(command="bash bench/results/h100-2026-12-05-s20/call2.sh", carry=[".whl", ".xfer/pk", ".xfer/base"],
#       timeout_s=220)
cd "$(dirname "$0")/../../.."
source scripts/device_call.sh
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
in_tree head $R/pytest_topk_gpu.log 110 python3 -m pytest -p no:cacheprovider -rs tests/test_topk_gpu.py \
  tests/test_topk_native.py
grep -E "^(FAILED|ERROR)|passed|failed" $R/pytest_topk_gpu.log | cut -c1-300 | head -12
snap call2
peers_ready
topk_ab 1 "base head" -- --batches 1,8 --keys 4096,65536,262144 --ks 512 --others "" --time-limit 25
pack call2
