#!/usr/bin/env bash
# call3 of session 15. 1. branch fp4-regs (.xfer/fp4regs): fp4 keys widened straight into the registers of the bf16
# wgmma's A operand, no converted tile in shared memory (issue 20: fp4 keys no slower per key than fp8): the fp4 GPU
# tests of the reader and the top-k in its tree, then scripts/reader_mtp_bench.py on fp4 and fp8 keys (fp8 the
# per-key yardstick, in the same process) in main (this tree) and the branch, processes alternating, two rounds, no
# peers. 2. branch topk-resident (.xfer/resident; call2's run did not compile under the image's NVRTC 13.0, fixed in
# ddb37de): its top-k GPU tests, then its A/B against main at B 1, 8, 32, 64 x 4K, 8K keys, two rounds.
# From the repository root, .xfer/fp4regs and .xfer/resident made as README.md says:
#   run(command="bash bench/results/h200-2026-12-05-s15/call3.sh", carry=[".whl", ".xfer/pk", ".xfer/fp4regs", ".xfer/resident"], timeout_s=590)
cd "$(dirname "$0")/../../.."
source scripts/device_call.sh
in_tree fp4regs $R/pytest_fp4.log 150 python3 -m pytest -q -p no:cacheprovider -rs --junitxml=$R/pytest_fp4.xml \
  tests/test_gpu_indexer.py tests/test_topk_gpu.py -k fp4
grep -E "^(FAILED|ERROR)" $R/pytest_fp4.log | cut -c1-300 | head -12
in_tree resident $R/pytest_resident.log 100 python3 -m pytest -q -p no:cacheprovider -rs \
  --junitxml=$R/pytest_resident.xml tests/test_topk_gpu.py
grep -E "^(FAILED|ERROR)" $R/pytest_resident.log | cut -c1-300 | head -12
export MTP_SHAPES="32:65536:equal:1,32:65536:equal:2,1:65536:equal:1,128:16384:uniform:1,64:32768:pm30:2"
for round in 1 2; do
  for tree in head fp4regs; do
    in_tree $tree $R/mtp_${tree}_$round.log 80 python3 scripts/reader_mtp_bench.py $R/mtp_${tree}_$round.json \
      specs/dsv4/indexer_fp4.yaml specs/dsv4/indexer_fp8.yaml
    grep -E "^dsv4" $R/mtp_${tree}_$round.log | cut -c1-160
  done
done
peers_ready
topk_ab 2 "head resident" -- --batches 1,8,32,64 --keys 4096,8192 --ks 512 --others "" --time-limit 40
pack call3
