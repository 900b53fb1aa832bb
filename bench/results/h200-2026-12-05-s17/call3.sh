#!/usr/bin/env bash
# call3 of session 17 (calls 1 and 2, two rounds each, were drafted and dropped: device machines were scarce this
# session). Trees: base = main efdd6c4 (`git archive main kgen templates specs scripts` in .xfer/base), head = branch
# s17: session 16's fp4-cvt merged with main, and the top-k's clusters sized by the driver's count (topk-fit).
# 1. GPU tests in head: the fp4 reader's and the top-k's (the driver's cluster counts printed);
# 2. fp4_ring.py, the shipped ring, base then head;
# 3. the top-k at B 16-64 x 64K and 256K keys, k 512, fp8, DeepGEMM's logits and SGLang's top-k beside, head then
#    base.
#   run(command="bash bench/results/h200-2026-12-05-s17/call3.sh", carry=[".whl", ".xfer/pk", ".xfer/base"],
#       timeout_s=590)
cd "$(dirname "$0")/../../.."
source scripts/device_call.sh
in_tree head $R/pytest_gpu.log 170 python3 -m pytest -q -s -p no:cacheprovider -rs --junitxml=$R/pytest_gpu.xml \
  tests/test_topk_gpu.py tests/test_gpu_indexer.py -k "fp4 or topk"
grep -E "^(FAILED|ERROR)|passed|failed|clusters of" $R/pytest_gpu.log | cut -c1-300 | head -12
export FP4_RINGS=3
ab 1 "base head" ring 75 -- python3 $ROOT/bench/results/h200-2026-12-05-s15/fp4_ring.py {out}
grep -h " x " $R/ring_*.log | cut -c1-230
peers_ready
topk_ab 1 "head base" -- --batches 16,32,64 --keys 65536,262144 --ks 512 --others "" --time-limit 55
pack call3
