#!/usr/bin/env bash
# tma1, device run 3: the landed defaults (the TMA variant for bf16 and fp8). GPU pytest (all GPU tests:
# writers and readers, both reader variants); the reader's correctness (every case of the shipped
# variants, 20 sampled readable specs, the cp.async variant on two cases per variant); speed of fp8 (the
# default and the cp.async variant in both orders, plus one more TMA ring) and bf16 (both variants).
#   run(command="bash .dev/lead/bench/results/h200-2026-11-30/tma1/run3.sh", carry=[".dev/lead", ".whl"])
cd "$(dirname "$0")/../../../.."  # the repository copy (.dev/lead)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site ../../.whl/*.whl
export PYTHONPATH=/tmp/site:$PWD KGEN_CACHE_DIR=/tmp/kcache PYTHONUNBUFFERED=1
W=/tmp/t3; mkdir -p $W
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.limit --format=csv,noheader | tee $W/gpu.txt
CP='{"kReaderWgTma": 0}'
R6='{"kReaderWgTmaStages": 6, "kReaderWgConsumers": 1}'
timeout 200 python3 -m pytest -m gpu -q -p no:cacheprovider --junitxml=$W/junit.xml tests > $W/pytest.log 2>&1
echo "pytest rc=$?"; grep -E "passed|failed|Error" $W/pytest.log | tail -4
timeout 120 python3 -m kgen.reader_check test specs/dsv4.yaml specs/dsv32_indexer.yaml --sample 20 --tunes "[null, $CP]" \
  --json $W/test.json > $W/test.log 2>&1
echo "test rc=$?"; grep -v "^ok " $W/test.log | cut -c1-300 | tail -6
timeout 100 python3 -m kgen.reader_check bench specs/dsv4/indexer_fp8.yaml --tunes "[null, $CP, $R6]" --json $W/bench_fp8.json > $W/bench_fp8.log 2>&1
echo "bench fp8 rc=$?"; cut -c20-128 $W/bench_fp8.log | grep " x " | tail -21
timeout 80 python3 -m kgen.reader_check bench specs/dsv4/indexer_fp8.yaml --tunes "[$CP, null]" --json $W/bench_fp8_rev.json > $W/bench_fp8_rev.log 2>&1
echo "bench fp8 reversed rc=$?"; cut -c20-128 $W/bench_fp8_rev.log | grep " x " | tail -14
timeout 80 python3 -m kgen.reader_check bench specs/indexer_bf16.yaml --tunes "[null, $CP]" --json $W/bench_bf16.json > $W/bench_bf16.log 2>&1
echo "bench bf16 rc=$?"; cut -c20-128 $W/bench_bf16.log | grep " x " | tail -14
tar czf $OUT/run3.tgz -C $W .
