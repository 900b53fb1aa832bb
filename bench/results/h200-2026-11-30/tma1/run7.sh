#!/usr/bin/env bash
# tma1, device run 7 (an experiment on main at dcee447): kReaderWgProducers, two producer warps per CTA
# (producer p stages tiles p, p + 2, ...), to test whether one producer warp is what limits the one-CTA
# rings (runs 1-2: 40-50 % slower at large shapes). Correctness of two such rings, then fp8 and bf16 speed.
#   run(command="bash .dev/exp/bench/results/h200-2026-11-30/tma1/run7.sh", carry=[".dev/exp", ".whl"])
cd "$(dirname "$0")/../../../.."  # the repository copy (.dev/exp)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site ../../.whl/*.whl
export PYTHONPATH=/tmp/site:$PWD KGEN_CACHE_DIR=/tmp/kcache PYTHONUNBUFFERED=1
W=/tmp/t7; mkdir -p $W
A='{"kReaderWgProducers": 2}'
B='{"kReaderWgTmaStages": 16, "kReaderWgConsumers": 4, "kReaderWgProducers": 2}'
C='{"kReaderWgTmaStages": 12, "kReaderWgConsumers": 3, "kReaderWgProducers": 2}'
D='{"kReaderWgTmaStages": 8, "kReaderWgConsumers": 4, "kReaderWgProducers": 2}'
E='{"kReaderWgTmaStages": 16, "kReaderWgConsumers": 4}'
timeout 100 python3 -m kgen.reader_check test specs/dsv4/indexer_fp8.yaml specs/indexer_bf16.yaml --tunes "[$A, $B]" --tune-cases all \
  --json $W/test.json > $W/test.log 2>&1
echo "test rc=$?"; grep -v "^ok " $W/test.log | cut -c1-300 | tail -4
timeout 150 python3 -m kgen.reader_check bench specs/dsv4/indexer_fp8.yaml --tunes "[null, $A, $B, $C, $D, $E]" --json $W/bench_fp8.json > $W/bench_fp8.log 2>&1
echo "bench fp8 rc=$?"; cut -c20-122 $W/bench_fp8.log | grep " x " | tail -42
timeout 60 python3 -m kgen.reader_check bench specs/indexer_bf16.yaml --bench-shapes 32x65536,128x65536,1x262144 --tunes "[null, $C]" --json $W/bench_bf16.json > $W/bench_bf16.log 2>&1
echo "bench bf16 rc=$?"; cut -c20-122 $W/bench_bf16.log | grep " x " | tail -6
tar czf $OUT/run7.tgz -C $W .
