#!/usr/bin/env bash
# A device run of the top-k (from /work/main, the topk2 branch staged under .xfer/topk2 with .peers/deepgemm as
# .xfer/topk2/peers.tar.xz: the tree, .whl and .peers together pass the 64 MiB a run carries):
#   run(command="cd .xfer/topk2 && bash bench/results/topk2-2026-12-03/run.sh [bench args]",
#       carry=[".xfer/topk2", ".whl"])
# the GPU tests of the top-k, the bench matrix with DeepGEMM (built on the device meanwhile), then ncu of the
# top-k kernel at 1 x 64K and 1 x 256K keys, k = 512. T_PYTEST, T_BENCH, T_NCU bound the steps (seconds).
cd "$(dirname "$0")/../../.."  # the worktree's root (under .xfer/topk2 of the lead's tree)
ROOT=$(cd ../.. && pwd)
PEERS=$ROOT/.peers
if [ -f peers.tar.xz ]; then mkdir -p /tmp/peers && tar -xJf peers.tar.xz -C /tmp/peers && PEERS=/tmp/peers; fi
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $ROOT/.whl/*.whl
export PYTHONPATH=/tmp/site:$PWD KGEN_CACHE_DIR=/tmp/kcache PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s]"; }
( bash $PEERS/deepgemm/build_on_device.sh > /tmp/dg_env.sh 2> $OUT/deepgemm_build.log ) &
DG=$!
timeout ${T_PYTEST:-60} python3 -m pytest tests/test_topk_gpu.py -q -x -p no:cacheprovider -rs > $OUT/pytest_topk_gpu.log 2>&1
echo "pytest rc=$? $(el)"; tail -15 $OUT/pytest_topk_gpu.log | cut -c1-400
wait $DG; echo "deepgemm build rc=$? $(el)"; tail -3 $OUT/deepgemm_build.log | cut -c1-300
[ -s /tmp/dg_env.sh ] && eval "$(cat /tmp/dg_env.sh)" && export PYTHONPATH=/tmp/site:$PWD:$PYTHONPATH
python3 -c "import deep_gemm; print('deep_gemm', deep_gemm.__file__)" 2>&1 | tail -1
timeout ${T_BENCH:-80} python3 bench/results/topk2-2026-12-03/bench_topk.py --json $OUT/bench_topk.json "$@" 2>&1 | tee $OUT/bench_topk.log | cut -c1-250
echo "bench rc=${PIPESTATUS[0]} $(el)"
if [ "${T_NCU:-30}" -gt 0 ]; then
  timeout ${T_NCU:-30} ncu --clock-control none -k regex:indexer_topk -c 2 --section SpeedOfLight --section WarpStateStats \
    --section LaunchStats --section Occupancy python3 bench/results/topk2-2026-12-03/profile_topk.py > $OUT/ncu_topk.txt 2>&1
  echo "ncu rc=$? $(el)"; grep -E "Duration|Compute \(SM\) Throughput|Memory Throughput|Cluster Size|Grid Size|No Eligible|Issued Warp|Registers Per|Achieved Occ" $OUT/ncu_topk.txt | cut -c1-120 | head -30
fi
