#!/usr/bin/env bash
# call4 of session 9: the top-k with each path a call and one visitor copy per row read (HEAD) against the commit
# before it, each tree in its own process; from the repository root, the base tree unpacked by
#   rm -rf .xfer/base && mkdir -p .xfer/base && git archive BASE kgen templates specs | tar -x -C .xfer/base
#   run(command="bash bench/results/h200-2026-12-03-s9/call4.sh", carry=[".whl", ".xfer/pk", ".xfer/base"], timeout_s=400)
# 1. the top-k's GPU tests (HEAD), 2. ncu stall reasons (HEAD), 3. topk_run.py, fp8, k 512, B 1, 8, 32 x 4K, 64K,
# 256K, equal and +-30 % (SGLang's top-k and DeepGEMM beside), base then head.
cd "$(dirname "$0")/../../.."
HERE=bench/results/h200-2026-12-03-s9
source $HERE/preamble.sh
timeout 100 python3 -m pytest -q -p no:cacheprovider -rs tests/test_topk_gpu.py > $R/pytest_topk_gpu.log 2>&1
echo "pytest rc=$? $(el)"; grep -E "^(FAILED|ERROR)" $R/pytest_topk_gpu.log | cut -c1-300 | head; tail -1 $R/pytest_topk_gpu.log
timeout 100 ncu --clock-control none -k regex:indexer_topk -c 3 --section SpeedOfLight --section WarpStateStats \
  --metrics regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio \
  python3 $HERE/profile_topk_stalls.py > $R/ncu_topk.txt 2>&1
echo "ncu rc=$? $(el)"
grep -E "indexer_topk<|Duration|stalled_(long_scoreboard|no_instruction|not_selected|wait|math)" $R/ncu_topk.txt \
  | sed -E 's/smsp__average_warps_issue_stalled_//; s/_per_issue_active.ratio//' | awk '{$1=$1; print}' | cut -c1-90
peers_ready  # both builds done before any timing (nvcc off the CPUs)
for tree in base head; do
  src=$ROOT; [ $tree = base ] && src=$ROOT/.xfer/base
  PYTHONPATH=${PYTHONPATH/$ROOT/$src} KGEN_CACHE_DIR=/tmp/kcache_$tree timeout -s INT 80 python3 $HERE/topk_run.py \
    --json $R/topk_$tree.json --batches 1,8,32 --ks 512 --others "" --time-limit 60 > $R/topk_$tree.log 2>&1
  echo "top-k $tree rc=$? $(el)"; tail -1 $R/topk_$tree.log
done
pack call4
