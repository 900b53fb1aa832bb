#!/usr/bin/env bash
# call2 of session 26: head = the share's search with one scan a round of 128 pairs (a lane's four pairs
# consecutive; wg::Work::Search::round): its GPU tests, then base (main's kernel, e7d79c0) and head in alternating
# processes, two rounds, DeepGEMM beside. Then, in head, the TMA variant's other CTA shapes on short rows, in one
# process on the same tensors beside the shipped cubin (2 consumer warpgroups, a ring of 8: 2 CTAs an SM) and
# DeepGEMM: 1 consumer on rings of 4 and 6 (4 and 3 CTAs an SM), 2 on a ring of 4, 3 on 9 and 4 on 8 (one CTA an
# SM, as DeepGEMM's 4 math warpgroups), the keys in registers, and (MTP_ALTERNATIVES) the pair cubin and its
# register split.
#   base travels packed: mkdir -p .xfer/base; git archive e08e963 kgen templates specs pyproject.toml |
#   tar -x -C .xfer/base; tar -cJf .xfer/ab/trees.tar.xz -C .xfer base
#   run(command="bash bench/results/h100-2026-12-06-s26/call2.sh", carry=[".whl", ".xfer/pk", ".xfer/ab"])
cd "$(dirname "$0")/../../.."
source scripts/device_call.sh
tar -xJf .xfer/ab/trees.tar.xz -C .xfer
tests_beside_peers head tests/test_gpu_indexer.py tests/test_topk_gpu.py
snap call2
S=8:4096:equal:1,8:4096:pm30:2,32:4096:pm30:2,64:4096:equal:1,64:4096:equal:2,64:4096:pm30:1,64:4096:pm30:2
S=$S,128:4096:pm30:2,64:8192:pm30:2,1:65536:equal:1,32:65536:equal:1,32:65536:pm30:2,128:16384:uniform:2
S=$S,256:4096:pm30:1,512:2048:uniform:1
ab 2 "base head" short 75 -- env MTP_ALTERNATIVES=0 MTP_SHAPES="$S" \
  python3 $ROOT/scripts/reader_mtp_bench.py {out} specs/dsv4/indexer_fp8.yaml
snap call2
S=1:4096:equal:1,8:4096:equal:1,8:4096:pm30:2,32:4096:equal:1,32:4096:pm30:2,64:4096:equal:1,64:4096:equal:2
S=$S,64:4096:pm30:1,64:4096:pm30:2,128:4096:pm30:2,64:8192:pm30:2,32:65536:equal:1,128:16384:uniform:2
T='{"c1s4": {"kReaderWgConsumers": 1, "kReaderWgTmaStages": 4},'
T=$T' "c1s6": {"kReaderWgConsumers": 1, "kReaderWgTmaStages": 6},'
T=$T' "c2s4": {"kReaderWgConsumers": 2, "kReaderWgTmaStages": 4},'
T=$T' "c3s9": {"kReaderWgConsumers": 3, "kReaderWgTmaStages": 9},'
T=$T' "c4s8": {"kReaderWgConsumers": 4, "kReaderWgTmaStages": 8},'
T=$T' "keyreg": {"kReaderWgKeyRegisters": 1}}'
in_tree head $R/shapes.log 200 env MTP_SHAPES="$S" MTP_TUNES="$T" \
  python3 scripts/reader_mtp_bench.py $R/shapes.json specs/dsv4/indexer_fp8.yaml
pack call2
