#!/usr/bin/env bash
# call1 of session 14 (not run: no device was lent in session 14). Main's top-k on a GPU: since session 13's call1 it
# has b648188 (the sweep's key range, claim4), 227294c (a cluster launch's own shared memory), 2361d86 (the
# reduce-scatter merge) and 6c74647 (the kernel's bound of 16 CTAs), none of which a GPU has run. 1. the top-k's GPU
# tests, the bench's and SGLang's top-k peer's; 2. the top-k bench (scripts/topk_shapes.py) at B 1, 8, 32, 64 x 4K,
# 64K, 256K keys, equal and +-30 % next_n 2, k 512, in three trees, processes alternating, two rounds: b82f13b
# (.xfer/base, session 13's first main), 399a8f1 (.xfer/s13, its last) and this one; 3. `kgen recall` on the GPU with
# SGLang's top-k as a selection stage (e0a7fb6: its first run beside the real peer). From the repository root, the
# trees and kits made as README.md says:
#   run(command="bash bench/results/h200-2026-12-04-s14/call1.sh", carry=[".whl", ".xfer/pk", ".xfer/base", ".xfer/s13"], timeout_s=590)
cd "$(dirname "$0")/../../.."
source scripts/device_call.sh
timeout 200 python3 -m pytest -q -p no:cacheprovider -rs --junitxml=$R/pytest_topk.xml tests/test_topk_gpu.py \
  tests/test_topk_native.py > $R/pytest_topk.log 2>&1
echo "top-k pytest rc=$? $(el)"; grep -E "^(FAILED|ERROR)" $R/pytest_topk.log | cut -c1-300 | head -12; tail -1 $R/pytest_topk.log
peers_ready
timeout 60 python3 -m pytest -q -p no:cacheprovider -rs tests/test_topk_bench.py tests/test_peer_sglang_topk_gpu.py \
  > $R/pytest_bench.log 2>&1
echo "bench pytest rc=$? $(el)"; tail -1 $R/pytest_bench.log
topk_ab 2 "base s13 head" -- --batches 1,8,32,64 --keys 4096,65536,262144 --ks 512 --others "" --time-limit 60
timeout -s INT 90 python3 -m kgen recall specs/dsv4.yaml --contexts 4096,65536 --queries 8 --json $R/recall.json \
  > $R/recall.log 2>&1
echo "recall rc=$? $(el)"; python3 -c "import json; d = json.load(open('$R/recall.json')); print(d['peers']); \
[print(r['variant'], r['context'], {n: s.get('agreement_with_exact_selection', s) for n, s in r['selection'].items()}) \
 for r in d['results']]"
pack call1
