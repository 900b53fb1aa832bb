#!/usr/bin/env bash
# Session 29's first call: main as it stands (3894941's kernels), asked on the H200.
# 1. the whole top-k bench (scripts/topk_shapes.py: fp8, bf16 and fp4 keys, B 1-64 x 4K-256K, k 512 and 2048,
#    equal and +-30 % with next_n 2), DeepGEMM's logits and SGLang 0.5.23's top-k in the same process: the top-k's
#    first H200 figures since session 17;
# 2. session 28's call2 (the reader's MTP bench, three processes: the shipped cubin beside DeepGEMM, the
#    keys-in-registers cubin (kr, whose rule next_n >= 3 was set before the jump), the register split on 4 and on 3
#    consumers) while the call has spent less than 420 s.
#   run(command="bash bench/results/h200-2026-12-07-s29/call1.sh", carry=[".whl", ".xfer/pk"], timeout_s=600)
# Read: python bench/results/h100-2026-12-06-s22/full_table.py DIR/r/full_head.json
#       python bench/results/h100-2026-12-06-s28/tunes_trees.py DIR/r   (mtp2_head_<round>.json)
cd "$(dirname "$0")/../../.."
source scripts/device_call.sh
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
peers_ready
in_tree head $R/full_head.log 240 python3 scripts/topk_shapes.py --json $R/full_head.json --time-limit 220
snap call1
S=1:65536:equal:1,1:65536:equal:2,8:65536:uniform:2,32:65536:equal:1,32:65536:equal:2,32:65536:pm30:2
S=$S,128:16384:uniform:2,64:4096:pm30:2,64:8192:pm30:2,128:65536:equal:2,8:4096:pm30:2,128:4096:pm30:2
T='{"kr": {"kReaderWgKeyRegisters": 1},
    "split": {"kReaderWgTmaStages": 16, "kReaderWgConsumers": 4, "kReaderWgPairs": 1, "kReaderWgSplit": 1},
    "split3": {"kReaderWgTmaStages": 12, "kReaderWgConsumers": 3, "kReaderWgPairs": 1, "kReaderWgSplit": 1}}'
for round in 1 2 3; do
  (( $(date +%s) - T0 < 420 )) || break
  ab 1 head mtp2 100 -- env MTP_ALTERNATIVES=0 MTP_SHAPES="$S" MTP_TUNES="$T" \
    python3 "$ROOT/scripts/reader_mtp_bench.py" {out} specs/dsv4/indexer_fp8.yaml
  for f in $R/mtp2_head_1.*; do mv "$f" "${f/_1./_$round.}"; done
  snap call1
done
pack call1
