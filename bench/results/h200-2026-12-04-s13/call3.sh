#!/usr/bin/env bash
# call3 of session 13: the top-k's coarse sweep compares keys with the threshold bin's key range (coarse_floor)
# and claims four keys' output slots per lane with one atomic per warp (claim4). 1. the top-k's GPU tests; 2. the
# top-k bench (topk_run.py) at B 1, 8, 32, 64 x 4K, 64K, 256K keys, equal and +-30 % next_n 2, k 512, on the
# session's first main (.xfer/base, b82f13b) and this tree, processes alternating base head base head.
# From the repository root, the kits packed as README.md says:
#   run(command="bash bench/results/h200-2026-12-04-s13/call3.sh", carry=[".whl", ".xfer/pk", ".xfer/base"], timeout_s=590)
cd "$(dirname "$0")/../../.."
HERE=bench/results/h200-2026-12-04-s13
source $HERE/preamble.sh; export R
timeout 200 python3 -m pytest -q -p no:cacheprovider -rs --junitxml=$R/pytest_topk.xml tests/test_topk_gpu.py \
  tests/test_topk_native.py > $R/pytest_topk.log 2>&1
echo "top-k pytest rc=$? $(el)"; grep -E "^(FAILED|ERROR)" $R/pytest_topk.log | cut -c1-300 | head -12; tail -1 $R/pytest_topk.log
peers_ready
timeout 60 python3 -m pytest -q -p no:cacheprovider -rs tests/test_topk_bench.py tests/test_peer_sglang_topk_gpu.py \
  > $R/pytest_bench.log 2>&1
echo "bench pytest rc=$? $(el)"; tail -1 $R/pytest_bench.log
for round in 1 2; do
  for tree in base head; do
    dir=$ROOT; [ $tree = base ] && dir=$ROOT/.xfer/base
    ( cd $dir && PYTHONPATH=/tmp/site:$dir:$PYTHONPATH timeout -s INT 110 python3 $ROOT/$HERE/topk_run.py \
      --json $R/topk_${tree}_${round}.json --batches 1,8,32,64 --keys 4096,65536,262144 --ks 512 --others "" \
      --time-limit 80 > $R/topk_${tree}_${round}.log 2>&1 )
    echo "top-k bench $tree $round rc=$? $(el)"; tail -1 $R/topk_${tree}_${round}.log | cut -c1-200
  done
done
pack call3
