#!/usr/bin/env bash
# call2 of 2026-12-03: main after the merges of this session (the reader's register plan and lean prologue,
# the pair / split MTP cubins, the cluster top-k with the SM rule, the native chain, SGLang's store and
# top-k peers), one device call from the repository root, with the kits prepared (git-ignored):
#   scripts/sglang_peer.py prepare .peers/sglang; scripts/sglang_topk_peer.py prepare .peers/sglang_topk;
#   git archive f86e6b4 kgen templates specs | tar -x -C .xfer/base   (the reader before this session's prologue)
#   tar -cJf .xfer/pk/peers.tar.xz .peers   (the tree, .whl and .peers as they are pass the 64 MiB a run carries)
#   run(command="bash bench/results/h200-2026-12-03/call2.sh", carry=[".whl", ".xfer/pk", ".xfer/base"], timeout_s=330)
# 1. pytest -m gpu (the engine loops ran in call1 and are left out: nothing they run changed but the launch
#    pack, which test_gpu / test_ops_gpu / test_topk_gpu cover), 2. kgen test --readers-only --sample 4,
# 3. (the peers' GPU tests: left out for time; the benches check the peers' outputs), 4. the reader at small shapes and MTP beside DeepGEMM,
# this tree and the base each in its own process, 5. the top-k beside SGLang's topk_v2, torch.topk and
# DeepGEMM, 6. host cost per eager call. Every step has its own timeout; everything lands in $OUT.
cd "$(dirname "$0")/../../.."
ROOT=$PWD
[ -d .peers ] || { [ -f .xfer/pk/peers.tar.xz ] && tar -xJf .xfer/pk/peers.tar.xz; }
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$ROOT KGEN_CACHE_DIR=/tmp/kcache PYTHONUNBUFFERED=1 KGEN_RELEASES_DIR=$ROOT/.releases
export KGEN_SGLANG_KIT=$ROOT/.peers/sglang KGEN_SGLANG_TOPK_KIT=$ROOT/.peers/sglang_topk
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s]"; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
( bash .peers/deepgemm/build_on_device.sh > /tmp/dg_env 2> $OUT/deepgemm_build.log ) &
DG=$!
( timeout 100 python3 scripts/sglang_topk_peer.py build .peers/sglang_topk > $OUT/sglang_topk_build.log 2>&1
  timeout 60 python3 scripts/sglang_peer.py build .peers/sglang > $OUT/sglang_store_build.log 2>&1 ) &
SG=$!
timeout 110 python3 -m pytest -m gpu -q -p no:cacheprovider -rs --junitxml=$OUT/pytest_gpu.xml \
  --ignore=tests/test_engines_loop.py --ignore=tests/test_engines_vllm_loop.py \
  --ignore=tests/test_peer_sglang_gpu.py --ignore=tests/test_peer_sglang_topk_gpu.py > $OUT/pytest_gpu.log 2>&1
echo "pytest -m gpu rc=$? $(el)"; grep -E "^(FAILED|ERROR)" $OUT/pytest_gpu.log | cut -c1-300 | head -12
tail -2 $OUT/pytest_gpu.log | cut -c1-300
timeout 45 python3 -m kgen test --readers-only specs/dsv4.yaml specs/dsv32_indexer.yaml --sample 4 --json \
  > $OUT/readers.json 2> $OUT/readers.log
echo "readers rc=$? $(el)"; grep -v "^ok " $OUT/readers.log | cut -c1-300 | tail -8
wait $SG; echo "sglang builds done $(el)"; tail -2 $OUT/sglang_topk_build.log $OUT/sglang_store_build.log | cut -c1-300
wait $DG; echo "deepgemm build rc=$? $(el)"
eval "$(cat /tmp/dg_env)"; DGPATH=${PYTHONPATH%%:*}; export PYTHONPATH=/tmp/site:$ROOT:$DGPATH
python3 -c "import deep_gemm; print('deep_gemm', deep_gemm.__file__)" 2>&1 | tail -1
SHAPES=1:4096:equal:1,1:65536:equal:1,32:4096:equal:1,1:262144:equal:1,128:4096:equal:1,32:65536:uniform:1
for which in base head; do
  tree=$([ $which = base ] && echo $ROOT/.xfer/base || echo $ROOT)
  shapes=$SHAPES$([ $which = head ] && echo ,32:65536:equal:2)
  (cd $tree && PYTHONPATH=/tmp/site:$tree:$DGPATH MTP_CONTROL=0 MTP_SHAPES=$shapes \
     timeout $([ $which = base ] && echo 20 || echo 40) \
     python3 $ROOT/scripts/reader_mtp_bench.py $OUT/reader_$which.json specs/dsv4/indexer_fp8.yaml 2>&1 \
     | sed "s/^/$which /" | tee -a $OUT/reader.log | cut -c1-260)
  echo "reader bench $which $(el)"
done
timeout 25 python3 scripts/host_breakdown.py --json $OUT/host.json > $OUT/host.log 2>&1
echo "host rc=$? $(el)"; grep -E "host_us_per_call" $OUT/host.log
timeout -s INT 55 python3 bench/results/tpeer-2026-12-03/bench_topk_peer.py --json $OUT/topk_peer.json \
  --batches 1,8,32 --keys 65536,262144 --ks 512 --lengths equal:1,pm30:2 --time-limit 45 > $OUT/topk_peer.log 2>&1
echo "top-k bench rc=$? $(el)"; cut -c1-260 $OUT/topk_peer.log | tail -6
