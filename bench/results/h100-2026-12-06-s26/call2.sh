#!/usr/bin/env bash
# call2 of session 26: the TMA variant's other CTA shapes on short rows, in one process on the same tensors beside
# the shipped cubin (2 consumer warpgroups, a ring of 8: 2 CTAs an SM) and DeepGEMM: 1 consumer on rings of 4 and 6
# (4 and 3 CTAs an SM), 2 on a ring of 4, 3 on 9 and 4 on 8 (one CTA an SM, as DeepGEMM's 4 math warpgroups), the
# keys in registers, and (MTP_ALTERNATIVES) the pair cubin and its register split. Two processes, the second on the
# shapes in reverse order. Main's kernel (e7d79c0).
#   run(command="bash bench/results/h100-2026-12-06-s26/call2.sh", carry=[".whl", ".xfer/pk"])
cd "$(dirname "$0")/../../.."
source scripts/device_call.sh
peers_ready
S=1:4096:equal:1,1:65536:equal:1,8:4096:equal:1,8:4096:pm30:2,32:4096:equal:1,32:4096:pm30:2,64:4096:equal:1
S=$S,64:4096:equal:2,64:4096:pm30:1,64:4096:pm30:2,128:4096:pm30:2,64:8192:pm30:2,32:65536:equal:1
S=$S,128:16384:uniform:2
T='{"c1s4": {"kReaderWgConsumers": 1, "kReaderWgTmaStages": 4},'
T=$T' "c1s6": {"kReaderWgConsumers": 1, "kReaderWgTmaStages": 6},'
T=$T' "c2s4": {"kReaderWgConsumers": 2, "kReaderWgTmaStages": 4},'
T=$T' "c3s9": {"kReaderWgConsumers": 3, "kReaderWgTmaStages": 9},'
T=$T' "c4s8": {"kReaderWgConsumers": 4, "kReaderWgTmaStages": 8},'
T=$T' "keyreg": {"kReaderWgKeyRegisters": 1}}'
R2=$(echo "$S" | tr ',' '\n' | tac | paste -sd,)
for round in 1 2; do
  [ $round = 1 ] && SH=$S || SH=$R2
  in_tree head $R/shapes_$round.log 200 env MTP_SHAPES="$SH" MTP_TUNES="$T" \
    python3 scripts/reader_mtp_bench.py $R/shapes_$round.json specs/dsv4/indexer_fp8.yaml
  snap call2
done
pack call2
