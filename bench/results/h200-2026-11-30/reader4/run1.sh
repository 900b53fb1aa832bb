#!/usr/bin/env bash
# reader4, device run 1: correctness of the per-shape ring (default: 2 stages for small fp8 launches, 4 for
# large ones) and of the split-heads schedule, then fp8 and bf16 speed, every tuning in one process on the
# same inputs ({"kReaderWgStages": 4} is the previous default's kernel at every shape).
#   run(command="bash .dev/reader/bench/results/h200-2026-11-30/reader4/run1.sh", carry=[".dev/reader", ".whl"])
cd "$(dirname "$0")/../../../.."  # the repository copy (.dev/reader)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site ../../.whl/*.whl
export PYTHONPATH=/tmp/site:$PWD KGEN_CACHE_DIR=/tmp/kcache PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader | tee $OUT/gpu.txt
T='[null, {"kReaderWgStages": 4}, {"kReaderWgStages": 4, "kReaderWgSplitHeads": 1}, {"kReaderWgStages": 2, "kReaderWgSplitHeads": 1}]'
timeout 80 python3 -m kgen.reader_check test specs/dsv4.yaml specs/dsv32_indexer.yaml --sample 20 --tunes "$T" --json $OUT/test1.json > $OUT/test1.log 2>&1
echo "test rc=$?"; grep -v "^ok " $OUT/test1.log | cut -c1-300 | tail -12
timeout 40 python3 -m pytest -q -p no:cacheprovider tests/test_gpu_indexer.py > $OUT/pytest1.log 2>&1
echo "pytest rc=$?"; tail -3 $OUT/pytest1.log
B='[null, {"kReaderWgStages": 4}, {"kReaderWgStages": 2}, {"kReaderWgStages": 4, "kReaderWgSplitHeads": 1}, {"kReaderWgStages": 2, "kReaderWgSplitHeads": 1}]'
timeout 80 python3 -m kgen.reader_check bench specs/dsv4/indexer_fp8.yaml --tunes "$B" \
  --bench-shapes 1x4096,1x65536,1x262144,32x4096,32x65536,64x65536,128x4096,128x16384,128x65536 --json $OUT/bench1_fp8.json > $OUT/bench1_fp8.log 2>&1
echo "bench fp8 rc=$?"; cut -c1-200 $OUT/bench1_fp8.log | tail -46
timeout 40 python3 -m kgen.reader_check bench specs/indexer_bf16.yaml --tunes '[null, {"kReaderWgSplitHeads": 1}]' --json $OUT/bench1_bf16.json > $OUT/bench1_bf16.log 2>&1
echo "bench bf16 rc=$?"; cut -c1-200 $OUT/bench1_bf16.log | tail -15
