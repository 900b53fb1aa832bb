#!/usr/bin/env bash
# call4 of session 23. Tree early: main (79733b7) with early-loads.patch (the one-CTA path issues its row's first
# round of loads before it clears the coarse histogram and passes the barrier that follows, so the clear and the
# barrier wait out the loads' latency: `for_each_value_after`; the cluster path keeps its order, where the same
# change cost a spill). 1. early's GPU tests beside the peers' builds; 2. early against head at B 1, 8, 32, 64 x 4K,
# 64K, 256K, k 512, equal and +-30 % (next_n 2), two rounds, the second in reverse order; 3. head's whole top-k bench
# (56 shapes, the peers in the same process: the first on cases whose pages never repeat); 4. while the call has
# spent less than 400 s, the reader's MTP bench beside DeepGEMM (fp8, next_n 1, 2, 4; no pair or split cubins).
# Made from the repository root as:
#   rm -rf .xfer/early && mkdir -p .xfer/early && git archive HEAD kgen templates specs scripts tests pyproject.toml |
#     tar -x -C .xfer/early && patch -p1 -d .xfer/early < bench/results/h100-2026-12-06-s23/early-loads.patch
#   run(command="bash bench/results/h100-2026-12-06-s23/call4.sh", carry=[".whl", ".xfer/pk", ".xfer/early"],
#       timeout_s=600)
# Read: python bench/results/h100-2026-12-06-s21/trees_table.py DIR/r/ab head early;
#       python bench/results/h100-2026-12-06-s22/full_table.py DIR/r/full_head.json
cd "$(dirname "$0")/../../.."
source scripts/device_call.sh
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$GPU"
tests_beside_peers early tests/test_topk_gpu.py tests/test_topk_native.py
snap call4
SHAPES=(--batches 1,8,32,64 --keys 4096,65536,262144 --ks 512 --others "" --time-limit 80)
mkdir -p $R/ab
topk_ab 1 "head early" -- "${SHAPES[@]}"
mv $R/topk_*_1.* $R/ab/
topk_ab 1 "early head" -- "${SHAPES[@]}"
for f in $R/topk_*_1.*; do mv "$f" "$R/ab/$(basename "${f/_1./_2.}")"; done  # round 2
snap call4
in_tree head $R/full_head.log 150 python3 scripts/topk_shapes.py --json $R/full_head.json --time-limit 130
snap call4
if (( $(date +%s) - T0 < 400 )); then
  in_tree head $R/mtp.log 120 env MTP_ALTERNATIVES=0 python3 scripts/reader_mtp_bench.py $R/mtp.json \
    specs/dsv4/indexer_fp8.yaml
fi
pack call4
