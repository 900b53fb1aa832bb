#!/usr/bin/env bash
# call3 of session 24: the keys-in-registers cubin (kReaderWgKeyRegisters 1: call2's form) as MTP launches pick it
# (kgen.reader_plan.READER_WG_KEY_REGISTER_TOKENS: next_n >= 3 for fp8), the default cubin (0) for the rest.
# 1. the reader's GPU tests (tests/test_gpu_indexer.py: the shipped picks, and keys-in-registers at every next_n among
# the TMA tunings) beside the peers' builds; 2. the reader's MTP bench beside DeepGEMM (fp8, next_n 1-4), the shipped
# pick, both cubins forced and the peer in one process on the same tensors, on call1's shapes plus next_n 3.
#   run(command="bash bench/results/h100-2026-12-06-s24/call3.sh", carry=[".whl", ".xfer/pk"], timeout_s=600)
cd "$(dirname "$0")/../../.."
source scripts/device_call.sh
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$GPU"
tests_beside_peers head tests/test_gpu_indexer.py
snap call3
TUNES='{"keys_in_smem": {"kReaderWgKeyRegisters": 0}, "keys_in_regs": {"kReaderWgKeyRegisters": 1}}'
S=""
for shape in 32:65536:equal 128:16384:uniform 64:32768:pm30 8:65536:equal; do
  for n in 1 2 3 4; do S="$S,$shape:$n"; done
done
S="${S#,},1:65536:equal:1,1:65536:equal:2,1:4096:equal:1,1:4096:equal:2,1:4096:equal:4"
in_tree head $R/mtp.log 240 env MTP_ALTERNATIVES=0 MTP_TUNES="$TUNES" MTP_SHAPES="$S" \
  python3 scripts/reader_mtp_bench.py $R/mtp.json specs/dsv4/indexer_fp8.yaml
pack call3
