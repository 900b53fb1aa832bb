#!/usr/bin/env bash
# call7 of session 12: ncu's per-instruction stall samples of the shipped reader and of the register-split pair
# cubin at fp8 32 x 64K next_n 1 (profile_split.py). No peers.
#   run(command="bash bench/results/h200-2026-12-04-s12/call7.sh", carry=[".whl"], timeout_s=240)
cd "$(dirname "$0")/../../.."
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD KGEN_CACHE_DIR=/tmp/kcache PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p "$R"
timeout 150 ncu --clock-control none -k regex:indexer_logits -c 2 --section SourceCounters --section WarpStateStats \
  --section SpeedOfLight --section Occupancy -o $R/split python3 bench/results/h200-2026-12-04-s12/profile_split.py \
  > $R/ncu_run.log 2>&1
echo "ncu rc=$?"; tail -2 $R/ncu_run.log | cut -c1-200
ncu --import $R/split.ncu-rep --page source --csv --print-source sass > $R/split_source.csv 2> $R/ncu_source.err
ncu --import $R/split.ncu-rep --page details > $R/split_details.txt 2>&1
grep -E "indexer_logits|Duration|DRAM Through|Warp Cycles Per Issued|Achieved Occupancy" $R/split_details.txt | cut -c1-110
rm -f $R/split.ncu-rep
tar -czf "$OUT/call7.tgz" -C "$OUT" r && rm -rf "$R"
