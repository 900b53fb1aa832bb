#!/usr/bin/env bash
# call2 of session 22: the one-CTA path's dependent chain shortened. Trees: main (6eee637, 4K keys a cluster CTA),
# lean (main + the row's sequence by a shift where next_n is a power of two, its visible length in 32-bit arithmetic,
# the coarse threshold bin's value range built by the thread that finds the bin instead of by every thread), lean2
# (lean + the first 64 KB of a one-CTA row prefetched into L1 while seq_lens is read). 1. lean's top-k GPU tests
# beside the peers' builds; 2. the top-k alone and fused, fp8 k 512, B 1, 8, 32, 64 x 4K, 64K, 256K, equal lengths
# (next_n 1) and +-30 % (next_n 2), two rounds; 3. ncu of lean's top-k and SGLang's at 1 x 4K and 1 x 64K; 4. on an
# H200 only: main's whole top-k bench (scripts/topk_shapes.py's
# default shapes).
#   mkdir -p .xfer/main && git archive 6eee637 kgen templates specs scripts | tar -x -C .xfer/main; lean and lean2
#   the same with this folder's lean.patch, then lean2-prefetch.patch, applied (`git apply --directory` not needed:
#   `patch -p1 -d .xfer/lean < lean.patch`); lean also with tests/ and pyproject.toml, for its GPU tests
#   run(command="bash bench/results/h100-2026-12-06-s22/call2.sh", carry=[".whl", ".xfer/pk", ".xfer/main",
#       ".xfer/lean", ".xfer/lean2"], timeout_s=600)
# Read: python bench/results/h100-2026-12-06-s21/trees_table.py DIR/r main lean lean2
cd "$(dirname "$0")/../../.."
source scripts/device_call.sh
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$GPU"
( in_tree lean $R/pytest_topk_gpu.log 200 python3 -m pytest -p no:cacheprovider -rs tests/test_topk_gpu.py \
  tests/test_topk_native.py ) &
PT=$!
peers_ready
wait $PT; echo "tests done $(el)"
grep -E "^(FAILED|ERROR)|passed|failed" $R/pytest_topk_gpu.log | cut -c1-300 | head -12
snap call2
topk_ab 2 "main lean lean2" -- --batches 1,8,32,64 --keys 4096,65536,262144 --ks 512 --others "" --time-limit 45
snap call2
topk_ncu lean 1:4096:equal:1 1:65536:equal:1
snap call2
case $GPU in
  *H200*) in_tree main $R/full_main.log 180 python3 scripts/topk_shapes.py --json $R/full_main.json \
            --time-limit 150 ;;
esac
pack call2
