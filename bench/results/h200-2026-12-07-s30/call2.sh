#!/usr/bin/env bash
# Session 30's short call, for the device time call1 lost to failed starts: call1's steps 1 and 2 alone, no peer built
# (no build loads the host while it is timed): the ops' host cost, idle and behind a busy GPU (host_breakdown.py),
# kgen bench's reader.host, the chain with the driver stubbed (host_parts.py); then main's top-k GPU tests (those
# beside SGLang's top-k skip). main: 68ce9cb and this script's commit, frozen as .xfer/pk/main.tar.xz.
#   run(command="bash bench/results/h200-2026-12-07-s30/call2.sh", carry=[".whl", ".xfer/pk"], timeout_s=420)
cd "$(dirname "$0")/../../.."
[ -d .xfer/main ] || { mkdir -p .xfer/main && tar -xJf .xfer/pk/main.tar.xz -C .xfer/main; }
NO_PEERS=1 source scripts/device_call.sh
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
in_tree main $R/host.log 90 python3 scripts/host_breakdown.py --json $R/host.json
snap call2
in_tree main $R/reader_host.log 60 python3 -c "import json, torch; from kgen.host_cost import read_host_cost
from kgen.resolve import resolve_spec; print(json.dumps(read_host_cost(torch, resolve_spec('specs/dsv4.yaml::dsv4_indexer_fp8'))))"
in_tree main $R/host_parts.log 60 python3 "$ROOT/bench/results/h200-2026-12-07-s30/host_parts.py" \
  --json $R/host_parts.json
snap call2
in_tree main $R/pytest_main.log 200 python3 -m pytest -p no:cacheprovider -rs tests/test_topk_gpu.py tests/test_topk_native.py
grep -E "^(FAILED|ERROR)|passed|failed" "$R/pytest_main.log" | cut -c1-300 | head -12
pack call2
