#!/usr/bin/env bash
# call2 of session 13: where the top-k's time goes at small batches. 1. ncu's per-instruction source counters of
# kgen's top-k and SGLang's on the same logits (profile_topk_source.py: 1 x 4K, 1 x 64K, 1 x 64K +-30 % next_n 2),
# on main (d247e3d) and on main before call1's change (.xfer/base); 2. the top-k bench at B = 1 (4K, 64K, 256K keys,
# equal and +-30 % next_n 2), base and head alternating, three rounds. From the repository root:
#   run(command="bash bench/results/h200-2026-12-04-s13/call2.sh", carry=[".whl", ".xfer/pk", ".xfer/base"], timeout_s=590)
cd "$(dirname "$0")/../../.."
HERE=bench/results/h200-2026-12-04-s13
source $HERE/preamble.sh; export R
peers_ready
for tree in head base; do
  dir=$ROOT; [ $tree = base ] && dir=$ROOT/.xfer/base
  ( cd $dir && PYTHONPATH=/tmp/site:$dir:$PYTHONPATH timeout 150 ncu --clock-control none -k regex:topk -c 12 \
    --section SourceCounters --section WarpStateStats --section SpeedOfLight -o $R/src_$tree \
    python3 $ROOT/$HERE/profile_topk_source.py > $R/ncu_$tree.log 2>&1 )
  echo "ncu $tree rc=$? $(el)"; tail -2 $R/ncu_$tree.log | cut -c1-200
  ncu --import $R/src_$tree.ncu-rep --page source --csv --print-source sass 2> $R/src_$tree.err | gzip > $R/src_$tree.csv.gz
  ncu --import $R/src_$tree.ncu-rep --page details > $R/details_$tree.txt 2>&1
  grep -E "^  [a-z_]+.*\(|Duration" $R/details_$tree.txt | cut -c1-120 | head -24
  rm -f $R/src_$tree.ncu-rep
done
for round in 1 2 3; do
  for tree in base head; do
    dir=$ROOT; [ $tree = base ] && dir=$ROOT/.xfer/base
    ( cd $dir && PYTHONPATH=/tmp/site:$dir:$PYTHONPATH timeout -s INT 80 python3 $ROOT/$HERE/topk_run.py \
      --json $R/topk_${tree}_${round}.json --batches 1 --keys 4096,65536,262144 --ks 512 --others "" \
      --time-limit 60 > $R/topk_${tree}_${round}.log 2>&1 )
    echo "top-k bench $tree $round rc=$? $(el)"; tail -1 $R/topk_${tree}_${round}.log | cut -c1-200
  done
done
pack call2
