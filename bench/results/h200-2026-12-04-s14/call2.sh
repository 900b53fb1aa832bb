#!/usr/bin/env bash
# call2 of session 14 (not run). 1. ncu's per-instruction source counters of main's top-k and SGLang's on the same
# logits (session 13's profile_topk_source.py: 1 x 4K, 1 x 64K, 1 x 64K +-30 % next_n 2), to set beside session 13's
# call2 pages (the merge was 27 % of the 1 x 64K cluster path's instructions); 2. rows the plan gives 8 CTAs on 16
# (scripts/topk_shapes.py --force-cluster 16: a non-portable cluster, as SGLang runs 1 x 64K) against the plan's 8,
# B 1, 2, 4 x 64K, 256K keys, equal and +-30 % next_n 2, k 512, one tree, processes alternating, three rounds; the
# bench checks every set against torch.topk's. From the repository root:
#   run(command="bash bench/results/h200-2026-12-04-s14/call2.sh", carry=[".whl", ".xfer/pk"], timeout_s=590)
cd "$(dirname "$0")/../../.."
source scripts/device_call.sh
peers_ready
S13=bench/results/h200-2026-12-04-s13
in_tree head $R/ncu_head.log 150 ncu --clock-control none -k regex:topk -c 12 --section SourceCounters \
  --section WarpStateStats --section SpeedOfLight -o $R/src_head python3 $S13/profile_topk_source.py
ncu --import $R/src_head.ncu-rep --page source --csv --print-source sass 2> $R/src_head.err | gzip > $R/src_head.csv.gz
ncu --import $R/src_head.ncu-rep --page details > $R/details_head.txt 2>&1
grep -E "^  [a-z_]+.*\(|Duration" $R/details_head.txt | cut -c1-120 | head -24
rm -f $R/src_head.ncu-rep
SHAPES=(--batches 1,2,4 --keys 65536,262144 --ks 512 --others "" --time-limit 50)
for round in 1 2 3; do
  in_tree head $R/topk_c8_$round.log 80 python3 scripts/topk_shapes.py --json $R/topk_c8_$round.json "${SHAPES[@]}"
  in_tree head $R/topk_c16_$round.log 80 python3 scripts/topk_shapes.py --json $R/topk_c16_$round.json \
    "${SHAPES[@]}" --force-cluster 16
done
pack call2
