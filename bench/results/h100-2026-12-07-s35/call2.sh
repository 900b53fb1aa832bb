#!/usr/bin/env bash
# Session 35's second call, an experiment (not landed as such): each MTP token of a held tile as one m64n64 group
# into one of two accumulator arrays, the next token's issued before the warpgroup sums the last
# (kReaderWgKeyRegisters 2 in this call's tree, wg::score_tokens), against the shipped m64n32 halves
# (kReaderWgKeyRegisters 1, wg::score_halves), one process, the same tensors:
# Apply token-groups.patch to main (5ffa17a) first: `git apply bench/results/h100-2026-12-07-s35/token-groups.patch`.
# 1. GPU tests of the experiment's cubins against the Torch path (tests/test_zz_tmp_db_gpu.py of the call's tree);
# 2. fp8: the shipped launch; the halves on 3 consumer warpgroups, one CTA an SM (kr_c3); the token groups on 3
#    consumers (128 registers; two arrays do not fit the 96 of 2 CTAs an SM) on rings of 6 and 12;
# 3. fp4: the shipped launch (halves on a ring of 2 at next_n >= 2); the token groups on a ring of 2 (162 registers,
#    3 CTAs an SM: the experiment's __launch_bounds__ asks for 3 where the 1-token plan says 5).
#   run(command="bash bench/results/h100-2026-12-07-s35/call2.sh", carry=[".whl", ".xfer/pk"], timeout_s=420)
# Read: python bench/results/h100-2026-12-06-s24/mtp_table.py DIR/r/fp8.json kr_c3/shipped db_c3/shipped ...
cd "$(dirname "$0")/../../.."
NO_PEERS=1 source scripts/device_call.sh
export KGEN_BENCH_PEER=0
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
in_tree head $R/pytest_db.log 150 python3 -m pytest -p no:cacheprovider -rs tests/test_zz_tmp_db_gpu.py
grep -E "^(FAILED|ERROR)|passed|failed" "$R/pytest_db.log" | cut -c1-300 | head -8
snap call2
S=32:65536:equal:1,32:65536:equal:2,32:65536:equal:3,32:65536:equal:4,128:16384:uniform:4,32:65536:pm30:4,1:65536:equal:4,128:4096:equal:4
T='{"kr_c3": {"kReaderWgKeyRegisters": 1, "kReaderWgConsumers": 3, "kReaderWgTmaStages": 6},'
T="$T"' "db_c3": {"kReaderWgKeyRegisters": 2, "kReaderWgConsumers": 3, "kReaderWgTmaStages": 6},'
T="$T"' "db_c3_12": {"kReaderWgKeyRegisters": 2, "kReaderWgConsumers": 3, "kReaderWgTmaStages": 12}}'
in_tree head $R/fp8.log 170 env MTP_ALTERNATIVES=0 MTP_SHAPES="$S" MTP_TUNES="$T" \
  python3 scripts/reader_mtp_bench.py $R/fp8.json specs/dsv4/indexer_fp8.yaml
cut -c1-250 $R/fp8.log | tail -9
snap call2
S=32:65536:equal:2,32:65536:equal:4,128:16384:uniform:4,32:65536:pm30:4,1:65536:equal:4
T='{"db_s2": {"kReaderWgKeyRegisters": 2, "kReaderWgStages": 2}}'
in_tree head $R/fp4.log 90 env MTP_ALTERNATIVES=0 MTP_SHAPES="$S" MTP_TUNES="$T" \
  python3 scripts/reader_mtp_bench.py $R/fp4.json specs/dsv4/indexer_fp4.yaml
cut -c1-250 $R/fp4.log | tail -6
pack call2
