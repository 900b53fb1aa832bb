#!/usr/bin/env bash
# SGLang's DeepSeek-V4 top-k beside kgen's on the H200 (issue 21). From /work/main's root, after merging tpeer
# and preparing the kit there (git-ignored; the tvm-ffi wheel is fetched unless given):
#   PYTHONPATH=$PWD python scripts/sglang_topk_peer.py prepare .peers/sglang_topk [--tvm-ffi-wheel W]
#   run(command="bash bench/results/tpeer-2026-12-03/run.sh", carry=[".whl", ".peers"], timeout_s=210)
# 1. wheels; DeepGEMM built in the background; 2. SGLang's occupancy probe and top-k built with the machine's
# nvcc; 3. the peer's GPU test; 4. the bench (bench_topk_peer.py), its time limit what is left of TOTAL_S.
# Everything lands in $OUT; each step has its own timeout, so the call returns what it has.
# A dry run off the device: PY=<a python with torch> SITE=<dir> DG_SH=/dev/null OUT=<dir> bash run.sh
cd "$(dirname "$0")/../../.."
TOTAL_S=${TOTAL_S:-195} PY=${PY:-python3} SITE=${SITE:-/tmp/site} DG_SH=${DG_SH:-.peers/deepgemm/build_on_device.sh}
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s]"; }
$PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target $SITE .whl/*.whl
export PYTHONPATH=$SITE:$PWD KGEN_CACHE_DIR=${KGEN_CACHE_DIR:-/tmp/kcache} PYTHONUNBUFFERED=1
export KGEN_SGLANG_TOPK_KIT=$PWD/.peers/sglang_topk
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader; command -v nvcc;
  nvcc --version | tail -2; git log -1 --format='%H %s' 2>/dev/null; cat .peers/sglang_topk/KIT.json | head -12; } \
  > $OUT/machine.txt 2>&1
head -1 $OUT/machine.txt; echo "wheels $(el)"
DGENV=$(mktemp)
( timeout 120 bash $DG_SH > $DGENV 2> $OUT/deepgemm_build.log ) &
DG=$!
timeout 90 $PY scripts/sglang_topk_peer.py build .peers/sglang_topk > $OUT/sglang_topk_build.log 2>&1
echo "sglang top-k build rc=$? $(el)"; tail -3 $OUT/sglang_topk_build.log | cut -c1-400
timeout 40 $PY -m pytest tests/test_peer_sglang_topk_gpu.py -q -p no:cacheprovider -rs \
  > $OUT/pytest_peer_topk_gpu.log 2>&1
echo "pytest rc=$? $(el)"; tail -8 $OUT/pytest_peer_topk_gpu.log | cut -c1-400
wait $DG; echo "deepgemm build rc=$? $(el)"; tail -2 $OUT/deepgemm_build.log | cut -c1-300
[ -s $DGENV ] && eval "$(cat $DGENV)" && export PYTHONPATH=$SITE:$PWD:$PYTHONPATH
$PY -c "import deep_gemm; print('deep_gemm', deep_gemm.__file__)" 2>&1 | tail -1
LEFT=$(( TOTAL_S - ($(date +%s) - T0) )); [ $LEFT -gt 150 ] && LEFT=150; [ $LEFT -lt 20 ] && LEFT=20
timeout -s INT $LEFT $PY bench/results/tpeer-2026-12-03/bench_topk_peer.py --json $OUT/bench_topk_peer.json \
  --time-limit $(( LEFT - 15 )) "$@" > $OUT/bench_topk_peer.log 2>&1
echo "bench rc=$? (limit $LEFT s) $(el)"; cut -c1-300 $OUT/bench_topk_peer.log | tail -25
# a device fault (a sticky CUDA error) ends every later shape: the rest again without the SGLang peer
LEFT=$(( TOTAL_S - ($(date +%s) - T0) ))
if grep -qE "illegal (memory )?(address|instruction)|unspecified launch failure|misaligned address" \
    $OUT/bench_topk_peer.log && [ $LEFT -gt 30 ]; then
  timeout -s INT $LEFT $PY bench/results/tpeer-2026-12-03/bench_topk_peer.py --no-sglang \
    --json $OUT/bench_topk_nosglang.json --time-limit $(( LEFT - 15 )) "$@" > $OUT/bench_topk_nosglang.log 2>&1
  echo "bench without SGLang rc=$? $(el)"; cut -c1-300 $OUT/bench_topk_nosglang.log | tail -8
fi
