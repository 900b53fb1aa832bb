#!/usr/bin/env bash
# call5 of session 9: main as this session leaves it, every GPU test, from the repository root (kits packed as
# README.md says):
#   run(command="bash bench/results/h200-2026-12-03-s9/call5.sh", carry=[".whl", ".xfer/pk"], timeout_s=420)
# pytest -m gpu (the engine loops included; the peers' GPU tests after their builds), logs straight to $OUT.
cd "$(dirname "$0")/../../.."
[ -d .peers ] || tar -xJf .xfer/pk/peers.tar.xz
[ -d .releases/trees ] || tar -xJf .xfer/pk/trees.tar.xz
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD KGEN_CACHE_DIR=/tmp/kcache PYTHONUNBUFFERED=1 KGEN_RELEASES_DIR=$PWD/.releases
export KGEN_SGLANG_KIT=$PWD/.peers/sglang KGEN_SGLANG_TOPK_KIT=$PWD/.peers/sglang_topk
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s]"; }
( timeout 100 python3 scripts/sglang_topk_peer.py build .peers/sglang_topk > $OUT/sglang_topk_build.log 2>&1
  timeout 60 python3 scripts/sglang_peer.py build .peers/sglang > $OUT/sglang_store_build.log 2>&1 ) &
SG=$!
timeout 270 python3 -m pytest -m gpu -q -p no:cacheprovider -rs --junitxml=$OUT/pytest_gpu.xml \
  --ignore=tests/test_peer_sglang_gpu.py --ignore=tests/test_peer_sglang_topk_gpu.py > $OUT/pytest_gpu.log 2>&1
echo "pytest -m gpu rc=$? $(el)"; grep -E "^(FAILED|ERROR)" $OUT/pytest_gpu.log | cut -c1-300 | head -12
tail -2 $OUT/pytest_gpu.log | cut -c1-300
wait $SG; echo "sglang builds done $(el)"
timeout 50 python3 -m pytest -m gpu -q -p no:cacheprovider -rs tests/test_peer_sglang_gpu.py \
  tests/test_peer_sglang_topk_gpu.py > $OUT/pytest_peers.log 2>&1
echo "peers' pytest rc=$? $(el)"; tail -2 $OUT/pytest_peers.log | cut -c1-300
