#!/usr/bin/env bash
# call5 of session 23, the session's last 330 s of device time. Tree words: main (7eda325) with words.patch (the
# sweep writes a bin it will rank as candidate_words, key above ~index, straight into the candidates' array, where
# the rank count rewrote them from keys and indices after one more barrier: one barrier and a shared-memory round
# trip off the critical path of every row, one CTA or a cluster's rank 0). 1. words' GPU tests beside the peers'
# builds; 2. words against head at B 1, 8, 32, 64 x 4K, 64K, 256K, k 512, equal and +-30 % (next_n 2), two rounds,
# the second in reverse order, a snap after each. Made from the repository root as:
#   rm -rf .xfer/words && mkdir -p .xfer/words && git archive HEAD kgen templates specs scripts tests pyproject.toml |
#     tar -x -C .xfer/words && patch -p1 -d .xfer/words < bench/results/h100-2026-12-06-s23/words.patch
#   run(command="bash bench/results/h100-2026-12-06-s23/call5.sh", carry=[".whl", ".xfer/pk", ".xfer/words"],
#       timeout_s=330)
# Read: python bench/results/h100-2026-12-06-s21/trees_table.py DIR/r/ab head words
cd "$(dirname "$0")/../../.."
source scripts/device_call.sh
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$GPU"
tests_beside_peers words tests/test_topk_gpu.py tests/test_topk_native.py
snap call5
SHAPES=(--batches 1,8,32,64 --keys 4096,65536,262144 --ks 512 --others "" --time-limit 60)
mkdir -p $R/ab
topk_ab 1 "head words" -- "${SHAPES[@]}"
mv $R/topk_*_1.* $R/ab/
snap call5
topk_ab 1 "words head" -- "${SHAPES[@]}"
for f in $R/topk_*_1.*; do mv "$f" "$R/ab/$(basename "${f/_1./_2.}")"; done  # round 2
pack call5
