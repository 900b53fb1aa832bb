#!/usr/bin/env bash
# call2 of session 9: the reader's MTP loop that issues the next token's wgmma before this token's epilogue ends
# (the TMA variant), and the top-k bench with SGLang's closures fixed; from the repository root, the base tree
# (the commit before the reader change) unpacked under .xfer/base by:
#   rm -rf .xfer/base && mkdir -p .xfer/base && git archive BASE kgen templates specs | tar -x -C .xfer/base
#   run(command="bash bench/results/h200-2026-12-03-s9/call2.sh", carry=[".whl", ".xfer/pk", ".xfer/base"], timeout_s=540)
# 1. the reader's and the top-k's GPU tests, `kgen test --readers-only` (ragged lengths, next_n 1-4, every shipped
# readable variant, 2 sampled specs), 2. scripts/reader_mtp_bench.py (the shipped cubin and DeepGEMM) in the base tree
# then in this one, each its own process, 3. topk_run.py (fp8 48 shapes, bf16 and fp4).
cd "$(dirname "$0")/../../.."
HERE=bench/results/h200-2026-12-03-s9
source $HERE/preamble.sh
timeout 200 python3 -m pytest -q -p no:cacheprovider -rs -x tests/test_gpu_indexer.py tests/test_topk_gpu.py \
  > $R/pytest_gpu.log 2>&1
echo "pytest rc=$? $(el)"; grep -E "^(FAILED|ERROR)" $R/pytest_gpu.log | cut -c1-300 | head; tail -1 $R/pytest_gpu.log
timeout 90 python3 -m kgen test --readers-only specs/dsv4.yaml specs/dsv32_indexer.yaml --sample 2 --json \
  > $R/test.json 2> $R/test.log
echo "kgen test rc=$? $(el)"; grep -E "indexer_(logits|topk) [0-9]+/" $R/test.log | tail -3; grep -c "^FAIL" $R/test.log
peers_ready
export MTP_ALTERNATIVES=0 MTP_SHAPES=32:65536:equal:1,32:65536:equal:2,32:65536:equal:4,128:16384:uniform:1,128:16384:uniform:2,128:16384:uniform:4,1:65536:equal:1,1:65536:equal:2
for tree in base head; do
  src=$ROOT; [ $tree = base ] && src=$ROOT/.xfer/base
  PYTHONPATH=${PYTHONPATH/$ROOT/$src} KGEN_CACHE_DIR=/tmp/kcache_$tree timeout 100 python3 scripts/reader_mtp_bench.py \
    $R/mtp_$tree.json > $R/mtp_$tree.log 2>&1
  echo "mtp bench $tree rc=$? $(el)"; cut -c1-260 $R/mtp_$tree.log | tail -24
done
timeout -s INT 170 python3 $HERE/topk_run.py --json $R/topk.json --time-limit 150 > $R/topk.log 2>&1
echo "top-k bench rc=$? $(el)"; tail -2 $R/topk.log | cut -c1-300
pack call2
