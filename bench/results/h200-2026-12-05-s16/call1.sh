#!/usr/bin/env bash
# call1 of session 16, prepared without a device (none was lent that session): for the next session that has one.
# Trees: base = main before the branch (81f96f1), cvt = the widening alone (cd4582d: 4 CTAs an SM), head = branch
# fp4-cvt (4125373: the widening and 5 CTAs an SM at 96 registers). The fp4 codes are widened by placing their
# bits in bf16 words and one multiply; q is gathered in the matching k order.
# 1. GPU tests in head: the fp4 reader's (the widening's first run on the hardware: bf16 subnormals through
#    HMUL2 for every code 0.5) and the top-k's (main's 036f26d, runtime.kernel_facts, never run on a GPU);
# 2. ncu of each tree's fp4 reader, 32 x 64K keys, next_n 1 (session 15's profile_fp4.py): instructions
#    executed, issue slots, warps resident.
#   for t in base:81f96f1 cvt:cd4582d; do mkdir -p .xfer/${t%%:*} && git archive ${t#*:} kgen templates specs \
#     scripts | tar -x -C .xfer/${t%%:*}; done
#   run(command="bash bench/results/h200-2026-12-05-s16/call1.sh", carry=[".whl", ".xfer/pk", ".xfer/base",
#       ".xfer/cvt"], timeout_s=500)
cd "$(dirname "$0")/../../.."
source scripts/device_call.sh
S15=$ROOT/bench/results/h200-2026-12-05-s15
in_tree head $R/pytest_gpu.log 240 python3 -m pytest -q -s -p no:cacheprovider -rs --junitxml=$R/pytest_gpu.xml \
  tests/test_topk_gpu.py tests/test_gpu_indexer.py -k "fp4 or topk"
grep -E "^(FAILED|ERROR)|passed|failed" $R/pytest_gpu.log | cut -c1-300 | head -12
for tree in base cvt head; do
  in_tree $tree $R/ncu_fp4_$tree.txt 60 ncu --clock-control none -k regex:indexer_logits -s 2 -c 1 \
    --section SpeedOfLight --section InstructionStats --section WarpStateStats --section Occupancy \
    --section LaunchStats python3 $S15/profile_fp4.py fp4
  grep -E "Duration|Executed Instructions|Issue Slots|Registers|Achieved Active Warps" $R/ncu_fp4_$tree.txt | head -8
done
pack call1
