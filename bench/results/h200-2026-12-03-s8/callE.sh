#!/usr/bin/env bash
# callE of session 8: the top-k with TOPK_RANK_CAP 512, from the repository root, the kits packed as callA.sh says:
#   run(command="bash bench/results/h200-2026-12-03-s8/callE.sh", carry=[".whl", ".xfer/pk"], timeout_s=240)
# 1. the top-k's GPU tests on the shipped plan, 2. TOPK_RANK_CAP 256, 512 and 1024 (topk_ab.py, each in its own
# process; SGLang's top-k beside, DeepGEMM not built this call) on B 1, 8, 32 x 4K, 64K, 256K, k 512 and 2048.
cd "$(dirname "$0")/../../.."
ROOT=$PWD; HERE=$ROOT/bench/results/h200-2026-12-03-s8
[ -d .peers ] || tar -xJf .xfer/pk/peers.tar.xz
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$ROOT KGEN_CACHE_DIR=/tmp/kcache PYTHONUNBUFFERED=1 KGEN_RELEASES_DIR=$ROOT/.releases
export KGEN_SGLANG_KIT=$ROOT/.peers/sglang KGEN_SGLANG_TOPK_KIT=$ROOT/.peers/sglang_topk
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s]"; }
R=$OUT/r; mkdir -p $R
( timeout 100 python3 scripts/sglang_topk_peer.py build .peers/sglang_topk > $R/sglang_topk_build.log 2>&1 ) &
SG=$!
timeout 100 python3 -m pytest -q -p no:cacheprovider -rs tests/test_topk_gpu.py > $R/pytest_topk_gpu.log 2>&1
echo "pytest topk rc=$? $(el)"; grep -E "^(FAILED|ERROR)" $R/pytest_topk_gpu.log | cut -c1-300 | head; tail -1 $R/pytest_topk_gpu.log
wait $SG; echo "sglang topk build rc=$? $(el)"
for ab in rank:256 rank:512 rank:1024; do
  TOPK_AB=$ab timeout -s INT 40 python3 $HERE/topk_ab.py --json $R/topk_ab_${ab/:/}.json --batches 1,8,32 \
    --keys 4096,65536,262144 --ks 512,2048 --lengths equal:1 --time-limit 30 > $R/topk_ab_${ab/:/}.log 2>&1
  echo "top-k $ab rc=$? $(el)"
done
tar -czf $OUT/callE.tgz -C $OUT r && rm -rf $R
