#!/usr/bin/env bash
# Session 32's second call: main (.xfer/pk/main.tar.xz: git archive HEAD -- . ':!bench/results' ':!generated', HEAD
# = d8ae45b + docs) and head (this checkout's working tree: the evict-first cubin choosing its L2 policy on the device
# from the keys seq_lens give), the peers built on the machine. Asked for on an H200 first (needs_h200: the issues'
# goals are stated on it); three starts failed, so it runs on whatever comes.
# 1. main's top-k GPU tests and writer tests (tests/test_gpu.py: the bench's host record) while the peers build;
#    head's TMA reader tests (tests/test_gpu_indexer.py -k tma: the evict-first cubin under both policies);
# 2. the top-k bench on main: fp8 at B 1, 8, 32, 64 x 4K, 64K, 256K, k 512, equal (next_n 1) and +-30 % (next_n 2),
#    every row beside DeepGEMM + SGLang's top-k, with each shape's byte floor;
# 3. the reader, main and head alternating (scripts/reader_mtp_bench.py, MTP_ALTERNATIVES=0), the shipped cubin, the
#    same without the evict-first policy (ef0) and DeepGEMM, one process a tree: at 8 x 64K uniform (keys 40 MB,
#    under the L2, while 8 x max_seq_len overflows it: the host picks the evict-first cubin) and controls;
# 4. the ops' host cost per eager call (scripts/host_breakdown.py), while the call has time.
#   run(command="bash bench/results/h100-2026-12-07-s32/call2.sh", carry=[".whl", ".xfer/pk"], timeout_s=600)
# Read: python bench/results/h100-2026-12-06-s22/full_table.py DIR/r/topk_main.json
#       python bench/results/h100-2026-12-07-s32/floor_table.py DIR/r/topk_main.json
#       python bench/results/h100-2026-12-07-s32/ef_table.py DIR/r
cd "$(dirname "$0")/../../.."
[ -d .xfer/main ] || { mkdir -p .xfer/main && tar -xJf .xfer/pk/main.tar.xz -C .xfer/main; }
source scripts/device_call.sh
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
tests_beside_peers main tests/test_topk_gpu.py tests/test_topk_native.py tests/test_gpu.py
in_tree head $R/pytest_head.log 100 python3 -m pytest -p no:cacheprovider -q tests/test_gpu_indexer.py -k tma
grep -E "^(FAILED|ERROR)|passed|failed" "$R/pytest_head.log" | cut -c1-300 | head -8
snap call2
in_tree main $R/topk_main.log 120 python3 scripts/topk_shapes.py --json $R/topk_main.json --batches 1,8,32,64 \
  --keys 4096,65536,262144 --ks 512 --others "" --time-limit 100
snap call2
S=8:65536:uniform:1,8:65536:uniform:2,32:65536:uniform:1,128:16384:uniform:2,32:65536:equal:1,1:262144:equal:1
S=$S,64:4096:pm30:2
ab 1 "main head" ef 110 -- env MTP_ALTERNATIVES=0 MTP_SHAPES="$S" MTP_TUNES='{"ef0": {"kReaderWgEvictFirst": 0}}' \
  python3 scripts/reader_mtp_bench.py {out} specs/dsv4/indexer_fp8.yaml
snap call2
if (( $(date +%s) - T0 < 480 )); then
  in_tree main $R/host.log 80 python3 scripts/host_breakdown.py --json $R/host.json
fi
pack call2
