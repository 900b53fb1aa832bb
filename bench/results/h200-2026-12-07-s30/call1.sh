#!/usr/bin/env bash
# Session 30's call: main as it stands (cf8e98f, the host cost behind a busy GPU, host_parts.py), frozen as the tree
# "main" (.xfer/pk/main.tar.xz: git archive of that commit -- . ':!bench/results' ':!generated'), so that the working tree
# may move while the device is awaited.
# 1. the top-k's GPU tests (never run on the GPU since d36d46c / 04e164c / cf8e98f) while the peers build;
# 2. the three ops' host cost per eager call, with the GPU idle and, apart, behind a sleeping kernel
#    (scripts/host_breakdown.py: the second figure is the host's alone), and the fused op's chain with the driver's
#    launches stubbed out beside the real ops (host_parts.py: what the two cuLaunchKernelEx cost);
# 3. the top-k bench at B 1, 8, 32, 64 x 4K, 64K, 256K, k 512, equal and +-30 % (next_n 2), fp8, every row (the
#    fused op, its slots, DeepGEMM + torch.topk / SGLang's top-k, SGLang's paged top-k);
# 4. while the call has spent less than 400 s: session 28's reader decisions (bench/results/h100-2026-12-06-s28/
#    call2.sh: kr at next_n 2, the register split on 3 and 4 consumers) beside DeepGEMM, one process.
#   run(command="bash bench/results/h200-2026-12-07-s30/call1.sh", carry=[".whl", ".xfer/pk"], timeout_s=600)
# Read: python bench/results/h100-2026-12-06-s22/full_table.py DIR/r/topk_main.json
#       python bench/results/h200-2026-12-07-s29/slots_table.py DIR/r/topk_main.json
#       python bench/results/h100-2026-12-06-s28/tunes_trees.py DIR/r
cd "$(dirname "$0")/../../.."
[ -d .xfer/main ] || { mkdir -p .xfer/main && tar -xJf .xfer/pk/main.tar.xz -C .xfer/main; }
source scripts/device_call.sh
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
tests_beside_peers main tests/test_topk_gpu.py tests/test_topk_native.py
in_tree main $R/host.log 90 python3 scripts/host_breakdown.py --json $R/host.json
in_tree main $R/host_parts.log 60 python3 "$ROOT/bench/results/h200-2026-12-07-s30/host_parts.py" \
  --json $R/host_parts.json
snap call1
in_tree main $R/topk_main.log 160 python3 scripts/topk_shapes.py --json $R/topk_main.json --batches 1,8,32,64 \
  --keys 4096,65536,262144 --ks 512 --others "" --time-limit 140
snap call1
if (( $(date +%s) - T0 < 400 )); then
  S=1:65536:equal:1,1:65536:equal:2,8:65536:uniform:2,32:65536:equal:1,32:65536:equal:2,32:65536:pm30:2
  S=$S,128:16384:uniform:2,64:4096:pm30:2,128:65536:equal:2,8:4096:pm30:2
  T='{"kr": {"kReaderWgKeyRegisters": 1},
      "split": {"kReaderWgTmaStages": 16, "kReaderWgConsumers": 4, "kReaderWgPairs": 1, "kReaderWgSplit": 1},
      "split3": {"kReaderWgTmaStages": 12, "kReaderWgConsumers": 3, "kReaderWgPairs": 1, "kReaderWgSplit": 1}}'
  ab 1 main mtp2 150 -- env MTP_ALTERNATIVES=0 MTP_SHAPES="$S" MTP_TUNES="$T" \
    python3 scripts/reader_mtp_bench.py {out} specs/dsv4/indexer_fp8.yaml
fi
pack call1
