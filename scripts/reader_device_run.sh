#!/usr/bin/env bash
# The reader's GPU run (issue 10), one device call:
#   run(command="WHL=../../.whl bash .dev/reader/scripts/reader_device_run.sh", carry=[".dev/reader", ".whl"])
# Reader GPU run: correctness (shipped readable variants, 20 random readable specs, alternative
# tunings) then speed (fp8 / bf16 / fp4 indexer keys, bench-method shapes, tunings compared)
cd "$(dirname "$0")/.."  # the repository root (or its copy under .dev/)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site ${WHL:-.whl}/*.whl
export PYTHONPATH=/tmp/site:$PWD KGEN_CACHE_DIR=/tmp/kcache PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
TUNES='[null, {"kReaderHeadPasses": 4}, {"kReaderMinBlocks": 3}, {"kReaderPrefetch": 0}]'
timeout ${T_TEST:-130} python3 -m kgen.reader_check test specs/dsv4.yaml specs/dsv32_indexer.yaml --sample 20 --tunes "$TUNES" --json $OUT/test.json > $OUT/test.log 2>&1
echo "test rc=$?"
grep -v "^ok " $OUT/test.log | cut -c1-400 | tail -25
timeout ${T_BENCH:-170} python3 -m kgen.reader_check bench specs/dsv4/indexer_fp8.yaml specs/indexer_bf16.yaml specs/dsv4/indexer_fp4.yaml --tunes "$TUNES" --json $OUT/bench.json > $OUT/bench.log 2>&1
echo "bench rc=$?"
cut -c1-250 $OUT/bench.log | tail -70
