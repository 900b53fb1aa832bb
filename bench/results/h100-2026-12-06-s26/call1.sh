#!/usr/bin/env bash
# call1 of session 26: session 25's second q buffer (qa: branch reader-q-ahead, fee3d95) on a GPU for the first
# time, and head (qa + the share's search over the lengths pass 1 loaded): the reader's and the fused top-k's GPU
# tests on head, then base (main's kernel, e7d79c0), qa and head in alternating processes, two rounds, DeepGEMM
# beside, on session 25's short rows and the MTP bench's long ones; on head, the other cubins of short rows at
# next_n 2.
#   base and qa travel packed (the carry's limit): mkdir -p .xfer/base .xfer/qa; git archive e7d79c0 kgen templates
#   specs pyproject.toml | tar -x -C .xfer/base (fee3d95 likewise into .xfer/qa);
#   tar -cJf .xfer/ab/trees.tar.xz -C .xfer base qa
#   run(command="bash bench/results/h100-2026-12-06-s26/call1.sh", carry=[".whl", ".xfer/pk", ".xfer/ab"])
cd "$(dirname "$0")/../../.."
source scripts/device_call.sh
tar -xJf .xfer/ab/trees.tar.xz -C .xfer
tests_beside_peers head tests/test_gpu_indexer.py tests/test_topk_gpu.py
snap call1
S=8:4096:equal:1,8:4096:pm30:2,32:4096:pm30:2,64:4096:equal:1,64:4096:equal:2,64:4096:pm30:1,64:4096:pm30:2
S=$S,128:4096:pm30:2,64:8192:pm30:2,1:65536:equal:1,32:65536:equal:1,32:65536:pm30:2,128:16384:uniform:2
ab 2 "base qa head" short 75 -- env MTP_ALTERNATIVES=0 MTP_SHAPES="$S" \
  python3 $ROOT/scripts/reader_mtp_bench.py {out} specs/dsv4/indexer_fp8.yaml
snap call1
# the measurement alternatives on short rows at next_n 2: the pair cubin, its register split, the keys in registers
A=8:4096:pm30:2,32:4096:pm30:2,64:4096:equal:2,64:4096:pm30:2,128:4096:pm30:2,64:8192:pm30:2
in_tree head $R/alternatives.log 90 env MTP_SHAPES="$A" MTP_TUNES='{"keys": {"kReaderWgKeyRegisters": 1}}' \
  python3 scripts/reader_mtp_bench.py $R/alternatives.json specs/dsv4/indexer_fp8.yaml
pack call1
