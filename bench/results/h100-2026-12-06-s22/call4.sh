#!/usr/bin/env bash
# call4 of session 22: main as it stands (0464814) through the whole top-k bench, scripts/topk_shapes.py's default
# shapes: fp8 k 512 and 2048 at B 1, 8, 32, 64 x 4K, 64K, 256K, equal lengths (next_n 1) and +-30 % (next_n 2); bf16
# and fp4 keys at B 1 and 32 x 64K; DeepGEMM's logits and SGLang's top-k in the same process.
#   run(command="bash bench/results/h100-2026-12-06-s22/call4.sh", carry=[".whl", ".xfer/pk"], timeout_s=330)
cd "$(dirname "$0")/../../.."
source scripts/device_call.sh
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
peers_ready
snap call4
in_tree head $R/full_main.log 200 python3 scripts/topk_shapes.py --json $R/full_main.json --time-limit 170
pack call4
