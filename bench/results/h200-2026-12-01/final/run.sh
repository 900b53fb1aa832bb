#!/usr/bin/env bash
# The check of main after the merges of 2026-12-01 (the house, the reader's work split, the engine bridge,
# the write layer), one device call from the repository root (`make wheels` and `make releases` first):
#   run(command="bash bench/results/h200-2026-12-01/final/run.sh", carry=[".whl", ".releases/trees"])
# Not run yet: the device lent no machine after the merges (2026-12-01).
# 1. pytest -m gpu: every GPU test (writers, the reader's paths and native op, AOT, tensor maps, the engine-
#    in-the-loop test's GPU half on the released SGLang 0.5.23 tree), 2. kgen test: every shipped writer
#    byte-exact against the Torch reference and the readers' cases, 3. the readers' cases with 20 sampled
#    specs and the mma.sync path beside (issue 19's "72 cases"), 4. host cost per eager call of both ops.
cd "$(dirname "$0")/../../../.."  # the repository root
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD KGEN_CACHE_DIR=/tmp/kcache PYTHONUNBUFFERED=1 KGEN_RELEASES_DIR=$PWD/.releases
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
T0=$(date +%s)
el() { echo "[$(( $(date +%s) - T0 )) s]"; }
timeout 240 python3 -m pytest -m gpu -q -p no:cacheprovider -rs --junitxml=$OUT/pytest_gpu.xml > $OUT/pytest_gpu.log 2>&1
echo "pytest -m gpu rc=$? $(el)"; tail -4 $OUT/pytest_gpu.log | cut -c1-300
timeout 150 python3 -m kgen test specs/dsv4.yaml specs/dsv32_indexer.yaml --json > $OUT/test.json 2> $OUT/test.log
echo "kgen test rc=$? $(el)"; grep -v "^ok " $OUT/test.log | cut -c1-300 | tail -8
timeout 120 python3 -m kgen test --readers-only specs/dsv4.yaml specs/dsv32_indexer.yaml --sample 20 \
  --reader-tune null --reader-tune '{"kReaderWgmma": 0}' --json > $OUT/readers.json 2> $OUT/readers.log
echo "readers rc=$? $(el)"; grep -v "^ok " $OUT/readers.log | cut -c1-300 | tail -6
timeout 60 python3 scripts/host_breakdown.py --json $OUT/host.json > $OUT/host.log 2>&1
echo "host rc=$? $(el)"; cut -c1-200 $OUT/host.log | tail -12
