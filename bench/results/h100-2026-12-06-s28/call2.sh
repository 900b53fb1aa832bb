#!/usr/bin/env bash
# Session 28's second call: main (the jump in the keys-in-registers and fp8 pair cubins) alone, three processes of the
# MTP bench over next_n 1 and 2, the shipped cubin beside DeepGEMM, the keys-in-registers cubin (kr: its rule is
# next_n >= 3, set on the H200 before the jump), the register split on 4 consumers (split) and on 3 (split3: 160
# registers a consumer by setmaxnreg). Files mtp2_head_<round>.*
#   run(command="bash bench/results/h100-2026-12-06-s28/call2.sh", carry=[".whl", ".xfer/pk"])
cd "$(dirname "$0")/../../.."
source scripts/device_call.sh
S=1:65536:equal:1,1:65536:equal:2,8:65536:uniform:2,32:65536:equal:1,32:65536:equal:2,32:65536:pm30:2
S=$S,128:16384:uniform:2,64:4096:pm30:2,64:8192:pm30:2,128:65536:equal:2,8:4096:pm30:2,128:4096:pm30:2
T='{"kr": {"kReaderWgKeyRegisters": 1},
    "split": {"kReaderWgTmaStages": 16, "kReaderWgConsumers": 4, "kReaderWgPairs": 1, "kReaderWgSplit": 1},
    "split3": {"kReaderWgTmaStages": 12, "kReaderWgConsumers": 3, "kReaderWgPairs": 1, "kReaderWgSplit": 1}}'
peers_ready
ab 3 head mtp2 150 -- env MTP_ALTERNATIVES=0 MTP_SHAPES="$S" MTP_TUNES="$T" \
  python3 "$ROOT/scripts/reader_mtp_bench.py" {out} specs/dsv4/indexer_fp8.yaml
pack call2
