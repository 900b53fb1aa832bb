#!/usr/bin/env bash
# callA of session 8 (2026-12-03): main 6449175 as session 7 left it, the whole GPU suite at last (session 7's
# call2 was cut after 126 tests), from the repository root, the kits prepared and packed (git-ignored):
#   make install releases wheels; the peers as docs/gpu.md says, then
#   tar -cJf .xfer/pk/peers.tar.xz .peers; tar -cJf .xfer/pk/trees.tar.xz .releases/trees
#   run(command="bash bench/results/h200-2026-12-03-s8/callA.sh", carry=[".whl", ".xfer/pk"], timeout_s=420)
# 1. pytest -m gpu, every GPU test (the engine loops and both peers' tests included), 2. kgen test
# --readers-only --sample 4. Everything lands in $OUT.
cd "$(dirname "$0")/../../.."
ROOT=$PWD
[ -d .peers ] || tar -xJf .xfer/pk/peers.tar.xz
[ -d .releases/trees ] || tar -xJf .xfer/pk/trees.tar.xz
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$ROOT KGEN_CACHE_DIR=/tmp/kcache PYTHONUNBUFFERED=1 KGEN_RELEASES_DIR=$ROOT/.releases
export KGEN_SGLANG_KIT=$ROOT/.peers/sglang KGEN_SGLANG_TOPK_KIT=$ROOT/.peers/sglang_topk
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s]"; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
( timeout 100 python3 scripts/sglang_topk_peer.py build .peers/sglang_topk > $OUT/sglang_topk_build.log 2>&1
  timeout 60 python3 scripts/sglang_peer.py build .peers/sglang > $OUT/sglang_store_build.log 2>&1 ) &
SG=$!
# the peers' GPU tests last, once their builds are done
timeout 250 python3 -m pytest -m gpu -q -p no:cacheprovider -rs --junitxml=$OUT/pytest_gpu.xml \
  --ignore=tests/test_peer_sglang_gpu.py --ignore=tests/test_peer_sglang_topk_gpu.py > $OUT/pytest_gpu.log 2>&1
echo "pytest -m gpu rc=$? $(el)"; grep -E "^(FAILED|ERROR)" $OUT/pytest_gpu.log | cut -c1-300 | head -12
tail -2 $OUT/pytest_gpu.log | cut -c1-300
wait $SG; echo "sglang builds done $(el)"; tail -1 $OUT/sglang_topk_build.log $OUT/sglang_store_build.log | cut -c1-200
timeout 60 python3 -m pytest -m gpu -q -p no:cacheprovider -rs tests/test_peer_sglang_gpu.py \
  tests/test_peer_sglang_topk_gpu.py > $OUT/pytest_peers.log 2>&1
echo "peers' pytest rc=$? $(el)"; tail -3 $OUT/pytest_peers.log | cut -c1-300
timeout 60 python3 -m kgen test --readers-only specs/dsv4.yaml specs/dsv32_indexer.yaml --sample 4 --json \
  > $OUT/readers.json 2> $OUT/readers.log
echo "readers rc=$? $(el)"; grep -v "^ok " $OUT/readers.log | cut -c1-300 | tail -8
