#!/usr/bin/env bash
# Device run 3 (final) of the top-k (from /work/main:
#   run(command="cd .xfer/topk && bash bench/results/topk-2026-12-01/run3.sh", carry=[".xfer/topk", ".whl", ".peers"])):
# the GPU tests of the top-k, then the bench matrix with DeepGEMM where
# it builds in time.
cd "$(dirname "$0")/../../.."  # the worktree's root (under .xfer/topk of the lead's tree)
ROOT=$(cd ../.. && pwd)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $ROOT/.whl/*.whl
export PYTHONPATH=/tmp/site:$PWD KGEN_CACHE_DIR=/tmp/kcache PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s]"; }
( bash $ROOT/.peers/deepgemm/build_on_device.sh > /tmp/dg_env.sh 2> $OUT/deepgemm_build.log ) &
DG=$!
timeout ${T_PYTEST:-45} python3 -m pytest tests/test_topk_gpu.py -q -x -p no:cacheprovider -rs > $OUT/pytest_topk_gpu.log 2>&1
echo "pytest rc=$? $(el)"; tail -15 $OUT/pytest_topk_gpu.log | cut -c1-400
wait $DG; echo "deepgemm build rc=$? $(el)"; tail -3 $OUT/deepgemm_build.log | cut -c1-300
[ -s /tmp/dg_env.sh ] && eval "$(cat /tmp/dg_env.sh)" && export PYTHONPATH=/tmp/site:$PWD:$PYTHONPATH
python3 -c "import deep_gemm; print('deep_gemm', deep_gemm.__file__)" 2>&1 | tail -1
timeout ${T_BENCH:-98} python3 bench/results/topk-2026-12-01/bench_topk.py --json $OUT/bench_topk.json "$@" 2>&1 | tee $OUT/bench_topk.log | cut -c1-220
echo "bench rc=${PIPESTATUS[0]} $(el)"
