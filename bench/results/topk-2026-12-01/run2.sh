#!/usr/bin/env bash
# Device run 2 of the top-k (from /work/main: run(command="cd .xfer/topk && bash bench/results/topk-2026-12-01/run2.sh",
# carry=[".xfer/topk", ".whl"])): the GPU tests, ncu of the top-k kernel, a short bench (no DeepGEMM).
cd "$(dirname "$0")/../../.."
ROOT=$(cd ../.. && pwd)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $ROOT/.whl/*.whl
export PYTHONPATH=/tmp/site:$PWD KGEN_CACHE_DIR=/tmp/kcache PYTHONUNBUFFERED=1
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s]"; }
timeout 75 python3 -m pytest tests/test_topk_gpu.py -q -x -p no:cacheprovider -rs > $OUT/pytest_topk_gpu.log 2>&1
echo "pytest rc=$? $(el)"; tail -6 $OUT/pytest_topk_gpu.log | cut -c1-400
timeout 60 ncu --clock-control none -k regex:indexer_topk -c 3 --section SpeedOfLight --section WarpStateStats \
  --section InstructionStats --section Occupancy --section LaunchStats --section SchedulerStats \
  python3 bench/results/topk-2026-12-01/profile_topk.py > $OUT/ncu_topk.txt 2>&1
echo "ncu rc=$? $(el)"; grep -E "Duration|Compute \(SM\) Throughput|Memory Throughput|Executed Ipc A|No Eligible|Issued Warp|Registers Per|Achieved Occ" $OUT/ncu_topk.txt | cut -c1-120 | head -30
timeout 50 python3 bench/results/topk-2026-12-01/bench_topk.py --json $OUT/bench_topk.json "$@" 2>&1 | tee $OUT/bench_topk.log | cut -c1-330
echo "bench rc=${PIPESTATUS[0]} $(el)"
