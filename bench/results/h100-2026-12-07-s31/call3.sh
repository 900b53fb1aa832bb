#!/usr/bin/env bash
# Session 31's third call: what calls 1 and 2 left unrun on a GPU. main as in call2 (12cd10a), frozen as the tree
# "main" (.xfer/pk/main.tar.xz: git archive HEAD -- . ':!bench/results' ':!generated').
# 1. the other GPU test files (the ops, the engines' calls, the writer and the reader) while the peers build;
# 2. the read side's host cost with DeepGEMM present (kgen.host_cost.read_host_cost with the peer, as `kgen bench`
#    records it in reader.host): its fp8_paged_mqa_logits and its schedule call beside kgen's ops, same tensors.
#   run(command="bash bench/results/h100-2026-12-07-s31/call3.sh", carry=[".whl", ".xfer/pk"], timeout_s=420)
cd "$(dirname "$0")/../../.."
[ -d .xfer/main ] || { mkdir -p .xfer/main && tar -xJf .xfer/pk/main.tar.xz -C .xfer/main; }
source scripts/device_call.sh
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
tests_beside_peers main tests/test_ops_gpu.py tests/test_engines_gpu.py tests/test_gpu.py tests/test_gpu_indexer.py
snap call3
in_tree main $R/reader_host_peer.log 90 python3 -c "import json, torch
from kgen.host_cost import read_host_cost
from kgen.reader_check import peer_module
from kgen.resolve import resolve_spec
dg, why = peer_module()
print(why or 'deep_gemm imports')
print(json.dumps(read_host_cost(torch, resolve_spec('specs/dsv4.yaml::dsv4_indexer_fp8'), peer=dg)))"
pack call3
