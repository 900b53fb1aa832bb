#!/usr/bin/env bash
# reader4, device run 2 (the landed code): correctness with the per-shape ring (and the 4-stage ring on the
# 70000-key and MTP cases), the reader's GPU pytest, fp8 speed of the per-shape default against the 4-stage
# ring in both orders (the first tuning measured at a shape tends to read faster cold), bf16, three
# exploratory rings, SM clock / power while benching, and ncu of the default at three shapes.
#   run(command="bash .dev/reader/bench/results/h200-2026-11-30/reader4/run2.sh", carry=[".dev/reader", ".whl"])
cd "$(dirname "$0")/../../../.."  # the repository copy (.dev/reader)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site ../../.whl/*.whl
export PYTHONPATH=/tmp/site:$PWD KGEN_CACHE_DIR=/tmp/kcache PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.limit --format=csv,noheader | tee $OUT/gpu2.txt
timeout 60 python3 -m kgen.reader_check test specs/dsv4.yaml specs/dsv32_indexer.yaml --sample 20 --tunes '[null, {"kReaderWgStages": 4}]' --json $OUT/test2.json > $OUT/test2.log 2>&1
echo "test rc=$?"; grep -v "^ok " $OUT/test2.log | cut -c1-300 | tail -8
timeout 40 python3 -m pytest -q -p no:cacheprovider tests/test_gpu_indexer.py > $OUT/pytest2.log 2>&1
echo "pytest rc=$?"; tail -2 $OUT/pytest2.log
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active --format=csv -lms 250 > $OUT/smi2.csv 2>&1 &
SMI=$!
S=1x4096,1x65536,1x262144,32x4096,32x65536,64x65536,128x4096,128x65536
timeout 45 python3 -m kgen.reader_check bench specs/dsv4/indexer_fp8.yaml --tunes '[{"kReaderWgStages": 4}, null]' --bench-shapes $S --json $OUT/bench2_fp8_oldfirst.json > $OUT/bench2_fp8_oldfirst.log 2>&1
echo "bench fp8 (4 stages first) rc=$?"; cut -c1-200 $OUT/bench2_fp8_oldfirst.log | tail -16
timeout 45 python3 -m kgen.reader_check bench specs/dsv4/indexer_fp8.yaml --tunes '[null, {"kReaderWgStages": 4}]' --bench-shapes $S --json $OUT/bench2_fp8_newfirst.json > $OUT/bench2_fp8_newfirst.log 2>&1
echo "bench fp8 (default first) rc=$?"; cut -c1-200 $OUT/bench2_fp8_newfirst.log | tail -16
timeout 30 python3 -m kgen.reader_check bench specs/indexer_bf16.yaml --json $OUT/bench2_bf16.json > $OUT/bench2_bf16.log 2>&1
echo "bench bf16 rc=$?"; cut -c1-160 $OUT/bench2_bf16.log | tail -7
timeout 30 python3 -m kgen.reader_check bench specs/dsv4/indexer_fp8.yaml --bench-shapes 1x262144,32x4096,128x65536 \
  --tunes '[{"kReaderWgStages": 6}, {"kReaderWgStages": 4, "kReaderWgL2Prefetch": 128}, {"kReaderWgStages": 2, "kReaderWgL2Prefetch": 128}]' \
  --json $OUT/bench2_explore.json > $OUT/bench2_explore.log 2>&1
echo "bench explore rc=$?"; cut -c1-160 $OUT/bench2_explore.log | tail -9
kill $SMI
timeout 50 ncu --clock-control none --section SpeedOfLight --section Occupancy --section WarpStateStats --section ComputeWorkloadAnalysis \
  --section MemoryWorkloadAnalysis -k regex:indexer_logits -c 3 \
  python3 -m kgen.reader_check profile specs/dsv4/indexer_fp8.yaml --shapes 1x262144,32x4096,128x65536 > $OUT/ncu2.txt 2>&1
echo "ncu rc=$?"; grep -E "indexer_logits|Duration|DRAM Through|Issue Slots|Achieved Occ|L2 Cache Th|Warp Cycles Per Issued|Registers" $OUT/ncu2.txt | cut -c1-140 | head -40
R=smsp__average_warps_issue_stalled
M=$(for r in barrier long_scoreboard wait math_pipe_throttle lg_throttle mio_throttle short_scoreboard dispatch_stall not_selected selected membar no_instruction branch_resolving drain sleeping; do printf "%s_%s_per_issue_active.ratio," $R $r; done)
timeout 30 ncu --clock-control none --metrics ${M%,} -k regex:indexer_logits -c 2 \
  python3 -m kgen.reader_check profile specs/dsv4/indexer_fp8.yaml --shapes 32x4096,128x65536 > $OUT/ncu2_stalls.txt 2>&1
echo "ncu stalls rc=$?"; grep -E "indexer_logits|stalled" $OUT/ncu2_stalls.txt | cut -c1-140 | head -36
