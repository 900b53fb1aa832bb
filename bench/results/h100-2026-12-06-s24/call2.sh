#!/usr/bin/env bash
# call2 of session 24: call1 again on the second form of kReaderWgKeyRegisters 1: the keys in the A registers,
# each token's heads as two m64n32 groups, the next issued before the last is summed (the working tree's default),
# against every token's wgmma reading the keys from shared memory (kReaderWgKeyRegisters 0, main's kernel).
# 1. the reader's GPU tests (tests/test_gpu_indexer.py: the default cubins and, among the TMA tunings, keys-in-smem)
# beside the peers' builds; 2. the reader's MTP bench beside DeepGEMM (fp8, next_n 1, 2, 4), both cubins and the peer
# in one process on the same tensors; 3. the same bench on more shapes (B 64 x 32K +-30 %, 8 x 64K equal).
#   run(command="bash bench/results/h100-2026-12-06-s24/call2.sh", carry=[".whl", ".xfer/pk"], timeout_s=600)
cd "$(dirname "$0")/../../.."
source scripts/device_call.sh
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$GPU"
tests_beside_peers head tests/test_gpu_indexer.py
snap call2
TUNES='{"keys_in_smem": {"kReaderWgKeyRegisters": 0}}'
in_tree head $R/mtp.log 150 env MTP_ALTERNATIVES=0 MTP_TUNES="$TUNES" python3 scripts/reader_mtp_bench.py \
  $R/mtp.json specs/dsv4/indexer_fp8.yaml
snap call2
in_tree head $R/mtp_more.log 120 env MTP_ALTERNATIVES=0 MTP_TUNES="$TUNES" \
  MTP_SHAPES="64:32768:pm30:1,64:32768:pm30:2,64:32768:pm30:4,8:65536:equal:1,8:65536:equal:2,8:65536:equal:4,1:4096:equal:1,1:4096:equal:2" \
  python3 scripts/reader_mtp_bench.py $R/mtp_more.json specs/dsv4/indexer_fp8.yaml
pack call2
