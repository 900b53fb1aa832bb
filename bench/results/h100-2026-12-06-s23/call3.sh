#!/usr/bin/env bash
# call3 of session 23. call2's ncu: at 8 x 64K, k 2048 the rank count of rank 0's candidates (one thread a
# candidate, n^2 64-bit compares, ~4.7 instructions a word on one dependent chain) ran 69K warp instructions against
# 9.8K at k 512, on 8 SMs. Trees: sub64 (sub64.patch: a word above another by the sign of their 64-bit difference,
# which the keys of one coarse bin bound below 2^63, counted on two chains: ~4 instructions a word, two short
# chains), cap128 (kgen/topk_plan.py's TOPK_RANK_CAP 512 -> 128: more than 128 candidates refined instead), both.
# 1. sub64's GPU tests beside the peers' builds; 2. the four trees at B 1, 8, 32, 64 x 4K, 64K, 256K, k 512, equal
# and +-30 % (next_n 2), and at k 2048 (B 1, 8 x 64K, 256K), two rounds, the second in reverse order. Made from the
# repository root as:
#   P=bench/results/h100-2026-12-06-s23
#   for t in sub64 cap128 both; do rm -rf .xfer/$t && mkdir -p .xfer/$t &&
#     git archive HEAD kgen templates specs scripts tests pyproject.toml | tar -x -C .xfer/$t; done
#   patch -p1 -d .xfer/sub64 < $P/sub64.patch && patch -p1 -d .xfer/both < $P/sub64.patch
#   for t in cap128 both; do sed -i 's/^TOPK_RANK_CAP = 512 /TOPK_RANK_CAP = 128 /' .xfer/$t/kgen/topk_plan.py
#     rm -rf .xfer/$t/tests .xfer/$t/pyproject.toml; done  # within the call's 64 MiB: only sub64 runs tests
#   run(command="bash bench/results/h100-2026-12-06-s23/call3.sh", carry=[".whl", ".xfer/pk", ".xfer/sub64",
#       ".xfer/cap128", ".xfer/both"], timeout_s=600)
# Read: python bench/results/h100-2026-12-06-s21/trees_table.py DIR/r/ab head sub64 cap128 both (and DIR/r/k2048)
cd "$(dirname "$0")/../../.."
source scripts/device_call.sh
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$GPU"
tests_beside_peers sub64 tests/test_topk_gpu.py tests/test_topk_native.py
snap call3
SHAPES=(--batches 1,8,32,64 --keys 4096,65536,262144 --ks 512 --others "" --time-limit 80)
K2048=(--batches 1,8 --keys 65536,262144 --ks 2048 --others "" --time-limit 60)
mkdir -p $R/ab $R/k2048
for round in 1 2; do
  trees="head sub64 cap128 both"
  [ $round = 2 ] && trees="both cap128 sub64 head"
  topk_ab 1 "$trees" -- "${SHAPES[@]}"
  for f in $R/topk_*_1.*; do mv "$f" "$R/ab/$(basename "${f/_1./_$round.}")"; done
  topk_ab 1 "$trees" -- "${K2048[@]}"
  for f in $R/topk_*_1.*; do mv "$f" "$R/k2048/$(basename "${f/_1./_$round.}")"; done
  snap call3
done
pack call3
