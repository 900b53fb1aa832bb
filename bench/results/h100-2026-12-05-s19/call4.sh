#!/usr/bin/env bash
# call4 of session 19: how long a row the one-CTA path should take. Trees: head = 4da5e58 (rows of up to 8K keys
# on one CTA, longer ones on clusters of 2 and up), one16 and one32 = head with TOPK_ONE_CTA_KEYS 16384 and 32768
# (branch topk-one-cta's constant). The top-k at B 1, 8, 32, 64 x 8K, 12K, 16K, 24K keys, equal and +-30 % next_n 2
# (rows up to 1.3x the keys), k 512, fp8, SGLang's top-k and DeepGEMM's logits beside; two rounds, the trees
# alternating. From the repo root:
#   run(command="bash bench/results/h100-2026-12-05-s19/call4.sh", carry=[".whl", ".xfer/pk", ".xfer/one16",
#       ".xfer/one32"], timeout_s=480)
cd "$(dirname "$0")/../../.."
source scripts/device_call.sh
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
peers_ready
SHAPES=(--batches 1,8,32,64 --keys 8192,12288,16384,24576 --ks 512 --others "" --time-limit 45)
topk_ab 1 "one16 head one32" -- "${SHAPES[@]}"
snap call4
for f in $R/topk_*_1.*; do mv "$f" "${f/_1./_r1.}"; done  # round 1's, before ab's second run names its own _1
topk_ab 1 "one32 head one16" -- "${SHAPES[@]}"
pack call4
