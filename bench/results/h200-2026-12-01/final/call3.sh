#!/usr/bin/env bash
# call3: the illegal address of sample_s0_53 pinned (memcheck without the API noise; which of its cases
# fault, each in its own process), and the engine loop's GPU half with the CUDA-only imports stubbed:
#   run(command="bash bench/results/h200-2026-12-01/final/call3.sh", carry=[".whl", ".releases/trees"])
cd "$(dirname "$0")/../../../.."
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD KGEN_CACHE_DIR=/tmp/kcache PYTHONUNBUFFERED=1 KGEN_RELEASES_DIR=$PWD/.releases
D=bench/results/h200-2026-12-01/final
for c in 0 1 2 3 4 5 6 7; do
  timeout 40 python3 $D/one_case.py sample_s0_53 $c 2>&1 | grep -E "^sample|LogitsResult|Error" | cut -c1-160 | tr '\n' ' '; echo
done
timeout 150 compute-sanitizer --tool memcheck --report-api-errors no --show-backtrace device --print-limit 6 \
  python3 $D/one_case.py sample_s0_53 6 > $OUT/memcheck.log 2>&1
echo "memcheck rc=$?"; grep -v "^=========     \(Host\|    \)" $OUT/memcheck.log | head -40 | cut -c1-220
timeout 150 python3 -m pytest -q -p no:cacheprovider -rs tests/test_engines_loop.py -m gpu > $OUT/pytest_loop.log 2>&1
echo "engine loop gpu rc=$?"; tail -3 $OUT/pytest_loop.log | cut -c1-300
