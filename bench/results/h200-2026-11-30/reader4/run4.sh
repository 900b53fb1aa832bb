#!/usr/bin/env bash
# reader4, device run 4: more CTAs than one wave (kReaderWgWaves: the launch plans that many waves of
# the SM's CTAs; the kernel derives its slice from gridDim.x, so only the host's split changes). Correctness
# of 2 and 4 waves, then fp8 speed with the default bracketing the alternatives (first and last) at each shape.
#   run(command="bash .dev/reader/bench/results/h200-2026-11-30/reader4/run4.sh", carry=[".dev/reader", ".whl"])
cd "$(dirname "$0")/../../../.."  # the repository copy (.dev/reader)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site ../../.whl/*.whl
export PYTHONPATH=/tmp/site:$PWD KGEN_CACHE_DIR=/tmp/kcache PYTHONUNBUFFERED=1
W=/tmp/r4; mkdir -p $W
timeout 70 python3 -m kgen.reader_check test specs/dsv4.yaml specs/dsv32_indexer.yaml --sample 20 --tunes '[null, {"kReaderWgWaves": 2}, {"kReaderWgWaves": 4}]' --json $W/test4.json > $W/test4.log 2>&1
echo "test rc=$?"; grep -v "^ok " $W/test4.log | cut -c1-300 | tail -6
timeout 70 python3 -m kgen.reader_check bench specs/dsv4/indexer_fp8.yaml --bench-shapes 1x65536,1x262144,32x4096,32x65536,128x4096,128x65536 \
  --tunes '[null, {"kReaderWgWaves": 2}, {"kReaderWgWaves": 4}, null]' --json $W/bench4.json > $W/bench4.log 2>&1
echo "bench rc=$?"; cut -c1-200 $W/bench4.log | tail -25
tar czf $OUT/run4.tgz -C $W .
