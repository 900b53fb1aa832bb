#!/usr/bin/env bash
# call1 of session 18. Trees (`git archive main kgen templates specs scripts tests` + pyproject.toml, in .xfer/):
# base = main with session 17's top-k cluster GPU test applied; occ2 = base, the top-k's registers bounded for two
# 1024-thread CTAs an SM (`__launch_bounds__(kTopkThreads, 2)`: 32 registers); t512 = base, 512-thread CTAs bounded for
# two an SM (64 registers); occ2 and t512 hold a cluster CTA's slice in shared memory only within 115712 B (two
# CTAs an SM); lean = base, the coarse histograms binning each value from its bits (value_bin: no order key where
# none is stored) and the coarse threshold's scan unrolled for its 2 bins a thread.
# 1. each tree's top-k GPU tests (session 17's cluster test among them), the four at once;
# 2. the top-k over 30 shapes (B 1-64 x 4K-256K keys, equal and +-30 % next_n 2, k 512, fp8), SGLang's top-k and
#    DeepGEMM's logits beside, ROUNDS (1) rounds of the trees in the order ORDER.
# A later round alone: NAME=call2 PYTEST=0 ROUNDS=1 ORDER="occ2 lean t512 base" bash ...call1.sh
#   run(command="bash bench/results/h100-2026-12-05-s18/call1.sh", kind="nvidia-h100-x1",
#       carry=[".whl", ".xfer/pk", ".xfer/base", ".xfer/occ2", ".xfer/t512", ".xfer/lean"], timeout_s=600)
cd "$(dirname "$0")/../../.."
source scripts/device_call.sh
if [ "${PYTEST:-1}" = 1 ]; then  # the trees' at once (the compiles are most of it), before any timing
  pids=()
  for t in base occ2 t512 lean; do
    in_tree $t $R/pytest_topk_gpu_$t.log 200 python3 -m pytest -q -s -p no:cacheprovider -rs tests/test_topk_gpu.py &
    pids+=($!)
  done
  wait "${pids[@]}"  # not the peers' builds (peers_ready waits for those)
  grep -E "^(FAILED|ERROR)|passed|failed|clusters of" $R/pytest_topk_gpu_*.log | cut -c1-300 | head -20
fi
snap() { tar -czf "$OUT/${NAME:-call1}.tgz" -C "$OUT" r; }  # what a call cut short by the device time still returns
snap
peers_ready
for round in $(seq "${ROUNDS:-1}"); do
  for t in ${ORDER:-base t512 lean occ2}; do
    in_tree $t $R/topk_${t}_$round.log 110 python3 $ROOT/scripts/topk_shapes.py --json $R/topk_${t}_$round.json \
      --batches 1,8,16,32,64 --keys 4096,65536,262144 --ks 512 --others "" --time-limit 80
    snap
  done
done
