#!/usr/bin/env bash
# call5 of session 15. 1. main's top-k GPU tests (the wide-cluster test now at rows of 128K and 256K keys, -s: the
# driver's answer); 2. ncu's limiter of main's fp4 and fp8 readers, 32 x 64K keys, next_n 1 (profile_fp4.py: speed
# of light, compute and memory workload, warp states; one launch each after two warm-ups); 3. branch fp4-regs at
# 8f51c80's tree (.xfer/fp4regs: the tile's A registers held only where two wgmma groups of tokens read them)
# against main (1eef7e2: held for every tile), fp4_ring.py on the shipped ring (3), two rounds.
#   run(command="bash bench/results/h200-2026-12-05-s15/call5.sh", carry=[".whl", ".xfer/pk", ".xfer/fp4regs"], timeout_s=200)
cd "$(dirname "$0")/../../.."
source scripts/device_call.sh
in_tree head $R/pytest_topk.log 90 python3 -m pytest -q -s -p no:cacheprovider -rs --junitxml=$R/pytest_topk.xml \
  tests/test_topk_gpu.py
grep -E "^(FAILED|ERROR)|run at once" $R/pytest_topk.log | cut -c1-300 | head -12
P=$ROOT/bench/results/h200-2026-12-05-s15/profile_fp4.py
S="--section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section WarpStateStats \
--section Occupancy --section LaunchStats --section InstructionStats"
in_tree head $R/ncu_fp4.txt 60 ncu --clock-control none -k regex:indexer_logits -s 2 -c 1 $S python3 $P fp4
in_tree head $R/ncu_fp8.txt 60 ncu --clock-control none -k regex:indexer_logits -s 2 -c 1 $S python3 $P fp8
grep -E "Duration|Throughput|Pipe|Issue Slots|Executed Ipc|Stall|Registers|Eligible" $R/ncu_fp4.txt | head -30
export FP4_RINGS=3
for round in 1 2; do
  for tree in head fp4regs; do
    in_tree $tree $R/ring_${tree}_$round.log 60 python3 $ROOT/bench/results/h200-2026-12-05-s15/fp4_ring.py \
      $R/ring_${tree}_$round.json
    cut -c1-230 $R/ring_${tree}_$round.log | grep " x "
  done
done
pack call5
