#!/usr/bin/env bash
# Session 31's fourth call: FlashInfer 0.7.4's native top-k beside kgen's and SGLang's on the same logits
# (flashinfer_topk.py), main frozen as the tree "main" (as call3). Before it, here:
#   pip download --no-deps flashinfer-python==0.7.4 -d /tmp/fi
#   python bench/results/h100-2026-12-07-s31/flashinfer_topk.py prepare .peers/flashinfer_topk /tmp/fi/flashinfer_python-0.7.4-py3-none-any.whl
#   tar -cJf .xfer/pk/fi.tar.xz .peers/flashinfer_topk
#   run(command="bash bench/results/h100-2026-12-07-s31/call4.sh", carry=[".whl", ".xfer/pk"], timeout_s=360)
cd "$(dirname "$0")/../../.."
[ -d .xfer/main ] || { mkdir -p .xfer/main && tar -xJf .xfer/pk/main.tar.xz -C .xfer/main; }
source scripts/device_call.sh  # unpacks .peers (the other kits) first
[ -d .peers/flashinfer_topk ] || tar -xJf .xfer/pk/fi.tar.xz
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
peers_ready
in_tree main $R/flashinfer_topk.log 240 python3 "$ROOT/bench/results/h100-2026-12-07-s31/flashinfer_topk.py" run \
  "$ROOT/.peers/flashinfer_topk" --json $R/flashinfer_topk.json
pack call4
