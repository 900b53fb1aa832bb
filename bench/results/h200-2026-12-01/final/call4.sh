#!/usr/bin/env bash
# call4: the faulting source line of sample_s0_53's case 6 (compute-sanitizer on a -lineinfo cubin):
#   run(command="bash bench/results/h200-2026-12-01/final/call4.sh", carry=[".whl"])
cd "$(dirname "$0")/../../../.."
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD KGEN_CACHE_DIR=/tmp/kcache PYTHONUNBUFFERED=1
D=bench/results/h200-2026-12-01/final
ONE_CASE_LINEINFO=1 timeout 200 compute-sanitizer --tool memcheck --report-api-errors no --show-backtrace device \
  --print-limit 4 python3 $D/one_case.py sample_s0_53 6 > $OUT/memcheck_lines.log 2>&1
echo "memcheck rc=$?"; grep -v "^=========     Host" $OUT/memcheck_lines.log | head -60 | cut -c1-250
