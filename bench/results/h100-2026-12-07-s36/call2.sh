#!/usr/bin/env bash
# Session 36's second call: main as it stands, every GPU test and the ops' host cost.
# 1. `pytest -m gpu` but the peers' two files, while DeepGEMM and SGLang's kernels build (the JUnit XML is written
#    at the end, so a cut run keeps its log only);
# 2. with the builds done (no build loads the CPUs): the ops' host cost per eager call, idle and behind a busy GPU
#    (scripts/host_breakdown.py: the writer, the reader, the top-k, an empty op of the same schema);
# 3. the peers' GPU tests (SGLang's writer and top-k beside kgen's, on the same tensors).
#   run(command="bash bench/results/h100-2026-12-07-s36/call2.sh", carry=[".whl", ".xfer/pk"], timeout_s=600)
# Read: python bench/results/h100-2026-12-07-s31/host_table.py DIR/r
cd "$(dirname "$0")/../../.."
source scripts/device_call.sh
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
lscpu | grep -E "Model name" | head -1
in_tree head $R/pytest_gpu.log 330 python3 -m pytest -p no:cacheprovider -m gpu -q -rs --junitxml=$R/pytest_gpu.xml \
  --ignore=tests/test_peer_sglang_gpu.py --ignore=tests/test_peer_sglang_topk_gpu.py
grep -E "^(FAILED|ERROR)|passed|failed" "$R/pytest_gpu.log" | cut -c1-300 | head -12
peers_ready
snap call2
in_tree head $R/host.log 80 python3 scripts/host_breakdown.py --json $R/host.json
snap call2
in_tree head $R/pytest_peers.log $(( 570 - ($(date +%s) - T0) )) python3 -m pytest -p no:cacheprovider -q -rs \
  tests/test_peer_sglang_gpu.py tests/test_peer_sglang_topk_gpu.py
grep -E "^(FAILED|ERROR)|passed|failed" "$R/pytest_peers.log" | cut -c1-300 | head -12
pack call2
