#!/usr/bin/env bash
# call5 of session 22, unrun (the session's device time ran out), for the next session with a device. Tree vote: main
# with this folder's vote-in-bin.patch (the coarse sweep asks, one vote a warp, whether any of its lanes holds a
# threshold-bin key before claiming slots for them; ncu of call2's lean: the claim's 18 instructions ran on all 32
# warps at 1 x 4K, 7 of them with such a key; CPU emulator tests pass, 64 registers, no spill). Tree chain2: main
# with chain2-clear-shift.patch (a cluster CTA's slice by a shift where the cluster size is a power of two, as the
# plan's always are: lean's ncu at 1 x 64K shows the 32-bit division's ~22 instructions on every warp; the histograms
# cleared by unrolled loops of a compile-time count; 344 fewer SASS instructions, 64 registers, no spill). Tree both:
# the two patches. 1. vote's and chain2's top-k GPU tests (vote's beside the peers' builds); 2. vote, chain2 and both
# against head at B 1, 8, 32, 64 x 4K, 64K, 256K, k 512, equal lengths and +-30 % (next_n 2), two rounds, the second
# in the reverse order, a snap after each (the first A/B on cases whose pages never repeat: each 64K tokens written
# afresh, so allow for the writing); 3. on an H200, when the call has spent less than 400 s: head's whole top-k
# bench. Made from the repository root as:
#   P=bench/results/h100-2026-12-06-s22
#   for t in vote chain2 both; do rm -rf .xfer/$t && mkdir -p .xfer/$t &&
#     git archive HEAD kgen templates specs scripts tests pyproject.toml | tar -x -C .xfer/$t; done
#   patch -p1 -d .xfer/vote < $P/vote-in-bin.patch && patch -p1 -d .xfer/both < $P/vote-in-bin.patch
#   patch -p1 -d .xfer/chain2 < $P/chain2-clear-shift.patch && patch -p1 -d .xfer/both < $P/chain2-clear-shift.patch
#   run(command="bash bench/results/h100-2026-12-06-s22/call5.sh", carry=[".whl", ".xfer/pk", ".xfer/vote",
#       ".xfer/chain2", ".xfer/both"], timeout_s=600)
# Read: python bench/results/h100-2026-12-06-s21/trees_table.py DIR/r/ab head vote chain2 both
cd "$(dirname "$0")/../../.."
source scripts/device_call.sh
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$GPU"
tests_beside_peers vote tests/test_topk_gpu.py tests/test_topk_native.py
in_tree chain2 $R/pytest_chain2.log 200 python3 -m pytest -p no:cacheprovider -rs tests/test_topk_gpu.py \
  tests/test_topk_native.py
grep -E "^(FAILED|ERROR)|passed|failed" $R/pytest_chain2.log | cut -c1-300 | head -12
snap call5
SHAPES=(--batches 1,8,32,64 --keys 4096,65536,262144 --ks 512 --others "" --time-limit 80)
mkdir -p $R/ab
topk_ab 1 "head vote chain2 both" -- "${SHAPES[@]}"
mv $R/topk_*_1.* $R/ab/
snap call5
topk_ab 1 "both chain2 vote head" -- "${SHAPES[@]}"
for f in $R/topk_*_1.*; do mv "$f" "$R/ab/$(basename "${f/_1./_2.}")"; done  # round 2
snap call5
case $GPU:$(( $(date +%s) - T0 < 400 )) in
  *H200*:1) in_tree head $R/full_head.log 180 python3 scripts/topk_shapes.py --json $R/full_head.json \
            --time-limit 150 ;;
esac
pack call5
