#!/usr/bin/env bash
# call4 of session 24: ncu of the landed reader (7642557) at fp8 32 x 64K: the shipped pick at
# next_n 1, 2, 4, the default cubin forced at next_n 4, DeepGEMM at next_n 2 (profile_mtp.py): speed of light, the
# pipes' utilization, shared memory, warp states, instruction mix, per-instruction stall samples.
#   run(command="bash bench/results/h100-2026-12-06-s24/call4.sh", carry=[".whl", ".xfer/pk"], timeout_s=600)
cd "$(dirname "$0")/../../.."
source scripts/device_call.sh
HERE=bench/results/h100-2026-12-06-s24
peers_ready
in_tree head $R/warm.log 120 python3 $HERE/profile_mtp.py  # compiles the cubins into the cache first
in_tree head $R/ncu.log 300 ncu --clock-control none -k regex:"indexer_logits|fp8_paged_mqa_logits" -c 5 \
  --section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
  --section WarpStateStats --section InstructionStats --section LaunchStats --section Occupancy \
  --section SourceCounters -o $R/mtp python3 $HERE/profile_mtp.py
ncu --import $R/mtp.ncu-rep --page details > $R/mtp_details.txt 2>&1
ncu --import $R/mtp.ncu-rep --page source --csv --print-source sass 2> $R/src.err | gzip > $R/mtp_source.csv.gz
grep -E "^  [a-zA-Z_].*\(|Duration|Executed Instructions  |Issue Slots Busy|Shared Memory|Tensor|Compute \(SM\) Thr|Memory Thr" \
  $R/mtp_details.txt | cut -c1-120 | head -60
rm -f $R/mtp.ncu-rep
pack call4
