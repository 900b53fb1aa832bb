#!/usr/bin/env bash
# call4 of session 12: the session's main, every GPU test (the peers' after their builds), the reader beside
# DeepGEMM (scripts/reader_mtp_bench.py, the shipped cubin), and ncu's per-instruction stall samples of the
# shipped reader and DeepGEMM at fp8 32 x 64K next_n 2 (profile_n2.py); then the one-token epilogue A/B: the
# session's main against .xfer/ab (main with session 11's three TMA-path headers: the weights loaded after the
# wait, the butterfly's 4 shuffles), processes alternating A B A B, DeepGEMM beside in each.
#   run(command="bash bench/results/h200-2026-12-04-s12/call4.sh", carry=[".whl", ".xfer/pk", ".xfer/ab"], timeout_s=590)
cd "$(dirname "$0")/../../.."
HERE=bench/results/h200-2026-12-04-s12
source $HERE/preamble.sh; export R
timeout 250 python3 -m pytest -m gpu -q -p no:cacheprovider -rs --junitxml=$R/pytest_gpu.xml \
  --ignore=tests/test_peer_sglang_gpu.py --ignore=tests/test_peer_sglang_topk_gpu.py > $R/pytest_gpu.log 2>&1
echo "pytest -m gpu rc=$? $(el)"; grep -E "^(FAILED|ERROR)" $R/pytest_gpu.log | cut -c1-300 | head -12
grep -o 'tests="[0-9]*"\|failures="[0-9]*"\|errors="[0-9]*"\|skipped="[0-9]*"' $R/pytest_gpu.xml | head -4 | tr '\n' ' '; echo
peers_ready
( timeout 60 python3 scripts/sglang_peer.py build .peers/sglang > $R/sglang_store_build.log 2>&1 ) || true
timeout 60 python3 -m pytest -m gpu -q -p no:cacheprovider -rs --junitxml=$R/pytest_peers.xml tests/test_peer_sglang_gpu.py \
  tests/test_peer_sglang_topk_gpu.py > $R/pytest_peers.log 2>&1
echo "peers' pytest rc=$? $(el)"; grep -o 'tests="[0-9]*"\|failures="[0-9]*"' $R/pytest_peers.xml | head -2 | tr '\n' ' '; echo
MTP_ALTERNATIVES=0 timeout 90 python3 scripts/reader_mtp_bench.py $R/mtp_main.json > $R/mtp_main.log 2>&1
echo "mtp bench rc=$? $(el)"; grep "|" $R/mtp_main.log | cut -c1-200
timeout 100 ncu --clock-control none -k regex:"indexer_logits|fp8_paged_mqa_logits" -c 3 --section SourceCounters \
  --section WarpStateStats --section SpeedOfLight -o $R/n2 python3 $HERE/profile_n2.py > $R/ncu_run.log 2>&1
echo "ncu rc=$? $(el)"; tail -2 $R/ncu_run.log | cut -c1-200
ncu --import $R/n2.ncu-rep --page source --csv --print-source sass > $R/n2_source.csv 2> $R/ncu_source.err
echo "source page rc=$? $(wc -c < $R/n2_source.csv) B"; head -c 300 $R/ncu_source.err
ncu --import $R/n2.ncu-rep --page details > $R/n2_details.txt 2>&1
rm -f $R/n2.ncu-rep
AB="32:65536:equal:1,32:65536:equal:2,128:16384:uniform:2,64:32768:pm30:2"
for round in 1 2; do
  for tree in ab main; do
    dir=$ROOT; [ $tree = ab ] && dir=$ROOT/.xfer/ab
    ( cd $dir && PYTHONPATH=/tmp/site:$dir:$PYTHONPATH MTP_ALTERNATIVES=0 MTP_SHAPES=$AB timeout 60 python3 scripts/reader_mtp_bench.py \
      $R/ab_${tree}_${round}.json specs/dsv4/indexer_fp8.yaml specs/indexer_bf16.yaml > $R/ab_${tree}_${round}.log 2>&1 )
    echo "ab $tree $round rc=$? $(el)"; grep "|" $R/ab_${tree}_${round}.log | cut -c1-120
  done
done
pack call4
