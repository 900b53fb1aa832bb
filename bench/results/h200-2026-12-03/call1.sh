#!/usr/bin/env bash
# call1 of 2026-12-03: main (07e2cd7, the merges of session 6: the reader split, the top-k, vLLM's patch) on
# the H200, from the repository root after `make wheels releases`:
#   run(command="bash bench/results/h200-2026-12-03/call1.sh", carry=[".whl", ".releases/trees"])
# 1. pytest -m gpu (both engines' loops, the top-k, the native reader), 2. the readers' cases with 20 sampled
# specs (sample_s0_53: the 96-register floor of d224834), 3. host cost per eager call of the ops.
cd "$(dirname "$0")/../../.."
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD KGEN_CACHE_DIR=/tmp/kcache PYTHONUNBUFFERED=1 KGEN_RELEASES_DIR=$PWD/.releases
timeout 260 python3 -m pytest -m gpu -q -p no:cacheprovider -rs --junitxml=$OUT/pytest_gpu.xml > $OUT/pytest_gpu.log 2>&1
echo "pytest -m gpu rc=$?"; grep -E "^(FAILED|ERROR)" $OUT/pytest_gpu.log | cut -c1-300 | head -12; tail -3 $OUT/pytest_gpu.log | cut -c1-300
python3 - $OUT/pytest_gpu.xml <<'EOF'
import sys, xml.etree.ElementTree as ET
for c in ET.parse(sys.argv[1]).iter("testcase"):
    if "engines" in c.get("classname", ""):
        state = "skipped" if c.find("skipped") is not None else "failed" if c.find("failure") is not None or c.find("error") is not None else "passed"
        print(state, c.get("classname"), c.get("name"))
EOF
timeout 150 python3 -m kgen test --readers-only specs/dsv4.yaml specs/dsv32_indexer.yaml --sample 20 --json \
  > $OUT/readers.json 2> $OUT/readers.log
echo "readers rc=$?"; grep -v "^ok " $OUT/readers.log | cut -c1-300 | tail -6
timeout 60 python3 scripts/host_breakdown.py --json $OUT/host.json > $OUT/host.log 2>&1
echo "host rc=$?"; grep -E "host_us_per_call" $OUT/host.log
