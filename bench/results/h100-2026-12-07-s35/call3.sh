#!/usr/bin/env bash
# Session 35's third call: ncu of main at fp8 32 x 64K, the launches session 24's call4 profiled (its profile_mtp.py:
# the shipped launch at next_n 1, 2 and 4, the one-token cubin forced at next_n 4): warp states, instruction mix, and
# per-SASS-instruction executed counts and stall samples (the source page), to find what a tile costs a consumer warp
# beside its tokens, and what changed since session 24.
#   run(command="bash bench/results/h100-2026-12-07-s35/call3.sh", carry=[".whl", ".xfer/pk"], timeout_s=300)
# Read: python bench/results/h100-2026-12-05-s19/sass_runs.py DIR/r/source.csv.gz KERNEL [MIN]
cd "$(dirname "$0")/../../.."
NO_PEERS=1 source scripts/device_call.sh
PROFILE=bench/results/h100-2026-12-06-s24/profile_mtp.py
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
in_tree head $R/warm.log 120 python3 $PROFILE  # compiles the cubins into the cache first
in_tree head $R/ncu.log 200 ncu --clock-control none -k regex:"indexer_logits" -c 4 \
  --section SpeedOfLight --section WarpStateStats --section InstructionStats --section LaunchStats \
  --section Occupancy --section SourceCounters -o $R/mtp python3 $PROFILE
ncu --import $R/mtp.ncu-rep --page details > $R/details.txt 2>&1
ncu --import $R/mtp.ncu-rep --page source --csv --print-source sass 2> $R/src.err | gzip > $R/source.csv.gz
grep -E "^  [a-zA-Z_].*\(|Duration|Executed Instructions  |Issue Slots Busy|Registers Per|Achieved Occ|Block Limit" \
  $R/details.txt | cut -c1-120 | head -40
rm -f $R/mtp.ncu-rep
pack call3
