#!/usr/bin/env bash
# call1 of session 16, prepared without a device (none was lent that session): for the next session that has one.
# head: branch fp4-cvt (fp4 codes widened by placing their bits in bf16 words and one multiply; q gathered in the
# matching k order), base: main before it (697b12d, in .xfer/base).
# 1. GPU tests in head: the fp4 reader's (the new conversion's first run on the hardware: bf16 subnormals through
#    HMUL2 for every code 0.5) and the top-k's (main's 036f26d, runtime.kernel_facts, never run on a GPU);
# 2. ncu instruction counts of both trees' fp4 reader, 32 x 64K keys, next_n 1 (session 15's profile_fp4.py);
# 3. fp4_ring.py on the shipped ring (fp8's reader beside it in each process), base and head alternating, 2 rounds.
#   mkdir -p .xfer/base && git archive 697b12d kgen templates specs scripts | tar -x -C .xfer/base
#   run(command="bash bench/results/h200-2026-12-05-s16/call1.sh", carry=[".whl", ".xfer/pk", ".xfer/base"], timeout_s=590)
cd "$(dirname "$0")/../../.."
source scripts/device_call.sh
S15=$ROOT/bench/results/h200-2026-12-05-s15
in_tree head $R/pytest_gpu.log 200 python3 -m pytest -q -s -p no:cacheprovider -rs --junitxml=$R/pytest_gpu.xml \
  tests/test_topk_gpu.py "tests/test_gpu_indexer.py" -k "fp4 or topk"
grep -E "^(FAILED|ERROR)|passed|failed" $R/pytest_gpu.log | cut -c1-300 | head -12
for tree in base head; do
  in_tree $tree $R/ncu_fp4_$tree.txt 50 ncu --clock-control none -k regex:indexer_logits -s 2 -c 1 \
    --section SpeedOfLight --section InstructionStats --section WarpStateStats --section Occupancy \
    python3 $S15/profile_fp4.py fp4
  grep -E "Duration|Executed Instructions|Issue Slots|Registers" $R/ncu_fp4_$tree.txt | head -6
done
export FP4_RINGS=3
ab 2 "base head" ring 55 -- python3 $S15/fp4_ring.py {out}
grep -h " x " $R/ring_*.log | cut -c1-230
pack call1
