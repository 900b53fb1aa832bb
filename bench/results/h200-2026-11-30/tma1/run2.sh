#!/usr/bin/env bash
# tma1, device run 2: the reader's TMA variant (kReaderWgTma) against the cp.async variant (the default).
# Correctness: every case of the fp8, bf16 and dsv32 variants under each TMA tuning, the GPU pytest of the
# reader (the TMA variant's own tests among them). Speed: fp8 and bf16, the default and the TMA tunings,
# all on the same inputs in one process (kgen.reader_check bench). One archive back.
#   run(command="bash .dev/lead/bench/results/h200-2026-11-30/tma1/run2.sh", carry=[".dev/lead", ".whl"])
cd "$(dirname "$0")/../../../.."  # the repository copy (.dev/lead)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site ../../.whl/*.whl
export PYTHONPATH=/tmp/site:$PWD KGEN_CACHE_DIR=/tmp/kcache PYTHONUNBUFFERED=1
W=/tmp/t2; mkdir -p $W
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.limit --format=csv,noheader | tee $W/gpu.txt
A='{"kReaderWgTma": 1, "kReaderWgStages": 8, "kReaderWgConsumers": 2}'
B='{"kReaderWgTma": 1, "kReaderWgStages": 4, "kReaderWgConsumers": 1}'
C='{"kReaderWgTma": 1, "kReaderWgStages": 16, "kReaderWgConsumers": 4}'
D='{"kReaderWgTma": 1, "kReaderWgStages": 6, "kReaderWgConsumers": 1}'
E='{"kReaderWgTma": 1, "kReaderWgStages": 4, "kReaderWgConsumers": 2}'
F='{"kReaderWgTma": 1, "kReaderWgStages": 12, "kReaderWgConsumers": 3}'
G='{"kReaderWgTma": 1, "kReaderWgStages": 6, "kReaderWgConsumers": 2}'
H='{"kReaderWgTma": 1, "kReaderWgStages": 8, "kReaderWgConsumers": 4}'
timeout 150 python3 -m kgen.reader_check test specs/dsv4/indexer_fp8.yaml specs/indexer_bf16.yaml specs/dsv32_indexer.yaml \
  --tunes "[$A, $B, $C]" --tune-cases all --json $W/test.json > $W/test.log 2>&1
echo "test rc=$?"; grep -v "^ok " $W/test.log | cut -c1-300 | tail -8
timeout 90 python3 -m pytest -q -p no:cacheprovider tests/test_gpu_indexer.py > $W/pytest.log 2>&1
echo "pytest rc=$?"; grep -E "passed|failed|Error" $W/pytest.log | tail -4
timeout 220 python3 -m kgen.reader_check bench specs/dsv4/indexer_fp8.yaml --tunes "[null, $A, $B, $C, $D, $E, $F]" --json $W/bench_fp8.json > $W/bench_fp8.log 2>&1
echo "bench fp8 rc=$?"; cut -c20-128 $W/bench_fp8.log | grep " x " | tail -50
timeout 120 python3 -m kgen.reader_check bench specs/indexer_bf16.yaml --tunes "[null, $E, $B, $G, $H]" --json $W/bench_bf16.json > $W/bench_bf16.log 2>&1
echo "bench bf16 rc=$?"; cut -c20-128 $W/bench_bf16.log | grep " x " | tail -36
tar czf $OUT/run2.tgz -C $W .
