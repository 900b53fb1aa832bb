"""The fused top-k op's host cost on a GPU machine, the driver's launches apart from the rest: the chain of
tests/test_topk_native.py (the reader's and the top-k's native kernels, chained as kgen.ops.topk chains them) on
test ops' CUDA keys with CUDA tensors, its entry points swapped for C stubs (launch: return 0), beside the real
ops (torch.ops.kgen.*: the same native code with libcuda's cuLaunchKernelEx). The difference is the driver's two
launches; the rest (torch's dispatcher, the argument checks, two CUDA caching allocator calls) is what the stubbed
chain costs. fp8, 1 x 4K keys, k 512; each way timed with the GPU idle between loops and behind a sleeping kernel
(scripts/host_breakdown.py's timed: kgen.host_cost.time_ways). Run from a tree's root:

    python bench/results/h200-2026-12-07-s30/host_parts.py [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(Path.cwd() / "tests"), str(Path.cwd() / "scripts"), str(HERE.parent / "topk2-2026-12-03")]

from host_breakdown import timed  # noqa: E402
from host_cpu_chain import c_stubs  # noqa: E402
from test_topk_native import FP8, Chained  # noqa: E402

from kgen import reader_check as RC  # noqa: E402
from kgen.resolve import resolve_spec  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    import torch

    k = 512
    c = Chained(c_stubs(), device="cuda")
    case = RC.make_case(resolve_spec(FP8), [4096], seed=0, device="cuda")
    lens = case[4]
    c.op(FP8, *case, k)  # the twins teach both shapes
    stub_logits = c.logits_op(FP8, *case)
    real = torch.ops.kgen
    real.indexer_topk(FP8, *case, k)
    logits = real.indexer_logits(FP8, *case)
    torch.cuda.synchronize()
    ways = {
        "stub chain (one dispatch, no driver)": lambda: c.op(FP8, *case, k),
        "stub reader op alone": lambda: c.logits_op(FP8, *case),
        "stub top-k op alone": lambda: c.select_op(FP8, stub_logits, lens, k),
        "op indexer_topk": lambda: real.indexer_topk(FP8, *case, k),
        "op indexer_logits": lambda: real.indexer_logits(FP8, *case),
        "op indexer_topk_logits": lambda: real.indexer_topk_logits(FP8, logits, lens, k),
        "torch.empty_like of the logits": lambda: torch.empty_like(logits),
    }
    before = c.chain.counts()
    out = timed(ways)
    after = c.chain.counts()
    out["stub_chain_calls"] = {"native": after[0] - before[0], "declined": after[1] - before[1]}
    text = json.dumps(out, indent=1)
    print(text)
    if a.json:
        a.json.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
