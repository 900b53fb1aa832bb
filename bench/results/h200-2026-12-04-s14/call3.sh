#!/usr/bin/env bash
# call3 of session 14 (not run): branch topk-resident (session 13's, rebased onto this session's main): one-CTA rows of at
# most TOPK_RESIDENT_KEYS (8192) keys read once, into registers. 1. the branch's top-k GPU tests, in its tree; 2. the
# top-k bench at B 1, 8, 32, 64 x 4K, 8K, 64K keys (64K: a control, clusters unchanged), equal and +-30 % next_n 2,
# k 512, main (this tree) and the branch (.xfer/resident), processes alternating, two rounds. Merge it only if it
# wins at 4K and 8K keys. From the repository root, .xfer/resident made as README.md says:
#   run(command="bash bench/results/h200-2026-12-04-s14/call3.sh", carry=[".whl", ".xfer/pk", ".xfer/resident"], timeout_s=590)
cd "$(dirname "$0")/../../.."
source scripts/device_call.sh
in_tree resident $R/pytest_topk.log 200 python3 -m pytest -q -p no:cacheprovider -rs \
  --junitxml=$R/pytest_topk.xml tests/test_topk_gpu.py tests/test_topk_native.py
grep -E "^(FAILED|ERROR)" $R/pytest_topk.log | cut -c1-300 | head -12
peers_ready
topk_ab 2 "head resident" -- --batches 1,8,32,64 --keys 4096,8192,65536 --ks 512 --others "" --time-limit 70
pack call3
