"""The top-k's device run (bench/results/topk-2026-12-01/run.sh): kgen.reader_check.bench_topk's rows on the
shapes given, and the host microseconds per eager call of the ops, into one JSON file."""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch

import kgen.ops  # noqa: F401 - registers the ops
from kgen import native
from kgen import reader_check as RC
from kgen import topk_bench as TB
from kgen.bench import environment, write_json_atomic
from kgen.resolve import resolve_spec
from kgen.timing import Timer

FAMILY = "specs/dsv4.yaml"


def host_us(fn, calls: int = 200, loops: int = 15) -> float:
    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    per = []
    for _ in range(loops):
        t = time.perf_counter()
        for _ in range(calls):
            fn()
        per.append((time.perf_counter() - t) / calls * 1e6)
        torch.cuda.synchronize()
    return statistics.median(per)


def host_costs(variant: str) -> dict:
    spec = resolve_spec(variant)
    args = RC.make_case(spec, [4096], seed=0)
    q, w, cache, table, lens, msl = args
    logits = torch.ops.kgen.indexer_logits(variant, *args)
    ops = {"indexer_logits": lambda: torch.ops.kgen.indexer_logits(variant, *args),
           "indexer_topk_logits": lambda: torch.ops.kgen.indexer_topk_logits(variant, logits, lens, 512),
           "indexer_topk": lambda: torch.ops.kgen.indexer_topk(variant, q, w, cache, table, lens, msl, 512)}
    out = {name: host_us(fn) for name, fn in ops.items()}
    out["native"] = native.status()
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", required=True)
    ap.add_argument("--variants", default="fp8,bf16,fp4")
    ap.add_argument("--batches", default="1,8,32,64")
    ap.add_argument("--keys", default="4096,65536,262144")
    ap.add_argument("--ks", default="512,2048")
    ap.add_argument("--ragged", default="all", help="BxKEYS shapes also run ragged (+-30 %%) at next_n 2 ('all': "
                    "every fp8 shape)")
    ap.add_argument("--others", default="1x65536,32x65536", help="BxKEYS shapes of the bf16 / fp4 layouts")
    a = ap.parse_args()
    names = {"fp8": "dsv4_indexer_fp8", "bf16": "dsv4_indexer_bf16", "fp4": "dsv4_indexer_fp4"}
    specs = [resolve_spec(f"{FAMILY}::{names[v]}") for v in a.variants.split(",") if v]
    ks = [int(k) for k in a.ks.split(",")]
    shape = lambda s: tuple(int(x) for x in s.split("x"))  # noqa: E731
    cases = []
    for k in ks:
        for spec in specs:
            if spec.store.dtype == "fp8_e4m3":
                equal = [(int(b), int(n)) for b in a.batches.split(",") for n in a.keys.split(",")]
                ragged = equal if a.ragged == "all" else [shape(s) for s in a.ragged.split(",") if s]
            else:
                equal = ragged = [shape(s) for s in a.others.split(",") if s]
            cases += [(spec, b, n, "equal", 1, k) for b, n in equal]
            cases += [(spec, b, n, "pm30", 2, k) for b, n in ragged]
    data: dict = {**environment(torch)}
    t0 = time.time()
    data["host_us_per_call"] = host_costs(f"{FAMILY}::dsv4_indexer_fp8")
    print("host us per call:", data["host_us_per_call"], flush=True)
    def save(topk: dict) -> None:  # after every shape: a run cut by its time limit keeps what it measured
        data["topk"] = topk
        data["seconds"] = round(time.time() - t0, 1)
        data["cases_planned"] = len(cases)
        write_json_atomic(Path(a.json), data)

    TB.bench_topk(specs, cases=cases, timer=Timer(torch), say=lambda s: print(s, flush=True), on_result=save)


if __name__ == "__main__":
    main()
