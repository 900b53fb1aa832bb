#!/usr/bin/env bash
# reader4, device run 5 (the landed code, with the reader's PDL wait): correctness (--sample 20; the 4-stage
# ring on the 70000-key and MTP cases), the reader's GPU pytest (with the writer -> reader PDL test), fp8
# speed of the default and the 4-stage ring, bf16 speed. One archive back.
#   run(command="bash .dev/reader/bench/results/h200-2026-11-30/reader4/run5.sh", carry=[".dev/reader", ".whl"])
cd "$(dirname "$0")/../../../.."  # the repository copy (.dev/reader)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site ../../.whl/*.whl
export PYTHONPATH=/tmp/site:$PWD KGEN_CACHE_DIR=/tmp/kcache PYTHONUNBUFFERED=1
W=/tmp/r5; mkdir -p $W
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.limit --format=csv,noheader | tee $W/gpu5.txt
timeout 70 python3 -m kgen.reader_check test specs/dsv4.yaml specs/dsv32_indexer.yaml --sample 20 --tunes '[null, {"kReaderWgStages": 4}]' --json $W/test5.json > $W/test5.log 2>&1
echo "test rc=$?"; grep -v "^ok " $W/test5.log | cut -c1-300 | tail -6
timeout 60 python3 -m pytest -q -p no:cacheprovider tests/test_gpu_indexer.py > $W/pytest5.log 2>&1
echo "pytest rc=$?"; grep -E "passed|failed|Error" $W/pytest5.log | tail -4
timeout 50 python3 -m kgen.reader_check bench specs/dsv4/indexer_fp8.yaml --tunes '[null, {"kReaderWgStages": 4}]' --json $W/bench5_fp8.json > $W/bench5_fp8.log 2>&1
echo "bench fp8 rc=$?"; cut -c1-200 $W/bench5_fp8.log | tail -14
timeout 30 python3 -m kgen.reader_check bench specs/indexer_bf16.yaml --json $W/bench5_bf16.json > $W/bench5_bf16.log 2>&1
echo "bench bf16 rc=$?"; cut -c1-160 $W/bench5_bf16.log | tail -7
tar czf $OUT/run5.tgz -C $W .
