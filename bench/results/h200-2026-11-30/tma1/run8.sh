#!/usr/bin/env bash
# tma1, device run 8 (an experiment on main at 3fdc51e): kReaderWgEvictFirst, the TMA variant's key and
# scale copies under an L2 evict-first policy (keys are read once). Correctness, then fp8 in both orders
# and bf16, against the default, in one process.
#   run(command="bash .dev/l2/bench/results/h200-2026-11-30/tma1/run8.sh", carry=[".dev/l2", ".whl"])
cd "$(dirname "$0")/../../../.."  # the repository copy (.dev/l2)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site ../../.whl/*.whl
export PYTHONPATH=/tmp/site:$PWD KGEN_CACHE_DIR=/tmp/kcache PYTHONUNBUFFERED=1
W=/tmp/t8; mkdir -p $W
EF='{"kReaderWgEvictFirst": 1}'
timeout 80 python3 -m kgen.reader_check test specs/dsv4/indexer_fp8.yaml specs/indexer_bf16.yaml --tunes "[$EF]" --json $W/test.json > $W/test.log 2>&1
echo "test rc=$?"; grep -v "^ok " $W/test.log | cut -c1-300 | tail -4
timeout 80 python3 -m kgen.reader_check bench specs/dsv4/indexer_fp8.yaml --tunes "[null, $EF]" --json $W/bench_fp8.json > $W/bench_fp8.log 2>&1
echo "bench fp8 rc=$?"; cut -c20-122 $W/bench_fp8.log | grep " x " | tail -14
timeout 80 python3 -m kgen.reader_check bench specs/dsv4/indexer_fp8.yaml --tunes "[$EF, null]" --json $W/bench_fp8_rev.json > $W/bench_fp8_rev.log 2>&1
echo "bench fp8 reversed rc=$?"; cut -c20-122 $W/bench_fp8_rev.log | grep " x " | tail -14
timeout 60 python3 -m kgen.reader_check bench specs/indexer_bf16.yaml --bench-shapes 32x65536,128x65536 --tunes "[null, $EF]" --json $W/bench_bf16.json > $W/bench_bf16.log 2>&1
echo "bench bf16 rc=$?"; cut -c20-122 $W/bench_bf16.log | grep " x " | tail -4
tar czf $OUT/run8.tgz -C $W .
