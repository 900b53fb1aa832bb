#!/usr/bin/env bash
# call2 of session 16 (prepared, not run): the three trees of call1 timed, fp4_ring.py on the shipped ring (fp8's
# reader beside fp4's in each process, same tensors: 32 x 64K and 128 x 16K uniform and 1 x 64K at next_n 1,
# 32 x 64K at next_n 2; cold and in graphs), the trees' processes alternating, two rounds.
#   run(command="bash bench/results/h200-2026-12-05-s16/call2.sh", carry=[".whl", ".xfer/pk", ".xfer/base",
#       ".xfer/cvt"], timeout_s=480)
cd "$(dirname "$0")/../../.."
source scripts/device_call.sh
export FP4_RINGS=3
ab 2 "base cvt head" ring 70 -- python3 $ROOT/bench/results/h200-2026-12-05-s15/fp4_ring.py {out}
grep -h " x " $R/ring_*.log | cut -c1-230
pack call2
