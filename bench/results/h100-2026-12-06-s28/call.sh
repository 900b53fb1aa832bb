#!/usr/bin/env bash
# Session 28's calls: head = main with the lean walk (bench/results/h200-2026-12-06-s27/reader-lean-loop.patch: the
# one-token TMA cubins jump to the warpgroup's next tile within a pair and step a token's logits row) and the jump in
# fp8's pair and register-split cubins too. base = main (packed as in ../h200-2026-12-06-s27/call2.sh).
#   bash call.sh tests   head's GPU tests of the reader and the top-k while the peers build
#   bash call.sh ROUND   one process per tree (base, head; the second round head first) of the MTP bench over
#                        next_n 1, 2 and 4, shipped beside DeepGEMM, the keys-in-registers cubin (kr), the pair
#                        cubin (pair) and its register split (split), files mtp_<tree>_<ROUND>.*
#   run(command="bash bench/results/h100-2026-12-06-s28/call.sh tests 1", carry=[".whl", ".xfer/pk", ".xfer/ab"])
cd "$(dirname "$0")/../../.."
source scripts/device_call.sh
[ -d .xfer/base ] || tar -xJf .xfer/ab/trees.tar.xz -C .xfer
S=1:65536:equal:1,1:65536:equal:2,1:262144:equal:1,8:65536:uniform:2,32:65536:equal:1,32:65536:equal:2
S=$S,32:65536:equal:4,32:65536:pm30:2,128:16384:uniform:2,64:4096:equal:1,64:4096:pm30:2,64:8192:pm30:2
T='{"kr": {"kReaderWgKeyRegisters": 1}, "pair": {"kReaderWgTmaStages": 8, "kReaderWgPairs": 1},
    "split": {"kReaderWgTmaStages": 16, "kReaderWgConsumers": 4, "kReaderWgPairs": 1, "kReaderWgSplit": 1}}'
for step in "$@"; do
  case $step in
    tests) tests_beside_peers head tests/test_gpu_indexer.py tests/test_topk_gpu.py ;;
    *) trees="base head"; [ $((step % 2)) = 0 ] && trees="head base"
       peers_ready
       ab 1 "$trees" "mtp$step" 130 -- env MTP_ALTERNATIVES=0 MTP_SHAPES="$S" MTP_TUNES="$T" \
         python3 "$ROOT/scripts/reader_mtp_bench.py" {out} specs/dsv4/indexer_fp8.yaml
       for t in base head; do  # as mtp_<tree>_<ROUND> (reader_trees.py reads NAME_<tree>_*)
         for x in json log; do mv "$R/mtp${step}_${t}_1.$x" "$R/mtp_${t}_$step.$x" 2>/dev/null; done
       done ;;
  esac
  snap "call_$(echo "$@" | tr ' ' _)"
done
pack "call_$(echo "$@" | tr ' ' _)"
