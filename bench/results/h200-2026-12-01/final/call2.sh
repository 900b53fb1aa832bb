#!/usr/bin/env bash
# call2: the fixes of call1's failures, and the illegal address pinned (one device call, repository root):
#   run(command="bash bench/results/h200-2026-12-01/final/call2.sh", carry=[".whl", ".releases/trees"])
cd "$(dirname "$0")/../../../.."
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD KGEN_CACHE_DIR=/tmp/kcache PYTHONUNBUFFERED=1 KGEN_RELEASES_DIR=$PWD/.releases
D=bench/results/h200-2026-12-01/final
which compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer /usr/local/cuda*/compute-sanitizer 2>/dev/null
timeout 200 python3 -m pytest -q -p no:cacheprovider -rs tests/test_aot.py tests/test_gpu.py tests/test_gpu_indexer.py \
  tests/test_engines_loop.py -m gpu > $OUT/pytest_fixed.log 2>&1
echo "pytest (the failed files) rc=$?"; tail -5 $OUT/pytest_fixed.log | cut -c1-300
for t in '{"kReaderWgStages": 2}' '{"kReaderWgStages": 3}' '{"kReaderWgTma": 0}'; do
  CUDA_LAUNCH_BLOCKING=1 timeout 60 python3 $D/one_case.py sample_s0_53 6 "$t" 2>&1 | tail -4 | cut -c1-300
done
timeout 60 python3 $D/one_case.py specs/dsv4/indexer_fp8.yaml 2 '{"kReaderWgmma": 0}' 2>&1 | tail -3 | cut -c1-300
CS=$(which compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
if [ -n "$CS" ]; then
  timeout 150 $CS --tool memcheck --print-limit 8 python3 $D/one_case.py sample_s0_53 6 > $OUT/memcheck.log 2>&1
  echo "memcheck rc=$?"; grep -m 12 -E "Invalid|at .*\+|by thread|Address|ERROR SUMMARY" $OUT/memcheck.log | cut -c1-250
fi
