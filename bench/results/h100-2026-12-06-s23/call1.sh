#!/usr/bin/env bash
# call1 of session 23: session 22's call5 (bench/results/h100-2026-12-06-s22/call5.sh, its header says what the trees
# vote, chain2 and both hold), run as prepared, then, while the call has spent less than 430 s, the same trees at
# k 2048 (B 1, 8 x 64K, 256K, equal lengths): the cluster path's k 2048 cost is where the vote should matter most.
# Made from the repository root by call5's recipe, run as
#   run(command="bash bench/results/h100-2026-12-06-s23/call1.sh", carry=[".whl", ".xfer/pk", ".xfer/vote",
#       ".xfer/chain2", ".xfer/both"], timeout_s=600)
# Read: python bench/results/h100-2026-12-06-s21/trees_table.py DIR/r/ab head vote chain2 both (and DIR/r/k2048)
cd "$(dirname "$0")/../../.."
source scripts/device_call.sh
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$GPU"
tests_beside_peers vote tests/test_topk_gpu.py tests/test_topk_native.py
in_tree chain2 $R/pytest_chain2.log 200 python3 -m pytest -p no:cacheprovider -rs tests/test_topk_gpu.py \
  tests/test_topk_native.py
grep -E "^(FAILED|ERROR)|passed|failed" $R/pytest_chain2.log | cut -c1-300 | head -12
snap call1
SHAPES=(--batches 1,8,32,64 --keys 4096,65536,262144 --ks 512 --others "" --time-limit 80)
mkdir -p $R/ab
topk_ab 1 "head vote chain2 both" -- "${SHAPES[@]}"
mv $R/topk_*_1.* $R/ab/
snap call1
topk_ab 1 "both chain2 vote head" -- "${SHAPES[@]}"
for f in $R/topk_*_1.*; do mv "$f" "$R/ab/$(basename "${f/_1./_2.}")"; done  # round 2
snap call1
case $GPU:$(( $(date +%s) - T0 < 400 )) in
  *H200*:1) in_tree head $R/full_head.log 180 python3 scripts/topk_shapes.py --json $R/full_head.json \
            --time-limit 150 ;;
esac

if (( $(date +%s) - T0 < 430 )); then
  mkdir -p $R/k2048
  topk_ab 1 "head vote both" -- --batches 1,8 --keys 65536,262144 --ks 2048 --others "" --time-limit 60
  mv $R/topk_*_1.* $R/k2048/
fi
pack call1
