"""Host cost per eager call of both ops on this GPU, and of each piece (docs/ops.md, "Host cost").

    python scripts/host_breakdown.py [--tokens N] [--batch B --keys K] [--json FILE]

Prints `host_us_per_call` of torch.ops.kgen.norm_rope_store (the writer, N tokens), of
torch.ops.kgen.indexer_logits (the reader, B sequences of K keys, fp8) and of torch.ops.kgen.indexer_topk
(the reader then the top-k, the same inputs, k = --k), measured the same way: kgen.host_cost.time_ways' median of
HOST_LOOPS loops of HOST_CALLS calls each, microseconds per call (no sync inside a loop, and few enough
calls that the launch queue never fills). The pieces: the current-stream lookups, the generated Python
check alone, the dispatcher into an empty Python op, the Python kernel (the checked twin each native
kernel falls back to), and the native kernels' counters (launched natively vs declined; the top-k: its
native chain's). Every piece is timed twice: with the GPU idle when each loop starts (`us_per_call`) and behind a
sleeping kernel (`us_per_call_gpu_busy`: the host's cost alone, whatever the kernel's length). `kgen bench`
records the ops' figures (the writer's `host_us_per_call`, the read side's `reader.host`)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SPEC = ROOT / "specs" / "dsv4" / "indexer_fp8.yaml"


def timed(pieces: dict) -> dict:
    """Each piece's microseconds per call (kgen.host_cost.time_ways' medians) with the GPU idle when each loop
    starts and, apart, behind a busy GPU."""
    import torch

    from kgen.host_cost import idle_and_busy

    return idle_and_busy(torch, pieces)


def reader_cost(batch: int, keys: int) -> dict:
    """The reader op's host cost: B sequences of `keys` keys of the fp8 indexer layout (reader_check's
    inputs: pages written by the writer), eager calls of torch.ops.kgen.indexer_logits."""
    import torch

    from kgen import fastpath, ops
    from kgen.abi import INDEXER_LOGITS
    from kgen.ops import reader
    from kgen.reader_check import make_case

    name = str(SPEC)
    v = ops.resolve(name)
    q, w, cache, table, lens, msl = make_case(v.spec, [keys] * batch, seed=0)
    op = torch.ops.kgen.indexer_logits
    for _ in range(3):  # loads, installs the native kernel, learns the shape and the cache's map
        op(name, q, w, cache, table, lens, msl)
    torch.cuda.synchronize()
    kop = reader._op(name)
    logits = torch.empty((batch, msl), dtype=torch.float32, device="cuda")
    check = fastpath.build_check(INDEXER_LOGITS, v.spec, v.layout)
    kernel = ops.native_kernel(INDEXER_LOGITS.kernel)
    before = kernel.counts() if kernel else None
    pieces = {
        "op (packet)": lambda: op(name, q, w, cache, table, lens, msl),
        "op (.default overload)": lambda: op.default(name, q, w, cache, table, lens, msl),
        "Python kernel (checked twin)": lambda: torch.ops.kgen._indexer_logits_checked(name, q, w, cache, table,
                                                                                         lens, msl),
        "Python fast path (check + launch, logits given)": lambda: kop.fast(q, w, cache, table, lens, logits),
        "generated Python check": lambda: check(q, w, cache, table, lens, logits),
        "torch.empty of the logits": lambda: torch.empty((batch, msl), dtype=torch.float32, device="cuda"),
    }
    out: dict = {"batch": batch, "keys": keys, **timed(pieces)}
    out["host_us_per_call"] = out["us_per_call"]["op (packet)"]
    out["host_us_per_call_gpu_busy"] = out["us_per_call_gpu_busy"]["op (packet)"]
    if kernel is not None and before is not None:
        after = kernel.counts()
        out["native_calls"] = {"launched": after[0] - before[0], "declined": after[1] - before[1]}
    return out


def topk_cost(batch: int, keys: int, k: int) -> dict:
    """The fused top-k op's host cost on the reader's inputs: eager calls of torch.ops.kgen.indexer_topk (one
    native dispatch: the reader then the top-k, kgen.native's chain), its Python implementation (the chain's
    checked twin: two native ops), and the top-k op alone on given logits; the same for the slots ops
    (indexer_topk_slots, its own chain)."""
    import torch

    from kgen import native, ops
    from kgen.reader_check import make_case

    name = str(SPEC)
    v = ops.resolve(name)
    q, w, cache, table, lens, msl = make_case(v.spec, [keys] * batch, seed=0)
    op = torch.ops.kgen.indexer_topk
    slots = torch.ops.kgen.indexer_topk_slots
    for _ in range(3):  # loads the kernels, installs the chains, learns the shapes
        op(name, q, w, cache, table, lens, msl, k)
        slots(name, q, w, cache, table, lens, msl, k)
    torch.cuda.synchronize()
    logits = torch.ops.kgen.indexer_logits(name, q, w, cache, table, lens, msl)
    chains = {n: native.installed_chain(ops.NAMESPACE, n) for n in ("indexer_topk", "indexer_topk_slots")}
    before = {n: c.counts() for n, c in chains.items() if c is not None}
    pieces = {
        "op (packet)": lambda: op(name, q, w, cache, table, lens, msl, k),
        "Python kernel (checked twin: two native ops)": lambda: torch.ops.kgen._indexer_topk_checked(
            name, q, w, cache, table, lens, msl, k),
        "top-k op alone (logits given)": lambda: torch.ops.kgen.indexer_topk_logits(name, logits, lens, k),
        "reader op alone": lambda: torch.ops.kgen.indexer_logits(name, q, w, cache, table, lens, msl),
        "slots op (packet)": lambda: slots(name, q, w, cache, table, lens, msl, k),
        "slots op alone (logits given)": lambda: torch.ops.kgen.indexer_topk_logits_slots(name, logits, lens, table,
                                                                                          k),
    }
    out: dict = {"batch": batch, "keys": keys, "k": k, **timed(pieces)}
    out["host_us_per_call"] = out["us_per_call"]["op (packet)"]
    out["host_us_per_call_gpu_busy"] = out["us_per_call_gpu_busy"]["op (packet)"]
    calls = {}
    for n, c in chains.items():
        if c is not None and n in before:
            after = c.counts()
            calls[n] = {"launched": after[0] - before[n][0], "declined": after[1] - before[n][1]}
    out["native_chain_calls"] = calls.get("indexer_topk")
    out["native_slots_chain_calls"] = calls.get("indexer_topk_slots")
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=4096)
    # one sequence: the reader's kernel (about 3 us) stays shorter than its launch, so the host sets the pace
    # (at 32 x 4K the kernel, 6-13 us back to back, does: call 2 of bench/results/h200-2026-12-03)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--keys", type=int, default=4096)
    ap.add_argument("--k", type=int, default=512)
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    import torch

    from kgen import fastpath, native, ops
    from kgen.bench import bench_inputs
    from kgen.host_cost import _empty_op, host_machine

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
    writer = {"tokens": a.tokens, **timed(pieces)}
    writer["host_us_per_call"] = writer["us_per_call"]["op (packet)"]
    writer["host_us_per_call_gpu_busy"] = writer["us_per_call_gpu_busy"]["op (packet)"]
    if kernel is not None and before is not None:
        after = kernel.counts()
        writer["native_calls"] = {"launched": after[0] - before[0], "declined": after[1] - before[1]}
    out = {"native": native.status(), "host": host_machine(), "writer": writer, "reader": reader_cost(a.batch, a.keys),
           "topk": topk_cost(a.batch, a.keys, a.k)}
    text = json.dumps(out, indent=1)
    print(text)
    if a.json:
        a.json.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
