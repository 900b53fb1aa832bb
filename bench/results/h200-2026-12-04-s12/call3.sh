#!/usr/bin/env bash
# call3 of session 12: the TMA one-token cubin planned at the 72 registers it now uses, so that 2 CTAs of 3
# consumer warpgroups fit an SM (6 warpgroups where the shipped ring has 4): the reader's GPU tests, then
# scripts/reader_mtp_bench.py with those rings beside the shipped one and DeepGEMM, one process per spec.
#   run(command="bash bench/results/h200-2026-12-04-s12/call3.sh", carry=[".whl", ".xfer/pk"], timeout_s=420)
cd "$(dirname "$0")/../../.."
HERE=bench/results/h200-2026-12-04-s12
source $HERE/preamble.sh; export R
timeout 120 python3 -m pytest -q -p no:cacheprovider -rs tests/test_gpu_indexer.py > $R/pytest_reader.log 2>&1
echo "pytest reader rc=$? $(el)"; grep -E "^(FAILED|ERROR)" $R/pytest_reader.log | cut -c1-300 | head
peers_ready
SHAPES="32:65536:equal:1,32:65536:equal:2,32:65536:equal:4,128:16384:uniform:1,128:16384:uniform:2,128:16384:uniform:4,1:65536:equal:1,1:65536:equal:2,64:32768:pm30:1,64:32768:pm30:2,8:4096:equal:1"
MTP_ALTERNATIVES=0 MTP_SHAPES=$SHAPES MTP_TUNES='{"c3s6": {"kReaderWgConsumers": 3, "kReaderWgTmaStages": 6}, "c3s9": {"kReaderWgConsumers": 3, "kReaderWgTmaStages": 9}, "c2s6": {"kReaderWgConsumers": 2, "kReaderWgTmaStages": 6}}' \
  timeout 130 python3 scripts/reader_mtp_bench.py $R/mtp_fp8.json specs/dsv4/indexer_fp8.yaml > $R/mtp_fp8.log 2>&1
echo "mtp fp8 rc=$? $(el)"; grep "|" $R/mtp_fp8.log | cut -c1-260
MTP_ALTERNATIVES=0 MTP_SHAPES="32:65536:equal:1,32:65536:equal:2,128:16384:uniform:2" MTP_TUNES='{"c3s3": {"kReaderWgConsumers": 3, "kReaderWgTmaStages": 3}, "c3s6": {"kReaderWgConsumers": 3, "kReaderWgTmaStages": 6}}' \
  timeout 60 python3 scripts/reader_mtp_bench.py $R/mtp_bf16.json specs/indexer_bf16.yaml > $R/mtp_bf16.log 2>&1
echo "mtp bf16 rc=$? $(el)"; grep "|" $R/mtp_bf16.log | cut -c1-260
pack call3
