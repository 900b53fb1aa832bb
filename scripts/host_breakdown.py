"""Host cost per call of each piece of torch.ops.kgen.norm_rope_store on this GPU (docs/ops.md, "Host cost").

    python scripts/host_breakdown.py [--tokens N] [--json FILE]

Median of 9 loops of 2000 calls each (no sync inside a loop), microseconds per call. Complements
`kgen bench`'s host_us_per_call with the pieces: the current-stream lookups, the generated Python
check alone, the dispatcher into an empty Python and the `.default` overload, and the native kernel's
counters."""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SPEC = ROOT / "specs" / "dsv4" / "indexer_fp8.yaml"


def per_call_us(fn, calls: int = 2000, loops: int = 9) -> float:
    import torch

    for _ in range(50):
        fn()
    out = []
    for _ in range(loops):
        torch.cuda.synchronize()
        t0 = time.perf_counter_ns()
        for _ in range(calls):
            fn()
        out.append((time.perf_counter_ns() - t0) / calls / 1000)
    torch.cuda.synchronize()
    return round(statistics.median(out), 3)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=4096)
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    import torch

    from kgen import fastpath, native, ops
    from kgen.bench import _empty_op, bench_inputs

    name = str(SPEC)
    v = ops.resolve(name)
    args = bench_inputs(v.spec, a.tokens, 0)
    torch.ops.kgen.norm_rope_store(name, *args)  # loads, installs the native kernel, learns the shape
    torch.ops.kgen.norm_rope_store(name, *args)
    check = fastpath.build_check(v.abi, v.spec, v.layout)
    empty = _empty_op(torch)
    op = torch.ops.kgen.norm_rope_store
    raw = ops.prepare(name, *args)
    kernel = ops._native_kernel()
    before = kernel.counts() if kernel else None
    pieces = {
        "torch.cuda.current_stream()": lambda: torch.cuda.current_stream(),
        "torch._C._cuda_getCurrentRawStream": lambda: torch._C._cuda_getCurrentRawStream(0),
        "generated Python check": lambda: check(*args),
        "empty Python op (packet)": lambda: empty(name, *args),
        "op (packet)": lambda: op(name, *args),
        "op (.default overload)": lambda: op.default(name, *args),
        "Python kernel (checked twin)": lambda: torch.ops.kgen._norm_rope_store_checked(name, *args),
        "raw launcher (prepare().run, ctypes)": raw,
    }
    out = {"tokens": a.tokens, "native": native.status(), "us_per_call": {k: per_call_us(f) for k, f in pieces.items()}}
    if kernel is not None and before is not None:
        after = kernel.counts()
        out["native_calls"] = {"launched": after[0] - before[0], "declined": after[1] - before[1]}
    text = json.dumps(out, indent=1)
    print(text)
    if a.json:
        a.json.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
