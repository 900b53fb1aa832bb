"""The top-k peers beside kgen's (issue 21), the matrix of this run: kgen.topk_bench's rows (its docstring holds
their definitions: SGLang's DeepSeek-V4 top-k, torch.topk, DeepGEMM's logits and kgen's, all in one process on the
same tensors) for one variant over B x keys x k x length modes, one JSON file written after every shape (a run
cut by its time limit keeps what it measured).

Written for the 2026-12-03 H200 run, when the rows lived here; `kgen bench` now runs the same code
(kgen.topk_bench.bench_topk) over its own shapes. This script is the caller that keeps this run's matrix, its
mode-by-mode order and its time limit.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

FAMILY = "specs/dsv4.yaml"
VARIANT = "dsv4_indexer_fp8"


def cases(batches, keys, ks, lengths) -> list[tuple[int, int, str, int, int]]:
    """(B, keys, dist, next_n, k): every length mode of `lengths` in its order, shapes inside (the first mode
    covers the whole matrix before the next begins, so a cut run keeps whole modes)."""
    return [(b, n, dist, nn, k) for dist, nn in lengths for k in ks for b in batches for n in keys]


def bench_case(torch, timer, peer, dg, spec, batch: int, keys: int, dist: str, next_n: int, k: int, seed: int = 0):
    """One shape (kgen.topk_bench.bench_topk_case; `peer`: SGLang's loaded top-k or None, `dg`: deep_gemm or None)."""
    from kgen import topk_bench as TB

    return TB.bench_topk_case(torch, timer, spec, batch, keys, dist, next_n, k, seed=seed, peer=dg, sglang=peer)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="SGLang's DSV4 top-k and torch.topk beside kgen's (issue 21)")
    ap.add_argument("--json", required=True, type=Path)
    ap.add_argument("--batches", default="1,8,32,64")
    ap.add_argument("--keys", default="4096,65536,262144")
    ap.add_argument("--ks", default="512,2048")
    ap.add_argument("--lengths", default="equal:1,pm30:2,pm30:1,equal:2",
                    help="DIST:NEXT_N modes in run order (DIST: equal or pm30)")
    ap.add_argument("--time-limit", type=float, default=140.0, help="start no shape after this many seconds")
    ap.add_argument("--no-sglang", action="store_true", help="leave the SGLang peer out (a rerun after it broke "
                    "the CUDA context)")
    a = ap.parse_args(argv)
    t0 = time.time()
    ints = lambda s: [int(x) for x in s.split(",") if x]  # noqa: E731
    lengths = [(m.split(":")[0], int(m.split(":")[1])) for m in a.lengths.split(",") if m]
    todo = cases(ints(a.batches), ints(a.keys), ints(a.ks), lengths)
    from kgen import topk_bench as TB
    from kgen.bench import write_json_atomic

    data: dict[str, Any] = {"what": TB.TOPK_BENCH_WHAT, "variant": VARIANT, "cases_planned": len(todo), "results": []}
    try:
        import torch
    except ImportError as ex:
        data["absent"] = f"torch does not import ({ex})"
        write_json_atomic(a.json, data)
        print("absent:", data["absent"])
        return 0
    from kgen import peer_sglang_topk as P

    if not torch.cuda.is_available():
        data["absent"] = "no CUDA device"
        data["sglang"] = {"name": P.NAME, "present": False, "why": "no CUDA device"}
        write_json_atomic(a.json, data)
        print("absent:", data["absent"])
        return 0
    import kgen.ops  # noqa: F401 - registers the ops
    from kgen import reader_check as RC
    from kgen.bench import environment
    from kgen.resolve import resolve_spec
    from kgen.timing import Timer

    data.update(environment(torch))
    state = TB.PeerState(not a.no_sglang)
    if a.no_sglang:
        state.why = "left out (--no-sglang)"
    data["sglang"] = state.record()
    print("sglang:", data["sglang"], flush=True)
    dg, why = RC.peer_module()
    data["deepgemm"] = RC.peer_info() if dg is not None else {"name": RC.PEER_NAME, "present": False, "why": why}
    spec = resolve_spec(f"{FAMILY}::{VARIANT}")
    timer = Timer(torch)
    for b, n, dist, nn, k in todo:
        if time.time() - t0 > a.time_limit:
            data["stopped"] = f"time limit {a.time_limit} s reached after {len(data['results'])} shapes"
            break
        try:
            e = bench_case(torch, timer, state.peer, dg, spec, b, n, dist, nn, k)
        except Exception as ex:  # noqa: BLE001 - recorded per shape
            torch.cuda.synchronize()
            e = {"variant": spec.name, "batch": b, "keys": n, "lengths": dist, "next_n": nn, "k": k,
                 "error": f"{type(ex).__name__}: {ex}"[:1000]}
        data["results"].append(e)
        data["seconds"] = round(time.time() - t0, 1)
        write_json_atomic(a.json, data)
        print(TB.topk_line(e), flush=True)
    data["seconds"] = round(time.time() - t0, 1)
    write_json_atomic(a.json, data)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
