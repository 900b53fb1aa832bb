#!/usr/bin/env bash
# call5: sample_s0_53's fault, from both ends: the machine code the device compiled around the faulting
# PC (cuobjdump of the cached cubin), and the per-row copies whose source is outside the cache, printed by
# an instrumented scratch copy of the header (instrument.py; the tree's header is not changed):
#   run(command="bash bench/results/h200-2026-12-01/final/call5.sh", carry=[".whl"])
cd "$(dirname "$0")/../../../.."
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
D=bench/results/h200-2026-12-01/final; R=$PWD
python3 -c "import ctypes; l=ctypes.CDLL('libnvrtc.so.13'); a=ctypes.c_int(); b=ctypes.c_int(); l.nvrtcVersion(ctypes.byref(a), ctypes.byref(b)); print('nvrtc', a.value, b.value)" 2>&1 | tail -1
KGEN_CACHE_DIR=/tmp/kc1 timeout 60 python3 $D/one_case.py sample_s0_53 6 2>&1 | grep -E "compiled|Error" | head -3
CUBIN=$(find /tmp/kc1 -name "*.cubin" | grep sample_s0_53 | head -1); echo "cubin: $CUBIN"
cuobjdump -sass "$CUBIN" > $OUT/s53_device.sass 2>&1; grep -n "/\*6810\*/" -B36 -A4 $OUT/s53_device.sass | cut -c1-120
rm -rf /tmp/inst && mkdir -p /tmp/inst && cp -r kgen templates specs /tmp/inst/ && python3 $D/instrument.py /tmp/inst/templates/include/kgen/indexer_logits.cuh
cd /tmp/inst && PYTHONPATH=/tmp/site:/tmp/inst KGEN_CACHE_DIR=/tmp/kc2 timeout 60 python3 $R/$D/one_case.py sample_s0_53 6 > $OUT/instrumented.log 2>&1
echo "instrumented rc=$?"; grep -c BAD $OUT/instrumented.log; grep BAD $OUT/instrumented.log | head -12; grep -E "LogitsResult|Error" $OUT/instrumented.log | head -3 | cut -c1-200
