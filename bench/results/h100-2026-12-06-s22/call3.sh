#!/usr/bin/env bash
# call3 of session 22: lean as it lands (call2's lean with the cluster path's value range built by each rank again,
# as on main): its top-k GPU tests (the native chain's test expecting clusters of 8), and the top-k against main
# (6eee637), fp8 k 512, B 1, 8, 32, 64 x 4K, 64K, 256K, equal lengths and +-30 % (next_n 2), two rounds.
#   run(command="bash bench/results/h100-2026-12-06-s22/call3.sh", carry=[".whl", ".xfer/pk", ".xfer/main",
#       ".xfer/final"], timeout_s=400)
# Read: python bench/results/h100-2026-12-06-s21/trees_table.py DIR/r main final
cd "$(dirname "$0")/../../.."
source scripts/device_call.sh
nvidia-smi --query-gpu=name --format=csv,noheader
( in_tree final $R/pytest_topk_gpu.log 200 python3 -m pytest -p no:cacheprovider -rs tests/test_topk_gpu.py \
  tests/test_topk_native.py ) &
PT=$!
peers_ready
wait $PT; echo "tests done $(el)"
grep -E "^(FAILED|ERROR)|passed|failed" $R/pytest_topk_gpu.log | cut -c1-300 | head -12
snap call3
topk_ab 2 "main final" -- --batches 1,8,32,64 --keys 4096,65536,262144 --ks 512 --others "" --time-limit 45
pack call3
