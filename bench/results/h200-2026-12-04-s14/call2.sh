#!/usr/bin/env bash
# call2 of session 14 (not run). 1. ncu's per-instruction source counters of main's top-k and SGLang's on the same
# logits (session 13's profile_topk_source.py: 1 x 4K, 1 x 64K, 1 x 64K +-30 % next_n 2), to set beside session 13's
# call2 pages (the merge was 27 % of the 1 x 64K cluster path's instructions); 2. branch topk-wide (.xfer/wide: a row
# of 8 CTAs on 16 where cuOccupancyMaxActiveClusters says every row's wide cluster runs at once): its top-k GPU tests,
# in its tree (the new one prints the driver's answer), then the top-k bench at B 1, 2, 4, 8 x 64K, 256K keys, equal
# and +-30 % next_n 2, k 512, main (this tree) and the branch, processes alternating, three rounds. From the
# repository root, .xfer/wide made as README.md says:
#   run(command="bash bench/results/h200-2026-12-04-s14/call2.sh", carry=[".whl", ".xfer/pk", ".xfer/wide"], timeout_s=590)
cd "$(dirname "$0")/../../.."
source scripts/device_call.sh
in_tree wide $R/pytest_wide.log 150 python3 -m pytest -q -s -p no:cacheprovider -rs \
  --junitxml=$R/pytest_wide.xml tests/test_topk_gpu.py tests/test_topk_native.py
grep -E "^(FAILED|ERROR)|run at once" $R/pytest_wide.log | cut -c1-300 | head -12
peers_ready
S13=bench/results/h200-2026-12-04-s13
in_tree head $R/ncu_head.log 120 ncu --clock-control none -k regex:topk -c 12 --section SourceCounters \
  --section WarpStateStats --section SpeedOfLight -o $R/src_head python3 $S13/profile_topk_source.py
ncu --import $R/src_head.ncu-rep --page source --csv --print-source sass 2> $R/src_head.err | gzip > $R/src_head.csv.gz
ncu --import $R/src_head.ncu-rep --page details > $R/details_head.txt 2>&1
grep -E "^  [a-z_]+.*\(|Duration" $R/details_head.txt | cut -c1-120 | head -24
rm -f $R/src_head.ncu-rep
topk_ab 3 "head wide" -- --batches 1,2,4,8 --keys 65536,262144 --ks 512 --others "" --time-limit 50
pack call2
