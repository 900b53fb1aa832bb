#!/usr/bin/env bash
# call1 of session 12: the register-split pair cubin (fp8: a producer warpgroup at 24 registers, 4 consumer
# warpgroups at 112, one CTA per SM) checked against the Torch path, then scripts/reader_mtp_bench.py: the
# shipped cubin, the pair cubin and the split cubin on rings of 12, 16 and 20 stages, DeepGEMM beside, next_n
# 1, 2, 4, one process per spec.
#   run(command="bash bench/results/h200-2026-12-04-s12/call1.sh", carry=[".whl", ".xfer/pk"], timeout_s=540)
cd "$(dirname "$0")/../../.."
HERE=bench/results/h200-2026-12-04-s12
source $HERE/preamble.sh; export R
timeout 150 python3 -m pytest -q -p no:cacheprovider -rs tests/test_gpu_indexer.py -k "pair_cubin or tma_variant" \
  > $R/pytest_split.log 2>&1
echo "pytest rc=$? $(el)"; grep -E "^(FAILED|ERROR)" $R/pytest_split.log | cut -c1-300 | head; tail -1 $R/pytest_split.log
peers_ready
MTP_SPLIT_RINGS=12,20 MTP_SHAPES="32:65536:equal:1,32:65536:equal:2,32:65536:equal:4,128:16384:uniform:1,128:16384:uniform:2,128:16384:uniform:4,1:65536:equal:1,1:65536:equal:2,64:32768:pm30:2,8:4096:equal:2" \
  timeout 200 python3 scripts/reader_mtp_bench.py $R/mtp_fp8.json specs/dsv4/indexer_fp8.yaml > $R/mtp_fp8.log 2>&1
echo "mtp fp8 rc=$? $(el)"; cut -c1-400 $R/mtp_fp8.log | tail -12
MTP_SHAPES="32:65536:equal:1,32:65536:equal:2,32:65536:equal:4,128:16384:uniform:2" \
  timeout 100 python3 scripts/reader_mtp_bench.py $R/mtp_bf16.json specs/indexer_bf16.yaml > $R/mtp_bf16.log 2>&1
echo "mtp bf16 rc=$? $(el)"; cut -c1-400 $R/mtp_bf16.log | tail -6
pack call1
