#!/usr/bin/env bash
# call2 of session 12: the TMA reader's epilogue with the weights loaded under the product and the quad's
# exchange transposing as it sums (2 shuffles per token, 3 per token pair), checked against the Torch path
# (every GPU test of the reader), then scripts/reader_mtp_bench.py on main's tree (.xfer/base: git archive HEAD)
# and on the working tree, each its own process with DeepGEMM beside.
#   run(command="bash bench/results/h200-2026-12-04-s12/call2.sh", carry=[".whl", ".xfer/pk", ".xfer/base"], timeout_s=560)
cd "$(dirname "$0")/../../.."
HERE=bench/results/h200-2026-12-04-s12
source $HERE/preamble.sh; export R
timeout 200 python3 -m pytest -q -p no:cacheprovider -rs tests/test_gpu_indexer.py > $R/pytest_reader.log 2>&1
echo "pytest reader rc=$? $(el)"; grep -E "^(FAILED|ERROR)" $R/pytest_reader.log | cut -c1-300 | head; tail -1 $R/pytest_reader.log
peers_ready
SHAPES="32:65536:equal:1,32:65536:equal:2,32:65536:equal:4,128:16384:uniform:1,128:16384:uniform:2,128:16384:uniform:4,1:65536:equal:1,1:65536:equal:2,64:32768:pm30:1,64:32768:pm30:2"
( cd .xfer/base && PYTHONPATH=/tmp/site:$PWD:$PYTHONPATH MTP_ALTERNATIVES=0 MTP_SHAPES=$SHAPES timeout 100 \
  python3 scripts/reader_mtp_bench.py $R/mtp_base.json specs/dsv4/indexer_fp8.yaml > $R/mtp_base.log 2>&1 )
echo "mtp base rc=$? $(el)"; grep "|" $R/mtp_base.log | cut -c1-200
MTP_CONTROL=0 MTP_SHAPES=$SHAPES timeout 150 python3 scripts/reader_mtp_bench.py $R/mtp_new.json specs/dsv4/indexer_fp8.yaml \
  > $R/mtp_new.log 2>&1
echo "mtp new rc=$? $(el)"; grep "|" $R/mtp_new.log | cut -c1-330
MTP_ALTERNATIVES=0 MTP_SHAPES="32:65536:equal:1,32:65536:equal:2,128:16384:uniform:2" timeout 60 \
  python3 scripts/reader_mtp_bench.py $R/mtp_bf16.json specs/indexer_bf16.yaml > $R/mtp_bf16.log 2>&1
echo "mtp bf16 rc=$? $(el)"; grep "|" $R/mtp_bf16.log | cut -c1-200
pack call2
