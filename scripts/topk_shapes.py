"""The top-k rows of `kgen bench` (kgen.topk_bench: kgen's fused op and its top-k alone beside DeepGEMM's logits and
SGLang's top-k where they import) on a chosen list of shapes, one JSON file rewritten after every shape, no shape
started after --time-limit seconds: fp8 keys over B x keys x k at equal lengths (next_n 1) and +-30 % (next_n 2), then
bf16 and fp4 keys at B 1 and 32 x 64K. scripts/device_call.sh's `topk_ab` runs it in each tree of an A/B."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch

import kgen.ops  # noqa: F401 - registers the ops
from kgen import topk_bench as TB
from kgen.bench import environment, write_json_atomic
from kgen.resolve import resolve_spec
from kgen.timing import Timer, copy_bandwidth

FAMILY = "specs/dsv4.yaml::"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", type=Path, required=True)
    ap.add_argument("--batches", default="1,8,32,64")
    ap.add_argument("--keys", default="4096,65536,262144")
    ap.add_argument("--ks", default="512,2048")
    ap.add_argument("--others", default="dsv4_indexer_bf16,dsv4_indexer_fp4")
    ap.add_argument("--time-limit", type=float, default=150.0)
    a = ap.parse_args()
    ints = lambda s: [int(x) for x in s.split(",") if x]  # noqa: E731
    fp8 = resolve_spec(FAMILY + "dsv4_indexer_fp8")
    cases = [(fp8, b, n, dist, nn, k) for dist, nn in (("equal", 1), ("pm30", 2)) for k in ints(a.ks)
             for b in ints(a.batches) for n in ints(a.keys)]
    for name in [x for x in a.others.split(",") if x]:
        spec = resolve_spec(FAMILY + name)
        cases += [(spec, b, 65536, dist, nn, 512) for dist, nn in (("equal", 1), ("pm30", 2)) for b in (1, 32)]
    t0 = time.time()
    todo = iter(cases)

    class Until(list):  # bench_topk walks `cases`: stop handing out shapes once the time is spent
        def __len__(self):  # the shapes planned (bench_topk's `stopped` message counts them)
            return len(cases)

        def __iter__(self):
            for c in todo:
                if time.time() - t0 > a.time_limit:
                    return
                yield c

    data = {**environment(torch), "cases_planned": len(cases)}
    copy = copy_bandwidth(torch, Timer(torch))  # each shape's byte floor at this device's copy speed
    out = TB.bench_topk([fp8], cases=Until(), on_result=lambda o: write_json_atomic(a.json, {**data, "topk": o}),
                        copy=copy)
    write_json_atomic(a.json, {**data, "topk": out})
    print(f"{len(out['results'])} of {len(cases)} shapes in {time.time() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
