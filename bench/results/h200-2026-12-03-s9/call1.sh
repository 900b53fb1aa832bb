#!/usr/bin/env bash
# call1 of session 9: the top-k with integer coarse bins (748ac6c) and the SGLang peer in kgen's top-k bench:
#   run(command="bash bench/results/h200-2026-12-03-s9/call1.sh", carry=[".whl", ".xfer/pk"], timeout_s=480)
# 1. the top-k's GPU tests and the top-k bench's GPU tests, 2. kgen.topk_bench on fp8 (48 shapes), bf16 and fp4
# (topk_run.py; DeepGEMM and SGLang's top-k beside), 3. ncu of the reader at 32 x 64K, next_n 1 / 2 / 4.
cd "$(dirname "$0")/../../.."
HERE=bench/results/h200-2026-12-03-s9
source $HERE/preamble.sh
timeout 120 python3 -m pytest -q -p no:cacheprovider -rs tests/test_topk_gpu.py tests/test_topk_bench.py \
  tests/test_peer_sglang_topk.py > $R/pytest_topk.log 2>&1
echo "pytest rc=$? $(el)"; grep -E "^(FAILED|ERROR)" $R/pytest_topk.log | cut -c1-300 | head; tail -1 $R/pytest_topk.log
timeout 100 ncu --clock-control none -k regex:indexer_logits -c 3 --section SpeedOfLight --section WarpStateStats \
  --section ComputeWorkloadAnalysis --section Occupancy --section LaunchStats \
  --metrics regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio \
  python3 $HERE/profile_reader_mtp.py > $R/ncu_reader_mtp.txt 2>&1
echo "ncu rc=$? $(el)"
grep -E "indexer_logits<|Duration|DRAM Through|Registers Per|Achieved Occ|Issue Slots Busy|stalled_(gmma|barrier|long_scoreboard|short_scoreboard|membar|mio_throttle|wait|math|no_instruction|not_selected|sleeping|dispatch|branch)" \
  $R/ncu_reader_mtp.txt | sed -E 's/smsp__average_warps_issue_stalled_//; s/_per_issue_active.ratio//' | awk '{$1=$1; print}' | cut -c1-90
peers_ready
timeout -s INT 200 python3 $HERE/topk_run.py --json $R/topk.json --time-limit 170 > $R/topk.log 2>&1
echo "top-k bench rc=$? $(el)"; tail -3 $R/topk.log | cut -c1-400
pack call1
