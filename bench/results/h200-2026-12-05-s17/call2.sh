#!/usr/bin/env bash
# call2 of session 17: the top-k at the batches where the driver's cluster count may differ from the SM count's
# (B 16-64 x 64K and 256K keys, k 512, fp8 keys, equal lengths next_n 1 and +-30 % next_n 2), main against head
# (call1's trees), processes alternating, two rounds, DeepGEMM's logits and SGLang's top-k beside them in each.
#   run(command="bash bench/results/h200-2026-12-05-s17/call2.sh", carry=[".whl", ".xfer/pk", ".xfer/base"],
#       timeout_s=590)
cd "$(dirname "$0")/../../.."
source scripts/device_call.sh
peers_ready
topk_ab 2 "base head" -- --batches 16,32,64 --keys 65536,262144 --ks 512 --others "" --time-limit 90
pack call2
