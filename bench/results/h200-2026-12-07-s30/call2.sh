#!/usr/bin/env bash
# Session 30's short call, for the device time call1 lost to failed starts: call1's steps 1 and 2 alone (main's
# top-k GPU tests while the peers build; then the ops' host cost, idle and behind a busy GPU, kgen bench's reader.host
# with DeepGEMM's beside it, and the chain with the driver stubbed). main: 68ce9cb and this script's commit.
#   run(command="bash bench/results/h200-2026-12-07-s30/call2.sh", carry=[".whl", ".xfer/pk"], timeout_s=420)
cd "$(dirname "$0")/../../.."
[ -d .xfer/main ] || { mkdir -p .xfer/main && tar -xJf .xfer/pk/main.tar.xz -C .xfer/main; }
source scripts/device_call.sh
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
tests_beside_peers main tests/test_topk_gpu.py tests/test_topk_native.py
snap call2
# after the peers' builds (tests_beside_peers waits for them): nothing else loads the host's CPUs
in_tree main $R/host.log 90 python3 scripts/host_breakdown.py --json $R/host.json
snap call2
in_tree main $R/reader_host.log 60 python3 -c "import json, torch; from kgen.host_cost import read_host_cost
from kgen.reader_check import peer_module; from kgen.resolve import resolve_spec
print(json.dumps(read_host_cost(torch, resolve_spec('specs/dsv4.yaml::dsv4_indexer_fp8'), peer=peer_module()[0])))"
in_tree main $R/host_parts.log 60 python3 "$ROOT/bench/results/h200-2026-12-07-s30/host_parts.py" \
  --json $R/host_parts.json
pack call2
