#!/usr/bin/env bash
# Prepared in session 35, not run (no device was lent after call2): the wgmma paths' dynamic shared memory declared
# 1024-B aligned (aligned-smem.patch), so that the carve-up's base needs no runtime pad, beside main.
# On the CPU (NVRTC 13.0, nvdisasm): fp8's keys-in-registers cubin forms its q descriptors in uniform registers
# (`UMOV UMOV UIADD3` between two wgmma; 47 -> 9 R2UR), a token 137 -> 133 instructions, 92 -> 88 registers; the
# one-token TMA cubin 2847 -> 2707 instructions; fp4's cubins 3945 -> 3916 and 3897 -> 3872; but fp8's pair cubin
# (loaded by no launch shape) has its wgmma serialized (C7511). DeepGEMM and CUTLASS declare theirs so; a GPU whose
# dynamic shared memory did not start 1024-B aligned would read a wrong swizzle, which the tests below would show.
# 1. the patched tree's reader GPU tests (fp8, fp4, bf16: ragged lengths, next_n 1-4, the TMA and cp.async variants);
# 2. main and the patched tree in alternating processes, two rounds: the shipped launch of fp8, fp4 and bf16 at
#    next_n 1 and 4 (scripts/reader_mtp_bench.py).
#   run(command="bash bench/results/h100-2026-12-07-s35/call4.sh", carry=[".whl", ".xfer/pk"], timeout_s=450)
# Read: python bench/results/h100-2026-12-06-s26/reader_trees.py DIR/r mtp main aligned
cd "$(dirname "$0")/../../.."
HERE=bench/results/h100-2026-12-07-s35
mkdir -p .xfer/main .xfer/aligned
cp -r kgen templates specs scripts .xfer/main/
cp -r kgen templates specs scripts tests pyproject.toml .xfer/aligned/
(cd .xfer/aligned && patch -s -p1 < "../../$HERE/aligned-smem.patch")
NO_PEERS=1 source scripts/device_call.sh
export KGEN_BENCH_PEER=0
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
in_tree aligned $R/pytest_aligned.log 150 python3 -m pytest -p no:cacheprovider -rs tests/test_gpu_indexer.py \
  -k "kernel_matches or tma_variant_matches or keys_in_registers"
grep -E "^(FAILED|ERROR)|passed|failed" "$R/pytest_aligned.log" | cut -c1-300 | head -8
snap call4
S=32:65536:equal:1,32:65536:equal:4,128:16384:uniform:1,128:16384:uniform:4,1:65536:equal:1,1:65536:equal:4
ab 2 "main aligned" mtp 100 -- env MTP_ALTERNATIVES=0 MTP_SHAPES=$S python3 scripts/reader_mtp_bench.py {out} \
  specs/dsv4/indexer_fp8.yaml specs/dsv4/indexer_fp4.yaml specs/indexer_bf16.yaml
pack call4
