#!/usr/bin/env bash
# Call 2: the two indexers as SGLang's C4 compressor calls its store in a decode step (plan/*.yaml: positions
# from SGLang's 16-B DecodePlan, compress ratio 4: a quarter of the tokens write a key), the peer reading the
# same plan. From /work/main, as run1.sh, with run2.sh.
cd "$(dirname "$0")/../../.."
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD KGEN_CACHE_DIR=/tmp/kcache PYTHONUNBUFFERED=1 KGEN_SGLANG_KIT=$PWD/.peers/sglang
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s]"; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader | tee $OUT/machine.txt
P=bench/results/wpeer-2026-12-03/plan
timeout -s INT ${T_BENCH:-75} python3 -m kgen bench $P/indexer_fp8_plan.yaml $P/indexer_fp4_plan.yaml \
  --tokens 1 --tokens 64 --tokens 4096 --tokens 65536 --tokens 1048576 --no-compile --reader-shapes 1x4096 \
  --json $OUT/bench.json > $OUT/bench.log 2>&1
echo "bench rc=$? $(el)"; grep -E "peer|FAIL|Error" $OUT/bench.log | head -5 | cut -c1-250
python3 bench/results/wpeer-2026-12-03/peer_table.py $OUT/bench.json
