#!/usr/bin/env bash
# call5 of session 12: the session's main after the epilogue A/B (session 11's TMA-path headers kept): every
# GPU test that reads through the reader (the reader's, the ops', the top-k's, the tensor map's, recall's), and
# `kgen test --readers-only` (every shipped readable variant and 2 sampled specs: ragged lengths, next_n 1-4).
# No peers. The GPU tests call4 ran before its time limit (the writer's, the engines') passed there.
#   run(command="bash bench/results/h200-2026-12-04-s12/call5.sh", carry=[".whl"], timeout_s=420)
cd "$(dirname "$0")/../../.."
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD KGEN_CACHE_DIR=/tmp/kcache PYTHONUNBUFFERED=1
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s]"; }
R=$OUT/r; mkdir -p "$R"
timeout 250 python3 -m pytest -m gpu -q -p no:cacheprovider -rs --junitxml=$R/pytest_gpu.xml tests/test_gpu_indexer.py \
  tests/test_ops_gpu.py tests/test_topk_gpu.py tests/test_tma.py tests/test_recall.py > $R/pytest_gpu.log 2>&1
echo "pytest rc=$? $(el)"; grep -E "^(FAILED|ERROR)" $R/pytest_gpu.log | cut -c1-300 | head -12
grep -o 'tests="[0-9]*"\|failures="[0-9]*"\|errors="[0-9]*"\|skipped="[0-9]*"' $R/pytest_gpu.xml | head -4 | tr '\n' ' '; echo
timeout -s INT 130 python3 -m kgen test --readers-only specs/dsv4.yaml specs/dsv32_indexer.yaml --sample 2 --json \
  > $R/kgen_test.json 2> $R/kgen_test.err
echo "kgen test rc=$? $(el)"; python3 -c "
import json, collections; d = json.load(open('$R/kgen_test.json')); c = collections.Counter()
for r in d['results']: c[(r.get('kernel', r.get('variant', '?')), bool(r.get('ok')))] += 1
print('ok' if d.get('ok') else 'NOT ok', 'interrupted' if d.get('interrupted') else '', dict(c))" 2>&1 | cut -c1-400
tar -czf "$OUT/call5.tgz" -C "$OUT" r && rm -rf "$R"
