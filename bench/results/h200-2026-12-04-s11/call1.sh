#!/usr/bin/env bash
# call1 of session 11: main at the top-k's device-limit plan, every GPU test, then the read side's batches beside
# DeepGEMM (kgen.reader_check.bench_batches: the peer's call through peer_takes / peer_call) and the MTP bench.
#   run(command="bash bench/results/h200-2026-12-04-s11/call1.sh", carry=[".whl", ".xfer/pk"], timeout_s=480)
cd "$(dirname "$0")/../../.."
HERE=bench/results/h200-2026-12-04-s11
source $HERE/preamble.sh; export R
timeout 250 python3 -m pytest -m gpu -q -p no:cacheprovider -rs --junitxml=$R/pytest_gpu.xml \
  --ignore=tests/test_peer_sglang_gpu.py --ignore=tests/test_peer_sglang_topk_gpu.py > $R/pytest_gpu.log 2>&1
echo "pytest -m gpu rc=$? $(el)"; grep -E "^(FAILED|ERROR)" $R/pytest_gpu.log | cut -c1-300 | head -12
tail -1 $R/pytest_gpu.log | cut -c1-300
peers_ready
( timeout 60 python3 scripts/sglang_peer.py build .peers/sglang > $R/sglang_store_build.log 2>&1 ) || true
timeout 60 python3 -m pytest -m gpu -q -p no:cacheprovider -rs tests/test_peer_sglang_gpu.py \
  tests/test_peer_sglang_topk_gpu.py > $R/pytest_peers.log 2>&1
echo "peers' pytest rc=$? $(el)"; tail -1 $R/pytest_peers.log | cut -c1-300
timeout 90 python3 - > $R/batches.log 2>&1 <<'PY'
import json, os
from pathlib import Path
from kgen import reader_check as rc
from kgen.validate import validate_paths
specs = validate_paths([Path("specs/dsv4/indexer_fp8.yaml")]).specs()
shapes = ((1, 65536, "equal", 1), (32, 65536, "uniform", 1), (32, 65536, "equal", 2), (128, 16384, "uniform", 2))
data = rc.bench_batches(specs, shapes)
Path(os.environ["R"], "batches.json").write_text(json.dumps(data, indent=1))
PY
echo "bench_batches rc=$? $(el)"; tail -12 $R/batches.log | cut -c1-260
MTP_ALTERNATIVES=0 timeout 100 python3 scripts/reader_mtp_bench.py $R/mtp_main.json > $R/mtp_main.log 2>&1
echo "mtp bench rc=$? $(el)"; tail -24 $R/mtp_main.log | cut -c1-260
pack call1
