#!/usr/bin/env bash
# tma1, device run 4 (an experiment on top of run 3's tree): CTAs planned at 72 registers a thread (3 CTAs of
# 2 consumer warpgroups, 2 of 3), and the epilogue's head sum in two chains per row. fp8 correctness of
# the new rings, then fp8 speed: the default ring and four others, in one process.
#   run(command="bash .dev/exp/bench/results/h200-2026-11-30/tma1/run4.sh", carry=[".dev/exp", ".whl"])
cd "$(dirname "$0")/../../../.."  # the repository copy (.dev/exp)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site ../../.whl/*.whl
export PYTHONPATH=/tmp/site:$PWD KGEN_CACHE_DIR=/tmp/kcache PYTHONUNBUFFERED=1
W=/tmp/t4; mkdir -p $W
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.limit --format=csv,noheader | tee $W/gpu.txt
A='{"kReaderWgTmaStages": 6}'
B='{"kReaderWgTmaStages": 4}'
C='{"kReaderWgTmaStages": 12, "kReaderWgConsumers": 3}'
D='{"kReaderWgTmaStages": 9, "kReaderWgConsumers": 3}'
timeout 100 python3 -m kgen.reader_check test specs/dsv4/indexer_fp8.yaml specs/indexer_bf16.yaml --tunes "[$A, $C]" --tune-cases all \
  --json $W/test.json > $W/test.log 2>&1
echo "test rc=$?"; grep -v "^ok " $W/test.log | cut -c1-300 | tail -6
timeout 150 python3 -m kgen.reader_check bench specs/dsv4/indexer_fp8.yaml --tunes "[null, $A, $B, $C, $D]" --json $W/bench_fp8.json > $W/bench_fp8.log 2>&1
echo "bench fp8 rc=$?"; cut -c20-128 $W/bench_fp8.log | grep " x " | tail -35
tar czf $OUT/run4.tgz -C $W .
