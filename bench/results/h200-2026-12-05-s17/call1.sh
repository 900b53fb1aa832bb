#!/usr/bin/env bash
# call1 of session 17. Trees: base = main (efdd6c4, `git archive main kgen templates specs scripts` in .xfer/base),
# head = branch s17: fp4 keys widened by placing their bits, planned at 5 CTAs an SM (session 16's fp4-cvt), and
# the top-k's clusters halved until the driver's count of them runs at once (topk-fit).
# 1. GPU tests in head: the fp4 reader's (the widening's first run on the hardware: bf16 subnormals through HMUL2
#    for every code 0.5) and the top-k's (printing the driver's cluster counts);
# 2. fp4_ring.py (session 15) in both trees, the shipped ring, fp8's reader beside fp4's in each process, two rounds.
#   run(command="bash bench/results/h200-2026-12-05-s17/call1.sh", carry=[".whl", ".xfer/pk", ".xfer/base"],
#       timeout_s=590)
cd "$(dirname "$0")/../../.."
source scripts/device_call.sh
in_tree head $R/pytest_gpu.log 220 python3 -m pytest -q -s -p no:cacheprovider -rs --junitxml=$R/pytest_gpu.xml \
  tests/test_topk_gpu.py tests/test_gpu_indexer.py -k "fp4 or topk"
grep -E "^(FAILED|ERROR)|passed|failed|clusters of" $R/pytest_gpu.log | cut -c1-300 | head -12
export FP4_RINGS=3
ab 2 "base head" ring 75 -- python3 $ROOT/bench/results/h200-2026-12-05-s15/fp4_ring.py {out}
grep -h " x " $R/ring_*.log | cut -c1-230
pack call1
