#!/usr/bin/env bash
# The reader's GPU run (issue 20), one device call, from a staged copy of the tree in the lead's checkout:
#   run(command="cd .xfer/reader && ln -sfn ../../.whl .whl && ln -sfn ../../.peers .peers && bash scripts/reader_device_run.sh",
#       carry=[".xfer/reader", ".whl", ".peers"])
# 1. the peer: DeepGEMM built on the machine where .peers/deepgemm holds its sources (docs/gpu.md, "The peer"),
# 2. correctness: kgen.reader_check test (shipped readable variants, SAMPLE random readable specs: ragged
#    lengths, next_n up to 4) and the reader's GPU pytest,
# 3. speed: kgen.reader_check bench (BATCH_SHAPES, or BATCHES: B:keys:lengths:next_n,...) of SPECS_BENCH,
#    DeepGEMM's fp8_paged_mqa_logits beside the fp8 layout in the same process.
# Writes $OUT/{test,pytest,bench}.log, test.json, bench.json. T_TEST, T_PYTEST, T_BENCH: step limits (s).
cd "$(dirname "$0")/.."  # the repository root (or its copy under .xfer/)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site ${WHL:-.whl}/*.whl
export PYTHONPATH=/tmp/site:$PWD KGEN_CACHE_DIR=/tmp/kcache PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
if [ -f .peers/deepgemm/build_on_device.sh ]; then
  t0=$(date +%s)
  eval "$(bash .peers/deepgemm/build_on_device.sh 2> $OUT/peer_build.log)"
  export PYTHONPATH=/tmp/site:$PWD:$PYTHONPATH
  echo "peer build $(( $(date +%s) - t0 )) s: $(python3 -c 'import deep_gemm; print(deep_gemm.__file__)' 2>&1 | tail -1)"
fi
SAMPLE=${SAMPLE:-12}
if [ "${T_TEST:-150}" -gt 0 ]; then
  timeout ${T_TEST:-150} python3 -m kgen.reader_check test specs/dsv4.yaml specs/dsv32_indexer.yaml --sample $SAMPLE --json $OUT/test.json > $OUT/test.log 2>&1
  echo "test rc=$?"
  grep -v "^ok " $OUT/test.log | cut -c1-400 | tail -25
fi
if [ "${T_PYTEST:-90}" -gt 0 ]; then
  timeout ${T_PYTEST:-90} python3 -m pytest -q -p no:cacheprovider tests/test_gpu_indexer.py > $OUT/pytest.log 2>&1
  echo "pytest rc=$?"; tail -5 $OUT/pytest.log
fi
SPECS_BENCH=${SPECS_BENCH:-specs/dsv4/indexer_fp8.yaml specs/indexer_bf16.yaml specs/dsv4/indexer_fp4.yaml}
if [ "${T_BENCH:-240}" -gt 0 ]; then
  timeout ${T_BENCH:-240} python3 -m kgen.reader_check bench $SPECS_BENCH ${BATCHES:+--batches $BATCHES} --json $OUT/bench.json > $OUT/bench.log 2>&1
  echo "bench rc=$?"
  cut -c1-260 $OUT/bench.log | tail -80
fi
