#!/usr/bin/env bash
# call5 of session 19: the GPU tests of the top-k (tests/test_topk_gpu.py, its cluster widths now 20000, 32769, 65536,
# 131075) and of the chained op (tests/test_topk_native.py) with rows of up to 16K keys on one CTA (branch
# topk-one-cta: TOPK_ONE_CTA_KEYS = 16384). From the repo root:
#   run(command="bash bench/results/h100-2026-12-05-s19/call5.sh", carry=[".whl", ".xfer/pk"], timeout_s=230)
cd "$(dirname "$0")/../../.."
source scripts/device_call.sh
in_tree head $R/pytest_topk_gpu.log 200 python3 -m pytest -p no:cacheprovider -rs tests/test_topk_gpu.py \
  tests/test_topk_native.py
tail -4 $R/pytest_topk_gpu.log | cut -c1-200
pack call5
