#!/usr/bin/env bash
# call1 of session 27, from a checkout of the branch fp8-ring4 (head: fp8's TMA ring of 4 stages, was 8; the pair
# cubin's ring 16 -> 8): the reader's and the fused top-k's GPU tests; then, in head, the shipped cubin (the ring of
# 4) beside the ring of 8 (`s8`, main's default), the keys in registers on the ring of 4 (`kr`) and DeepGEMM in one
# process on the same tensors, over the MTP bench's shapes, two processes (the second on the shapes reversed).
#   run(command="bash bench/results/h200-2026-12-06-s27/call1.sh", carry=[".whl", ".xfer/pk"])
cd "$(dirname "$0")/../../.."
source scripts/device_call.sh
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.sm --format=csv,noheader
tests_beside_peers head tests/test_gpu_indexer.py tests/test_topk_gpu.py
snap call1
S=1:4096:equal:1,1:65536:equal:1,1:65536:equal:2,1:262144:equal:1,8:65536:uniform:2,32:65536:equal:1
S=$S,32:65536:equal:2,32:65536:equal:4,32:65536:pm30:1,32:65536:pm30:2,128:16384:uniform:1,128:16384:uniform:2
S=$S,128:16384:uniform:4,128:65536:equal:1,128:65536:equal:2,64:32768:pm30:2,8:4096:pm30:2,64:4096:equal:1
S=$S,64:4096:pm30:2,64:4096:pm30:4,128:4096:pm30:2,64:8192:pm30:2
T='{"s8": {"kReaderWgTmaStages": 8}, "kr": {"kReaderWgKeyRegisters": 1}}'
R2=$(echo "$S" | tr ',' '\n' | tac | paste -sd,)
for round in 1 2; do
  [ $round = 1 ] && SH=$S || SH=$R2
  in_tree head $R/rings_$round.log 170 env MTP_ALTERNATIVES=0 MTP_SHAPES="$SH" MTP_TUNES="$T" \
    python3 scripts/reader_mtp_bench.py $R/rings_$round.json specs/dsv4/indexer_fp8.yaml
  snap call1
done
pack call1
