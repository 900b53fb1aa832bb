#!/usr/bin/env bash
# call1 of session 25: the top-k's and the ops' GPU tests on main (the keys-in-registers reader inside indexer_topk at
# next_n 3-4); the reader beside DeepGEMM on short rows (4K-16K keys, batches of 8-128, equal and +-30 %, next_n 1
# and 2), where session 23's fused bench put the reader at 1.1-1.66x DeepGEMM's time; ncu of both at 64 x 4K.
#   run(command="bash bench/results/h100-2026-12-06-s25/call1.sh", carry=[".whl", ".xfer/pk"], timeout_s=600)
cd "$(dirname "$0")/../../.."
source scripts/device_call.sh
HERE=bench/results/h100-2026-12-06-s25
tests_beside_peers head tests/test_topk_gpu.py tests/test_topk_native.py tests/test_ops_gpu.py
snap call1
S=8:4096:equal:1,8:4096:pm30:2,32:4096:equal:1,32:4096:pm30:2,64:4096:equal:1,64:4096:equal:2,64:4096:pm30:1
S=$S,64:4096:pm30:2,128:4096:equal:1,128:4096:pm30:2,64:8192:equal:1,64:8192:pm30:2,64:16384:pm30:2
S=$S,1:4096:equal:1,1:65536:equal:1
in_tree head $R/short.log 150 env MTP_ALTERNATIVES=0 MTP_SHAPES="$S" \
  python3 scripts/reader_mtp_bench.py $R/short.json specs/dsv4/indexer_fp8.yaml
snap call1
in_tree head $R/ncu.log 180 ncu --clock-control none -k regex:"indexer_logits|fp8_paged_mqa_logits" -c 8 \
  --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section InstructionStats \
  --section LaunchStats --section Occupancy --section SourceCounters -o $R/short \
  python3 $HERE/profile_short.py 64:4096:equal:1 64:4096:pm30:2
ncu --import $R/short.ncu-rep --page details > $R/short_details.txt 2>&1
ncu --import $R/short.ncu-rep --page source --csv --print-source sass 2> $R/src.err | gzip > $R/short_source.csv.gz
grep -E "^  [a-zA-Z_].*\(|Duration|Executed Instructions  |Memory Thr|DRAM Thr|L2 Hit" $R/short_details.txt | cut -c1-120 | head -60
rm -f $R/short.ncu-rep
pack call1
