#!/usr/bin/env bash
# The fp4 wgmma path's one device call (about 60 s; every step under its own timeout, 150 s in all):
# correctness of every readable variant (--sample 20; the 4-stage ring on the 70000-key and MTP cases), the
# reader's GPU pytest, then fp4 speed: the new default, the 4-stage ring and the mma.sync path
# ({"kReaderWgmma": 0}, the old figure) on the same inputs. One archive back.
#   mkdir -p /work/main/.dev && rsync -a --delete --exclude .git /work/wt-fp4reader/ /work/main/.dev/fp4reader/
#   run(command="bash .dev/fp4reader/bench/results/fp4reader-2026-11-30/run.sh", carry=[".dev/fp4reader", ".whl"],
#       timeout_s=170)
cd "$(dirname "$0")/../../.."  # the repository copy (.dev/fp4reader)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site ../../.whl/*.whl
export PYTHONPATH=/tmp/site:$PWD KGEN_CACHE_DIR=/tmp/kcache PYTHONUNBUFFERED=1
W=/tmp/fp4; mkdir -p $W
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.limit --format=csv,noheader | tee $W/gpu.txt
timeout 70 python3 -m kgen.reader_check test specs/dsv4.yaml specs/dsv32_indexer.yaml --sample 20 --tunes '[null, {"kReaderWgStages": 4}]' --json $W/test.json > $W/test.log 2>&1
echo "test rc=$?"; grep -v "^ok " $W/test.log | cut -c1-300 | tail -6; grep -i "fp4" $W/test.log | cut -c1-200 | head -12
timeout 40 python3 -m pytest -q -p no:cacheprovider tests/test_gpu_indexer.py > $W/pytest.log 2>&1
echo "pytest rc=$?"; grep -E "passed|failed|Error" $W/pytest.log | tail -4
timeout 40 python3 -m kgen.reader_check bench specs/dsv4/indexer_fp4.yaml --tunes '[null, {"kReaderWgStages": 4}, {"kReaderWgmma": 0}]' --json $W/bench.json > $W/bench.log 2>&1
echo "bench rc=$?"; cut -c1-200 $W/bench.log | tail -26
tar czf $OUT/fp4.tgz -C $W .
