#!/usr/bin/env bash
# call5 of session 24: row-pointer.patch on main (660b8e1): the keys-in-registers cubin steps its logits row pointer
# by max_seq_len per token where it derived each row's 64-bit address again (a token's body 155 -> 135 SASS
# instructions). 1. head's (the patch's) GPU tests beside the peers' builds; 2. the MTP bench in head and in landed
# (660b8e1), processes alternating, two rounds (the second in reverse order), keys_in_smem (the default cubin, the
# same in both trees) in every process as the anchor.
# Made from the repository root as (the working tree holding the patch):
#   mkdir -p .xfer/landed && git archive 660b8e1 kgen templates specs scripts pyproject.toml | tar -x -C .xfer/landed
#   run(command="bash bench/results/h100-2026-12-06-s24/call5.sh", carry=[".whl", ".xfer/pk", ".xfer/landed"],
#       timeout_s=600)
cd "$(dirname "$0")/../../.."
source scripts/device_call.sh
tests_beside_peers head tests/test_gpu_indexer.py
snap call5
export MTP_ALTERNATIVES=0 MTP_TUNES='{"keys_in_smem": {"kReaderWgKeyRegisters": 0}}'
export MTP_SHAPES="32:65536:equal:4,32:65536:equal:3,128:16384:uniform:4,64:32768:pm30:4,8:65536:equal:4,1:4096:equal:4,32:65536:equal:1"
ab 1 "landed head" mtp 150 -- python3 scripts/reader_mtp_bench.py {out} specs/dsv4/indexer_fp8.yaml
for f in $R/mtp_*_1.*; do mv "$f" "${f/_1./_r1.}"; done
ab 1 "head landed" mtp 150 -- python3 scripts/reader_mtp_bench.py {out} specs/dsv4/indexer_fp8.yaml
for f in $R/mtp_*_1.*; do mv "$f" "${f/_1./_r2.}"; done
pack call5
