#!/usr/bin/env bash
# call2 of session 25 (lean: the session's device time was going on refused starts): the reader's and the fused
# top-k's GPU tests on head (fee3d95: the next sequence's q staged ahead in a second buffer), then head against
# base (main before this session, e7d79c0) in alternating processes, one round, DeepGEMM beside, on four shapes
# (the device time left allowed no more).
#   base travels packed (the carry's limit): mkdir -p .xfer/base; git archive e7d79c0 kgen templates specs
#   pyproject.toml | tar -x -C .xfer/base; tar -cJf .xfer/ab/trees.tar.xz -C .xfer base
#   run(command="bash bench/results/h100-2026-12-06-s25/call2.sh", carry=[".whl", ".xfer/pk", ".xfer/ab"])
cd "$(dirname "$0")/../../.."
source scripts/device_call.sh
tar -xJf .xfer/ab/trees.tar.xz -C .xfer
tests_beside_peers head tests/test_gpu_indexer.py tests/test_topk_gpu.py
snap call2
S=64:4096:pm30:1,64:4096:pm30:2,128:4096:pm30:2,32:65536:equal:1
ab 1 "base head" short 60 -- env MTP_ALTERNATIVES=0 MTP_SHAPES="$S" \
  python3 $ROOT/scripts/reader_mtp_bench.py {out} specs/dsv4/indexer_fp8.yaml
pack call2
