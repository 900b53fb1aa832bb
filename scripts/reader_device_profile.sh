#!/usr/bin/env bash
# The reader's ncu limiter and SASS opcode histogram (issue 10), one device call:
#   run(command="WHL=../../.whl bash .dev/reader/scripts/reader_device_profile.sh", carry=[".dev/reader", ".whl"])
# ncu (clocks left alone) of the default fp8 and bf16 kernels at SHAPES (default 1 x 4096 and 32 x 65536 keys):
# speed of light, occupancy, warp stall reasons; then the opcode histogram of their sm_90a cubins.
cd "$(dirname "$0")/.."
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site ${WHL:-.whl}/*.whl
export PYTHONPATH=/tmp/site:$PWD KGEN_CACHE_DIR=/tmp/kcache PYTHONUNBUFFERED=1
timeout ${T_NCU:-150} ncu --clock-control none --section SpeedOfLight --section Occupancy --section WarpStateStats \
  --section ComputeWorkloadAnalysis -k regex:indexer_logits -c ${NCU_COUNT:-4} \
  python3 -m kgen bench specs/dsv4/indexer_fp8.yaml specs/indexer_bf16.yaml --profile ${SHAPES:-1x4096,32x65536} \
  > $OUT/ncu.txt 2>&1
echo "ncu rc=$?"
grep -E "indexer_logits|Duration|Throughput|Pipe|Achieved Occupancy|Registers|Stall|Warp Cycles|Issue" $OUT/ncu.txt | cut -c1-160 | head -90
for f in /tmp/kcache/*.indexer_logits/sm_90a-*/kernel.cubin; do
  echo "== $f"
  cuobjdump --dump-sass "$f" | grep -oE '^ +/\*[0-9a-f]{4}\*/ +[A-Z][A-Z0-9._]*' | awk '{print $2}' | sort | uniq -c | sort -rn | head -20
  echo "tensor-core instructions: $(cuobjdump --dump-sass "$f" | grep -cE '[HQ]GMMA') HGMMA/QGMMA (wgmma bf16/e4m3), $(cuobjdump --dump-sass "$f" | grep -cE 'HMMA') HMMA (mma.sync)"
done > $OUT/sass.txt 2>&1
cat $OUT/sass.txt | head -50
