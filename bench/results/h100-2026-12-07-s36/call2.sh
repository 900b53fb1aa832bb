#!/usr/bin/env bash
# Session 36's second call: main as it stands: ncu of fp4's reader, every GPU test, the ops' host cost.
# 1. ncu of fp4's reader at 32 x 64K, next_n 1, 2 and 4 (profile_fp4.py): what bounds its time per key;
# 2. `pytest -m gpu` but the peers' two files (the JUnit XML is written at the end, so a cut run keeps its log only);
#    DeepGEMM and SGLang's kernels build meanwhile;
# 3. with the builds done (no build loads the CPUs): the ops' host cost per eager call, idle and behind a busy GPU
#    (scripts/host_breakdown.py: the writer, the reader, the top-k, an empty op of the same schema);
# 4. fp8's keys-in-registers cubin at next_n 2 beside the shipped one-token cubin and DeepGEMM, one process, the same
#    tensors (scripts/reader_mtp_bench.py), on the batches where next_n 2 is furthest behind DeepGEMM (keys in the L2
#    across graph replays: the instruction stream exposed, as on the H200) and on the bench's next_n 2 shapes;
# 5. the peers' GPU tests (SGLang's writer and top-k beside kgen's, on the same tensors).
#   run(command="bash bench/results/h100-2026-12-07-s36/call2.sh", carry=[".whl", ".xfer/pk"], timeout_s=600)
# Read: python bench/results/h100-2026-12-07-s31/host_table.py DIR/r; python3 -c ... (README)
cd "$(dirname "$0")/../../.."
source scripts/device_call.sh
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
lscpu | grep -E "Model name" | head -1
P=bench/results/h100-2026-12-07-s36/profile_fp4.py
in_tree head $R/warm_fp4.log 60 python3 $P  # the cubins into the cache first
in_tree head $R/ncu_fp4.log 90 ncu --clock-control none -k regex:"indexer_logits" -c 3 --section SpeedOfLight \
  --section WarpStateStats --section InstructionStats --section LaunchStats --section Occupancy \
  --section SourceCounters -o $R/fp4 python3 $P
ncu --import $R/fp4.ncu-rep --page details > $R/details_fp4.txt 2>&1
ncu --import $R/fp4.ncu-rep --page source --csv --print-source sass 2> $R/src.err | gzip > $R/source_fp4.csv.gz
grep -E "^  [a-zA-Z_].*\(|Duration|Executed Instructions  |Registers Per|DRAM Throughput" $R/details_fp4.txt | cut -c1-120
rm -f $R/fp4.ncu-rep
snap call2
in_tree head $R/pytest_gpu.log 270 python3 -m pytest -p no:cacheprovider -m gpu -q -rs --junitxml=$R/pytest_gpu.xml \
  --ignore=tests/test_peer_sglang_gpu.py --ignore=tests/test_peer_sglang_topk_gpu.py
grep -E "^(FAILED|ERROR)|passed|failed" "$R/pytest_gpu.log" | cut -c1-300 | head -12
peers_ready
snap call2
in_tree head $R/host.log 80 python3 scripts/host_breakdown.py --json $R/host.json
snap call2
S=8:65536:uniform:2,64:4096:pm30:2,1:65536:equal:2,32:4096:equal:2,128:4096:equal:2,32:65536:equal:2,64:32768:pm30:2
S=$S,128:16384:uniform:2
in_tree head $R/kr2.log 90 env MTP_ALTERNATIVES=0 MTP_SHAPES=$S MTP_TUNES='{"kr": {"kReaderWgKeyRegisters": 1}}' \
  python3 scripts/reader_mtp_bench.py $R/kr2.json specs/dsv4/indexer_fp8.yaml
snap call2
in_tree head $R/pytest_peers.log $(( 570 - ($(date +%s) - T0) )) python3 -m pytest -p no:cacheprovider -q -rs \
  tests/test_peer_sglang_gpu.py tests/test_peer_sglang_topk_gpu.py
grep -E "^(FAILED|ERROR)|passed|failed" "$R/pytest_peers.log" | cut -c1-300 | head -12
pack call2
