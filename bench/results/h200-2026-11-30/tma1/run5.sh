#!/usr/bin/env bash
# tma1, device run 5: the final check of main as landed (the TMA variant the default; the two-chain
# epilogue). scripts/device_run.sh test (preflight, pytest -m gpu, kgen test of every shipped variant at
# N = 1 ... 1M, writers and readers), the reader's correctness (--sample 20, the cp.async variant on two
# cases per variant), the reader bench of fp8, bf16 and fp4, and whether DeepGEMM is importable here.
#   run(command="bash bench/results/h200-2026-11-30/tma1/run5.sh", carry=[".whl"])
cd "$(dirname "$0")/../../../.."  # the repository root
O=$OUT; W=/tmp/t5; mkdir -p $W/d
OUT=$W/d T_PYTEST=200 T_TEST=200 bash scripts/device_run.sh test > $W/device_run.log 2>&1
echo "device_run test rc=$?"; tail -12 $W/device_run.log | cut -c1-200
export PYTHONPATH=/tmp/site:$PWD KGEN_CACHE_DIR=/tmp/kgen-cache PYTHONUNBUFFERED=1
python3 -c "import deep_gemm" > $W/deep_gemm.txt 2>&1; echo "import deep_gemm rc=$?" | tee -a $W/deep_gemm.txt
python3 -m pip list 2>/dev/null | grep -i -E "gemm|flashinfer|sglang|vllm" >> $W/deep_gemm.txt; tail -3 $W/deep_gemm.txt
timeout 120 python3 -m kgen.reader_check test specs/dsv4.yaml specs/dsv32_indexer.yaml --sample 20 --tunes '[null, {"kReaderWgTma": 0}]' \
  --json $W/test.json > $W/test.log 2>&1
echo "reader test rc=$?"; grep -v "^ok " $W/test.log | cut -c1-300 | tail -4
timeout 150 python3 -m kgen.reader_check bench specs/dsv4/indexer_fp8.yaml specs/indexer_bf16.yaml specs/dsv4/indexer_fp4.yaml \
  --json $W/bench.json > $W/bench.log 2>&1
echo "reader bench rc=$?"; cut -c1-150 $W/bench.log | grep " x " | tail -21
tar czf $O/run5.tgz -C $W .
