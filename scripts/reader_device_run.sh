#!/usr/bin/env bash
# The reader's GPU run (issue 10), one device call:
#   run(command="WHL=../../.whl bash .dev/reader/scripts/reader_device_run.sh", carry=[".dev/reader", ".whl"])
# Correctness (shipped readable variants, 20 random readable specs, the alternative tunings on one MTP
# case each; the reader's GPU pytest: CUDA-graph replay, the torch op), then speed (fp8 and bf16
# keys at every (B, keys) of the DeepGEMM table in docs/gpu.md, each tuning on the same inputs).
# TUNES: a JSON list of kgen.reader_layout.READER_TUNING_DEFAULTS overrides (null: the shipped default), each
# passed to kgen test / kgen bench as --reader-tune;
# {"kReaderWgmma": 0} is the mma.sync path on the same sm_90a GPU. SPECS_BENCH: the variants benched.
cd "$(dirname "$0")/.."  # the repository root (or its copy under .dev/)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site ${WHL:-.whl}/*.whl
export PYTHONPATH=/tmp/site:$PWD KGEN_CACHE_DIR=/tmp/kcache PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
TUNES=${TUNES:-'[null, {"kReaderWgmma": 0}]'}
SPECS_BENCH=${SPECS_BENCH:-specs/dsv4/indexer_fp8.yaml specs/indexer_bf16.yaml}
TUNE_ARGS=()
while IFS= read -r t; do TUNE_ARGS+=(--reader-tune "$t"); done < <(python3 -c 'import json, sys
for t in json.loads(sys.argv[1]): print(json.dumps(t))' "$TUNES")
timeout ${T_TEST:-130} python3 -m kgen test --readers-only specs/dsv4.yaml specs/dsv32_indexer.yaml --sample 20 "${TUNE_ARGS[@]}" --json > $OUT/test.json 2> $OUT/test.log
echo "test rc=$?"
grep -v "^ok " $OUT/test.log | cut -c1-400 | tail -25
if [ "${T_PYTEST:-60}" -gt 0 ]; then
  timeout ${T_PYTEST:-60} python3 -m pytest -q -p no:cacheprovider tests/test_gpu_indexer.py > $OUT/pytest.log 2>&1
  echo "pytest rc=$?"; tail -5 $OUT/pytest.log
fi
timeout ${T_BENCH:-170} python3 -m kgen bench --readers-only $SPECS_BENCH "${TUNE_ARGS[@]}" --json $OUT/bench.json > $OUT/bench.log 2>&1
echo "bench rc=$?"
cut -c1-250 $OUT/bench.log | tail -70
