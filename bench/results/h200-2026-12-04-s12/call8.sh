#!/usr/bin/env bash
# call8 of session 12: the GPU tests call5 left to call4 (the writer's, the engines' loops on the released
# trees, the AOT directory's), on this session's main, so that every GPU test has run on its kernels. No peers.
#   run(command="bash bench/results/h200-2026-12-04-s12/call8.sh", carry=[".whl", ".xfer/pk"], timeout_s=330)
cd "$(dirname "$0")/../../.."
[ -d .releases/trees ] || tar -xJf .xfer/pk/trees.tar.xz
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD KGEN_CACHE_DIR=/tmp/kcache PYTHONUNBUFFERED=1 KGEN_RELEASES_DIR=$PWD/.releases
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s]"; }
R=$OUT/r; mkdir -p "$R"
timeout 280 python3 -m pytest -m gpu -q -p no:cacheprovider -rs --junitxml=$R/pytest_gpu.xml tests/test_aot.py \
  tests/test_engines_gpu.py tests/test_engines_loop.py tests/test_engines_vllm_loop.py tests/test_gpu.py > $R/pytest_gpu.log 2>&1
echo "pytest rc=$? $(el)"; grep -E "^(FAILED|ERROR)" $R/pytest_gpu.log | cut -c1-300 | head -12
grep -o 'tests="[0-9]*"\|failures="[0-9]*"\|errors="[0-9]*"\|skipped="[0-9]*"' $R/pytest_gpu.xml | head -4 | tr '\n' ' '; echo
tar -czf "$OUT/call8.tgz" -C "$OUT" r && rm -rf "$R"
