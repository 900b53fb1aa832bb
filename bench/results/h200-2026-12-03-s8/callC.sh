#!/usr/bin/env bash
# callC of session 8: the top-k after callB (2d2fc3e: rank count, 4 loads in flight, wider slices) on the H200, from the repository root, the kits packed as
# callA.sh says:
#   run(command="bash bench/results/h200-2026-12-03-s8/callC.sh", carry=[".whl", ".xfer/pk"], timeout_s=420)
# 1. the top-k's GPU tests, 2. the top-k beside SGLang's topk_v2, torch.topk and DeepGEMM (bench_topk_peer.py),
# 3. the ops', recall's and the top-k peer's GPU tests, 4. kgen test --readers-only --sample 4, 5. host cost.
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
  --batches 1,8,32,64 --keys 4096,65536,262144 --ks 512,2048 --lengths equal:1,pm30:2 --time-limit 140 \
  > $R/topk_peer.log 2>&1
echo "top-k bench rc=$? $(el)"; grep -c "cold:" $R/topk_peer.log
timeout 90 python3 -m pytest -m gpu -q -p no:cacheprovider -rs tests/test_ops_gpu.py tests/test_recall.py \
  tests/test_peer_sglang_topk_gpu.py > $R/pytest_more.log 2>&1
echo "pytest ops/recall/peer rc=$? $(el)"; grep -E "^(FAILED|ERROR)" $R/pytest_more.log | cut -c1-300 | head; tail -1 $R/pytest_more.log
timeout 60 python3 -m kgen test --readers-only specs/dsv4.yaml specs/dsv32_indexer.yaml --sample 4 --json \
  > $R/readers.json 2> $R/readers.log
echo "readers rc=$? $(el)"; grep -v "^ok " $R/readers.log | cut -c1-300 | tail -4
timeout 25 python3 scripts/host_breakdown.py --json $R/host.json > $R/host.log 2>&1
echo "host rc=$? $(el)"; grep -E "host_us_per_call" $R/host.log | cut -c1-200
tar -czf $OUT/callC.tgz -C $OUT r && rm -rf $R
