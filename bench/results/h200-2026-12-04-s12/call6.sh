#!/usr/bin/env bash
# call6 of session 12: the one-token TMA cubin keeping its descriptors' bases and its logits' address per tile
# (163 -> 147 instructions per token and warp): the reader's GPU tests and `kgen test --readers-only`, then an
# A/B against main (.xfer/main: git archive of 1e92fa8), processes alternating A B A B. No peers.
#   run(command="bash bench/results/h200-2026-12-04-s12/call6.sh", carry=[".whl", ".xfer/main"], timeout_s=420)
cd "$(dirname "$0")/../../.."
ROOT=$PWD
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export KGEN_CACHE_DIR=/tmp/kcache PYTHONUNBUFFERED=1
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s]"; }
R=$OUT/r; mkdir -p "$R"
PYTHONPATH=/tmp/site:$ROOT timeout 150 python3 -m pytest -q -p no:cacheprovider -rs --junitxml=$R/pytest_reader.xml \
  tests/test_gpu_indexer.py > $R/pytest_reader.log 2>&1
echo "pytest reader rc=$? $(el)"; grep -E "^(FAILED|ERROR)" $R/pytest_reader.log | cut -c1-300 | head
grep -o 'tests="[0-9]*"\|failures="[0-9]*"\|errors="[0-9]*"\|skipped="[0-9]*"' $R/pytest_reader.xml | head -4 | tr '\n' ' '; echo
PYTHONPATH=/tmp/site:$ROOT timeout -s INT 90 python3 -m kgen test --readers-only specs/dsv4.yaml specs/dsv32_indexer.yaml \
  --json > $R/kgen_test.json 2> $R/kgen_test.err
echo "kgen test rc=$? $(el)"; grep "kgen test:" $R/kgen_test.err
AB="32:65536:equal:1,32:65536:equal:2,32:65536:equal:4,128:16384:uniform:2,64:32768:pm30:2,1:65536:equal:2"
for round in 1 2; do
  for tree in main new; do
    dir=$ROOT; [ $tree = main ] && dir=$ROOT/.xfer/main
    ( cd $dir && PYTHONPATH=/tmp/site:$dir MTP_ALTERNATIVES=0 MTP_SHAPES=$AB timeout 60 python3 $ROOT/scripts/reader_mtp_bench.py \
      $R/ab_${tree}_${round}.json specs/dsv4/indexer_fp8.yaml specs/indexer_bf16.yaml > $R/ab_${tree}_${round}.log 2>&1 )
    echo "ab $tree $round rc=$? $(el)"; grep "|" $R/ab_${tree}_${round}.log | cut -c1-100
  done
done
tar -czf "$OUT/call6.tgz" -C "$OUT" r && rm -rf "$R"
