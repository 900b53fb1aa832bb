#!/usr/bin/env bash
# call2 of session 27: head = main with reader-lean-loop.patch applied (the one-token TMA cubins' walk jumps to the
# warpgroup's next tile within a pair, and a token's logits row is stepped, not re-derived): its GPU tests, then
# base (main: the ring of 4) and head in alternating processes, two rounds (the second head first, its files
# mtpr_*), DeepGEMM and (kr) the keys-in-registers cubin beside, over the MTP bench's shapes.
#   base travels packed: mkdir -p .xfer/base; git archive main kgen templates specs scripts pyproject.toml |
#   tar -x -C .xfer/base; tar -cJf .xfer/ab/trees.tar.xz -C .xfer base
#   run(command="bash bench/results/h200-2026-12-06-s27/call2.sh", carry=[".whl", ".xfer/pk", ".xfer/ab"])
cd "$(dirname "$0")/../../.."
source scripts/device_call.sh
tar -xJf .xfer/ab/trees.tar.xz -C .xfer
tests_beside_peers head tests/test_gpu_indexer.py tests/test_topk_gpu.py
snap call2
S=1:65536:equal:1,1:65536:equal:2,1:262144:equal:1,8:65536:uniform:2,32:65536:equal:1,32:65536:equal:2
S=$S,32:65536:equal:4,32:65536:pm30:2,128:16384:uniform:2,8:4096:pm30:2,64:4096:equal:1,64:4096:pm30:2
S=$S,128:4096:pm30:2,64:8192:pm30:2
T='{"kr": {"kReaderWgKeyRegisters": 1}}'
ab 1 "base head" mtp 100 -- env MTP_ALTERNATIVES=0 MTP_SHAPES="$S" MTP_TUNES="$T" \
  python3 $ROOT/scripts/reader_mtp_bench.py {out} specs/dsv4/indexer_fp8.yaml
snap call2
ab 1 "head base" mtpr 100 -- env MTP_ALTERNATIVES=0 MTP_SHAPES="$S" MTP_TUNES="$T" \
  python3 $ROOT/scripts/reader_mtp_bench.py {out} specs/dsv4/indexer_fp8.yaml
for t in base head; do  # the second round as mtp_<tree>_2 (reader_trees.py reads NAME_<tree>_*)
  for x in json log; do mv "$R/mtpr_${t}_1.$x" "$R/mtp_${t}_2.$x" 2>/dev/null; done
done
pack call2
