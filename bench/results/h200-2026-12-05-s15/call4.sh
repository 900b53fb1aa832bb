#!/usr/bin/env bash
# call4 of session 15: branch fp4-regs at 5c5dbd3 (.xfer/fp4regs: a tile's A registers converted once for all its
# tokens, after call3 found next_n 2 slower). 1. its fp4 reader GPU tests; 2. fp4_ring.py (fp4 keys on rings of 2-8
# stages, fp8's shipped reader beside it) in main (this tree) and the branch, processes alternating, two rounds.
#   run(command="bash bench/results/h200-2026-12-05-s15/call4.sh", carry=[".whl", ".xfer/pk", ".xfer/fp4regs"], timeout_s=400)
cd "$(dirname "$0")/../../.."
source scripts/device_call.sh
in_tree fp4regs $R/pytest_fp4.log 120 python3 -m pytest -q -p no:cacheprovider -rs --junitxml=$R/pytest_fp4.xml \
  tests/test_gpu_indexer.py -k fp4
grep -E "^(FAILED|ERROR)" $R/pytest_fp4.log | cut -c1-300 | head -12
for round in 1 2; do
  for tree in head fp4regs; do
    in_tree $tree $R/ring_${tree}_$round.log 90 python3 $ROOT/bench/results/h200-2026-12-05-s15/fp4_ring.py \
      $R/ring_${tree}_$round.json
    cut -c1-230 $R/ring_${tree}_$round.log | grep " x "
  done
done
pack call4
