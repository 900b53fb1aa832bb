#!/usr/bin/env bash
# callF of session 8: where the top-k's time goes (d64be1b + comments), from the repository root:
#   run(command="bash bench/results/h200-2026-12-03-s8/callF.sh", carry=[".whl"], timeout_s=150)
# ncu of three launches (profile_stalls.py): duration, issue rate and the stall reasons per issued instruction.
cd "$(dirname "$0")/../../.."
ROOT=$PWD; HERE=$ROOT/bench/results/h200-2026-12-03-s8
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$ROOT KGEN_CACHE_DIR=/tmp/kcache PYTHONUNBUFFERED=1
timeout 120 ncu --clock-control none -k regex:indexer_topk -c 3 --section SpeedOfLight --section WarpStateStats \
  --metrics regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio \
  python3 $HERE/profile_stalls.py > $OUT/ncu_stalls.txt 2>&1
echo "ncu rc=$?"
grep -E "indexer_topk<|Duration|stalled_(barrier|long_scoreboard|short_scoreboard|membar|mio_throttle|lg_throttle|wait|math|dispatch|no_instruction|branch|drain|imc|misc|selected|sleeping|not_selected|tex)" $OUT/ncu_stalls.txt \
  | sed -E 's/smsp__average_warps_issue_stalled_//; s/_per_issue_active.ratio//' | awk '{$1=$1; print}' | cut -c1-90
