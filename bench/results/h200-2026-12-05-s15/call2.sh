#!/usr/bin/env bash
# call2 of session 15: session 14's call2 and call3 in one call (a device session holds 30 minutes). 1. the top-k GPU
# tests of branches topk-wide and topk-resident, each in its tree (-s: the wide one prints the driver's answer);
# 2. topk-wide against main at B 1, 2, 4, 8 x 64K, 256K keys, three rounds; 3. topk-resident against main at
# B 1, 8, 32, 64 x 4K, 8K keys, two rounds (equal and +-30 % next_n 2, k 512, processes alternating); 4. ncu's
# per-instruction source counters of main's top-k and SGLang's on the same logits (session 13's
# profile_topk_source.py). From the repository root, .xfer/wide and .xfer/resident made as session 14's README says:
#   run(command="bash bench/results/h200-2026-12-05-s15/call2.sh", carry=[".whl", ".xfer/pk", ".xfer/wide", ".xfer/resident"], timeout_s=590)
cd "$(dirname "$0")/../../.."
source scripts/device_call.sh
in_tree wide $R/pytest_wide.log 120 python3 -m pytest -q -s -p no:cacheprovider -rs \
  --junitxml=$R/pytest_wide.xml tests/test_topk_gpu.py
grep -E "^(FAILED|ERROR)|run at once" $R/pytest_wide.log | cut -c1-300 | head -12
in_tree resident $R/pytest_resident.log 120 python3 -m pytest -q -p no:cacheprovider -rs \
  --junitxml=$R/pytest_resident.xml tests/test_topk_gpu.py
grep -E "^(FAILED|ERROR)" $R/pytest_resident.log | cut -c1-300 | head -12
peers_ready
topk_ab 3 "head wide" -- --batches 1,2,4,8 --keys 65536,262144 --ks 512 --others "" --time-limit 40
topk_ab 2 "head resident" -- --batches 1,8,32,64 --keys 4096,8192 --ks 512 --others "" --time-limit 40
S13=bench/results/h200-2026-12-04-s13
in_tree head $R/ncu_head.log 100 ncu --clock-control none -k regex:topk -c 12 --section SourceCounters \
  --section WarpStateStats --section SpeedOfLight -o $R/src_head python3 $S13/profile_topk_source.py
ncu --import $R/src_head.ncu-rep --page source --csv --print-source sass 2> $R/src_head.err | gzip > $R/src_head.csv.gz
ncu --import $R/src_head.ncu-rep --page details > $R/details_head.txt 2>&1
grep -E "^  [a-z_]+.*\(|Duration" $R/details_head.txt | cut -c1-120 | head -24
rm -f $R/src_head.ncu-rep
pack call2
