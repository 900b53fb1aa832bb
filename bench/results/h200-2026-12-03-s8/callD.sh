#!/usr/bin/env bash
# callD of session 8: the top-k's rank count with eight loads in flight, on the H200, from the repository root,
# the kits packed as callA.sh says:
#   run(command="bash bench/results/h200-2026-12-03-s8/callD.sh", carry=[".whl", ".xfer/pk"], timeout_s=420)
# 1. the top-k's GPU tests, 2. the top-k beside SGLang's topk_v2, torch.topk and DeepGEMM (bench_topk_peer.py),
# 3. TOPK_RANK_CAP 0 and 1024 beside the shipped 256 (topk_ab.py), each in its own process.
# Everything lands in $OUT, the logs and JSON packed in one archive (the device tool returns few files).
cd "$(dirname "$0")/../../.."
ROOT=$PWD; HERE=$ROOT/bench/results/h200-2026-12-03-s8
[ -d .peers ] || tar -xJf .xfer/pk/peers.tar.xz
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$ROOT KGEN_CACHE_DIR=/tmp/kcache PYTHONUNBUFFERED=1 KGEN_RELEASES_DIR=$ROOT/.releases
export KGEN_SGLANG_KIT=$ROOT/.peers/sglang KGEN_SGLANG_TOPK_KIT=$ROOT/.peers/sglang_topk
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s]"; }
R=$OUT/r; mkdir -p $R
( bash .peers/deepgemm/build_on_device.sh > /tmp/dg_env 2> $R/deepgemm_build.log ) &
DG=$!
( timeout 100 python3 scripts/sglang_topk_peer.py build .peers/sglang_topk > $R/sglang_topk_build.log 2>&1 ) &
SG=$!
timeout 100 python3 -m pytest -q -p no:cacheprovider -rs tests/test_topk_gpu.py > $R/pytest_topk_gpu.log 2>&1
echo "pytest topk rc=$? $(el)"; grep -E "^(FAILED|ERROR)" $R/pytest_topk_gpu.log | cut -c1-300 | head; tail -1 $R/pytest_topk_gpu.log
wait $SG; echo "sglang topk build rc=$? $(el)"
wait $DG; echo "deepgemm build rc=$? $(el)"
eval "$(cat /tmp/dg_env)"; DGPATH=${PYTHONPATH%%:*}; export PYTHONPATH=/tmp/site:$ROOT:$DGPATH
timeout -s INT 165 python3 bench/results/tpeer-2026-12-03/bench_topk_peer.py --json $R/topk_peer.json \
  --batches 1,8,32,64 --keys 4096,65536,262144 --ks 512,2048 --lengths equal:1,pm30:2 --time-limit 100 \
  > $R/topk_peer.log 2>&1
echo "top-k bench rc=$? $(el)"; grep -c "cold:" $R/topk_peer.log
for ab in rank:0 rank:1024; do
  TOPK_AB=$ab timeout -s INT 45 python3 $HERE/topk_ab.py --json $R/topk_ab_${ab/:/}.json --batches 1,8,32 \
    --keys 4096,65536,262144 --ks 512,2048 --lengths equal:1 --time-limit 35 > $R/topk_ab_${ab/:/}.log 2>&1
  echo "top-k $ab rc=$? $(el)"
done
tar -czf $OUT/callD.tgz -C $OUT r && rm -rf $R
