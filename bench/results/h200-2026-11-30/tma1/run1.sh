#!/usr/bin/env bash
# tma1, device run 1: the reader's TMA variant (kReaderWgTma) against the cp.async variant (the default).
# Correctness: every case of the fp8, bf16 and dsv32 variants under each TMA tuning, the GPU pytest of the
# reader (the TMA variant's own tests among them). Speed: fp8 and bf16, the default and the TMA tunings,
# all on the same inputs in one process (kgen.reader_check bench). One archive back.
#   run(command="bash .dev/lead/bench/results/h200-2026-11-30/tma1/run1.sh", carry=[".dev/lead", ".whl"])
cd "$(dirname "$0")/../../../.."  # the repository copy (.dev/lead)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site ../../.whl/*.whl
export PYTHONPATH=/tmp/site:$PWD KGEN_CACHE_DIR=/tmp/kcache PYTHONUNBUFFERED=1
W=/tmp/t1; mkdir -p $W
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.limit --format=csv,noheader | tee $W/gpu.txt
A='{"kReaderWgTma": 1, "kReaderWgStages": 8, "kReaderWgConsumers": 2}'
B='{"kReaderWgTma": 1, "kReaderWgStages": 12, "kReaderWgConsumers": 2}'
C='{"kReaderWgTma": 1, "kReaderWgStages": 16, "kReaderWgConsumers": 4}'
D='{"kReaderWgTma": 1, "kReaderWgStages": 24, "kReaderWgConsumers": 4}'
E='{"kReaderWgTma": 1, "kReaderWgStages": 6, "kReaderWgConsumers": 1}'
F='{"kReaderWgTma": 1, "kReaderWgStages": 4, "kReaderWgConsumers": 2}'
G='{"kReaderWgTma": 1, "kReaderWgStages": 12, "kReaderWgConsumers": 4}'
timeout 150 python3 -m kgen.reader_check test specs/dsv4/indexer_fp8.yaml specs/indexer_bf16.yaml specs/dsv32_indexer.yaml \
  --tunes "[$A, $C]" --tune-cases all --json $W/test.json > $W/test.log 2>&1
echo "test rc=$?"; grep -v "^ok " $W/test.log | cut -c1-300 | tail -8
timeout 90 python3 -m pytest -q -p no:cacheprovider tests/test_gpu_indexer.py > $W/pytest.log 2>&1
echo "pytest rc=$?"; grep -E "passed|failed|Error" $W/pytest.log | tail -4
timeout 170 python3 -m kgen.reader_check bench specs/dsv4/indexer_fp8.yaml --tunes "[null, $A, $B, $C, $D, $E]" --json $W/bench_fp8.json > $W/bench_fp8.log 2>&1
echo "bench fp8 rc=$?"; cut -c1-220 $W/bench_fp8.log | tail -50
timeout 90 python3 -m kgen.reader_check bench specs/indexer_bf16.yaml --tunes "[null, $F, $G]" --json $W/bench_bf16.json > $W/bench_bf16.log 2>&1
echo "bench bf16 rc=$?"; cut -c1-220 $W/bench_bf16.log | tail -24
tar czf $OUT/run1.tgz -C $W .
