#!/usr/bin/env bash
# The writer beside SGLang's store kernels on the H200 (issue 20, item 4). From /work/main, after
#   PYTHONPATH=<wpeer> python <wpeer>/scripts/sglang_peer.py prepare .peers/sglang
#   run(command="cd .xfer/wpeer && ln -sfn ../../.whl .whl && ln -sfn ../../.peers .peers && bash bench/results/wpeer-2026-12-03/run1.sh",
#       carry=[".xfer/wpeer", ".whl", ".peers"], timeout_s=200)
# 1. the peer's launcher built with the machine's nvcc, 2. its GPU test, 3. kgen bench on the two indexer
# variants SGLang writes (N = 1 ... 1M, the peer beside each case; torch.compile off, the reader at one shape).
cd "$(dirname "$0")/../../.."
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD KGEN_CACHE_DIR=/tmp/kcache PYTHONUNBUFFERED=1 KGEN_SGLANG_KIT=$PWD/.peers/sglang
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s]"; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader | tee $OUT/machine.txt
{ command -v nvcc; nvcc --version | tail -2; cat .peers/sglang/KIT.json | head -12; } >> $OUT/machine.txt 2>&1
timeout 60 python3 scripts/sglang_peer.py build .peers/sglang > $OUT/peer_build.log 2>&1
echo "peer build rc=$? $(el)"; tail -3 $OUT/peer_build.log | cut -c1-400
timeout 50 python3 -m pytest tests/test_peer_sglang_gpu.py -q -p no:cacheprovider -rs > $OUT/pytest_peer_gpu.log 2>&1
echo "pytest rc=$? $(el)"; tail -12 $OUT/pytest_peer_gpu.log | cut -c1-400
timeout -s INT ${T_BENCH:-110} python3 -m kgen bench specs/dsv4/indexer_fp8.yaml specs/dsv4/indexer_fp4.yaml \
  --tokens 1 --tokens 64 --tokens 4096 --tokens 65536 --tokens 1048576 --no-compile --reader-shapes 1x4096 \
  --json $OUT/bench.json > $OUT/bench.log 2>&1
echo "bench rc=$? $(el)"; tail -25 $OUT/bench.log | cut -c1-250
python3 - $OUT/bench.json <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
print("peer:", d.get("peer", {}).get("present"), d.get("peer", {}).get("why"))
for e in d["results"]:
    p = e.get("peer", {})
    if "speed_cold" in p:
        print(f"{e['variant']:<18} N={e['tokens']:<8} kgen {p['kgen_cold_us']:8.2f} / {p['kgen_graph_us']:8.2f} us  "
              f"sglang {p['cold_us']:8.2f} / {p['graph_us']:8.2f} us  speed {p['speed_cold']:.2f} / {p['speed_graph']:.2f}  "
              f"bytes differing {p['bytes_differing']} of {p['bytes_compared']}")
    else:
        print(e.get("variant"), e.get("tokens"), "peer:", p, e.get("error", "")[:200])
PY
