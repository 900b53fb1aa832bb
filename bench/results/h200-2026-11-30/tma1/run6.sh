#!/usr/bin/env bash
# tma1, device run 6: main after the fix of run 5's failure (the header planned the TMA variant's CTAs at 72
# registers a thread, kgen.layout at 80: the twins refused the one-CTA ring of 3 consumers, and a sampled
# spec). pytest -m gpu and the reader's correctness (--sample 20, the cp.async variant on two cases each).
#   run(command="bash bench/results/h200-2026-11-30/tma1/run6.sh", carry=[".whl"])
cd "$(dirname "$0")/../../../.."  # the repository root
O=$OUT; W=/tmp/t6; mkdir -p $W/d
OUT=$W/d T_PYTEST=200 bash scripts/device_run.sh pytest > $W/device_run.log 2>&1
echo "device_run pytest rc=$?"; tail -6 $W/device_run.log | cut -c1-200
export PYTHONPATH=/tmp/site:$PWD KGEN_CACHE_DIR=/tmp/kgen-cache PYTHONUNBUFFERED=1
timeout 120 python3 -m kgen.reader_check test specs/dsv4.yaml specs/dsv32_indexer.yaml --sample 20 --tunes '[null, {"kReaderWgTma": 0}]' \
  --json $W/test.json > $W/test.log 2>&1
echo "reader test rc=$?"; grep -v "^ok " $W/test.log | cut -c1-300 | tail -4
tar czf $O/run6.tgz -C $W .
