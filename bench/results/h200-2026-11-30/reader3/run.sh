#!/usr/bin/env bash
# reader3's one device run: correctness of the new code (default = 4 stages, two tiles per step for
# fp8; alternatives 3 and 2 stages), then the old code (main 711138d) and the new code benched back to back.
cd "$(dirname "$0")"  # .dev/reader2
ln -sfn ../../.whl .whl
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader | tee $OUT/gpu.txt
TUNES='[null, {"kReaderWgStages": 3}, {"kReaderWgStages": 2}]'
PYTHONPATH=/tmp/site:$PWD KGEN_CACHE_DIR=/tmp/kcache timeout 85 python3 -m kgen.reader_check test specs/dsv4.yaml specs/dsv32_indexer.yaml --sample 20 --tunes "$TUNES" --json $OUT/test.json > $OUT/test.log 2>&1
echo "test rc=$?"; grep -v "^ok " $OUT/test.log | cut -c1-300 | tail -12
(cd ../reader2-base && PYTHONPATH=/tmp/site:$PWD KGEN_CACHE_DIR=/tmp/kcache-base timeout 35 python3 -m kgen.reader_check bench specs/dsv4/indexer_fp8.yaml --json $OUT/bench_base.json > $OUT/bench_base.log 2>&1; echo "base bench rc=$?")
cut -c1-190 $OUT/bench_base.log | tail -9
PYTHONPATH=/tmp/site:$PWD KGEN_CACHE_DIR=/tmp/kcache timeout 105 python3 -m kgen.reader_check bench specs/dsv4/indexer_fp8.yaml specs/indexer_bf16.yaml --tunes "$TUNES" --json $OUT/bench.json > $OUT/bench.log 2>&1
echo "bench rc=$?"; cut -c1-190 $OUT/bench.log | tail -48
