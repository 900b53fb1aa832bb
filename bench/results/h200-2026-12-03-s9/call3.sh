#!/usr/bin/env bash
# call3 of session 9: the record of main after call2 (the reader as it was, the top-k bench's SGLang rows on
# 16-B aligned logits), from the repository root, the kits packed as README.md says:
#   run(command="bash bench/results/h200-2026-12-03-s9/call3.sh", carry=[".whl", ".xfer/pk"], timeout_s=420)
# 1. the top-k bench's and the SGLang peer's GPU tests, 2. ncu stall reasons of the top-k (profile_topk_stalls.py),
# 3. host cost per eager call at 1 x 4K (scripts/host_breakdown.py), 4. topk_run.py (fp8 48 shapes, bf16, fp4),
# 5. the fp8 shapes at B 1, 8, 32 and k 512 with 512-thread top-k CTAs (topk_ab.py), its own process.
cd "$(dirname "$0")/../../.."
HERE=bench/results/h200-2026-12-03-s9
source $HERE/preamble.sh
timeout 120 ncu --clock-control none -k regex:indexer_topk -c 3 --section SpeedOfLight --section WarpStateStats \
  --metrics regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio \
  python3 $HERE/profile_topk_stalls.py > $R/ncu_topk.txt 2>&1
echo "ncu rc=$? $(el)"
grep -E "indexer_topk<|Duration|Issue Slots Busy|stalled_(barrier|long_scoreboard|short_scoreboard|membar|mio_throttle|wait|math|no_instruction|not_selected|branch)" \
  $R/ncu_topk.txt | sed -E 's/smsp__average_warps_issue_stalled_//; s/_per_issue_active.ratio//' | awk '{$1=$1; print}' | cut -c1-90
timeout 90 python3 scripts/host_breakdown.py --batch 1 --keys 4096 --json $R/host.json > $R/host.log 2>&1
echo "host rc=$? $(el)"; tail -12 $R/host.log | cut -c1-200
peers_ready
timeout 100 python3 -m pytest -q -p no:cacheprovider -rs tests/test_topk_bench.py tests/test_peer_sglang_topk.py \
  > $R/pytest.log 2>&1
echo "pytest rc=$? $(el)"; grep -E "^(FAILED|ERROR)" $R/pytest.log | cut -c1-300 | head; tail -1 $R/pytest.log
timeout -s INT 170 python3 $HERE/topk_run.py --json $R/topk.json --time-limit 150 > $R/topk.log 2>&1
echo "top-k bench rc=$? $(el)"; tail -1 $R/topk.log | cut -c1-300
TOPK_AB=threads:512 timeout -s INT 60 python3 $HERE/topk_ab.py --json $R/topk_t512.json --batches 1,8,32 --ks 512 \
  --others "" --time-limit 45 > $R/topk_t512.log 2>&1
echo "top-k 512 threads rc=$? $(el)"; tail -1 $R/topk_t512.log | cut -c1-300
pack call3
