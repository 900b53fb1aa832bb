#!/usr/bin/env bash
# (run from a checkout of the branch fp8-ring4: head is that checkout)
# call4 of session 26 (call3 cut to the device time left after refused starts): head = fp8's TMA ring of 4
# stages: the reader's and the fused top-k's GPU tests, then the ring of 4 beside the ring of 8 on the MTP bench's
# shapes and short rows, one process, without waiting for the peers' builds.
#   run(command="bash bench/results/h100-2026-12-06-s26/call4.sh", carry=[".whl", ".xfer/pk"])
cd "$(dirname "$0")/../../.."
source scripts/device_call.sh
in_tree head $R/pytest_head.log 130 env -u KGEN_SGLANG_KIT -u KGEN_SGLANG_TOPK_KIT python3 -m pytest -p no:cacheprovider -rs tests/test_gpu_indexer.py \
  tests/test_topk_gpu.py
grep -E "^(FAILED|ERROR)|passed|failed" $R/pytest_head.log | cut -c1-300 | head -12
snap call4
S=128:4096:pm30:2,64:8192:pm30:2,128:16384:uniform:2,32:65536:equal:1,128:65536:equal:1,32:65536:equal:2
S=$S,32:65536:equal:4,32:65536:pm30:2,1:65536:equal:1,64:4096:equal:1,8:4096:pm30:2,128:16384:uniform:4
in_tree head $R/rings.log 100 env MTP_ALTERNATIVES=0 MTP_SHAPES="$S" MTP_TUNES='{"s8": {"kReaderWgTmaStages": 8}}' \
  python3 scripts/reader_mtp_bench.py $R/rings.json specs/dsv4/indexer_fp8.yaml
pack call4
