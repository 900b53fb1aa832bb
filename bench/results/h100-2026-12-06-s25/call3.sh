#!/usr/bin/env bash
# call3 of session 25: the reader's GPU tests alone on fee3d95 (the next sequence's q staged ahead in a second
# buffer), without waiting for the peers' builds: the last of the session's device time (call2, prepared, never got
# a machine).
#   run(command="bash bench/results/h100-2026-12-06-s25/call3.sh", carry=[".whl", ".xfer/pk"])
cd "$(dirname "$0")/../../.."
source scripts/device_call.sh
in_tree head $R/pytest_head.log 110 python3 -m pytest -p no:cacheprovider -rs tests/test_gpu_indexer.py
grep -E "^(FAILED|ERROR)|passed|failed" $R/pytest_head.log | cut -c1-300 | head -12
pack call3
