"""The top-k rows of `kgen bench` (kgen.topk_bench: kgen's fused op and its top-k alone beside DeepGEMM's logits and
SGLang's top-k where they import) on a chosen list of shapes, one JSON file rewritten after every shape, no shape
started after --time-limit seconds: fp8 keys over B x keys x k at equal lengths (next_n 1) and +-30 % (next_n 2), then
bf16 and fp4 keys at B 1 and 32 x 64K. scripts/device_call.sh's `topk_ab` runs it in each tree of an A/B.

--force-cluster N (a lab knob, for A/B calls): rows the plan gives kgen.topk_plan.TOPK_CLUSTER_PORTABLE CTAs run on N
(at most TOPK_CLUSTER_MAX), each kernel loaded with the non-portable cluster attribute that a cluster of more than 8
CTAs needs. The plan never picks such a cluster itself until one is measured."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch

import kgen.ops  # noqa: F401 - registers the ops
from kgen import launcher
from kgen import topk_bench as TB
from kgen import topk_plan as TP
from kgen.bench import environment, write_json_atomic
from kgen.resolve import resolve_spec

FAMILY = "specs/dsv4.yaml::"


def force_cluster(n: int) -> None:
    """Rows the plan gives TOPK_CLUSTER_PORTABLE CTAs run on `n`; every kernel loaded from now on may launch clusters
    past the portable 8 (the attribute changes nothing for a kernel that launches none)."""
    portable = getattr(TP, "TOPK_CLUSTER_PORTABLE", 8)
    if not 1 <= n <= TP.TOPK_CLUSTER_MAX:
        raise SystemExit(f"--force-cluster {n}: this tree's kernel takes at most {TP.TOPK_CLUSTER_MAX} CTAs a row")
    planned = TP.topk_cluster

    def topk_cluster(max_seq_len, rows=1, sm_count=None, *, clusters=True):
        c = planned(max_seq_len, rows, sm_count, clusters=clusters)
        return n if c == portable else c

    TP.topk_cluster = topk_cluster  # topk_grid reads the module's name at each call
    load = launcher.load_cubin

    def load_cubin(cubin, symbol, device_index, *, what="kernel"):
        k = load(cubin, symbol, device_index, what=what)
        drv = launcher.driver()
        attr = drv.CUfunction_attribute.CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED
        (err,) = drv.cuFuncSetAttribute(k._keep[1], attr, 1)
        if int(err) != 0:
            raise SystemExit(f"{what}: the non-portable cluster attribute was refused ({err})")
        return k

    launcher.load_cubin = load_cubin


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", type=Path, required=True)
    ap.add_argument("--batches", default="1,8,32,64")
    ap.add_argument("--keys", default="4096,65536,262144")
    ap.add_argument("--ks", default="512,2048")
    ap.add_argument("--others", default="dsv4_indexer_bf16,dsv4_indexer_fp4")
    ap.add_argument("--time-limit", type=float, default=150.0)
    ap.add_argument("--force-cluster", type=int, default=0)
    a = ap.parse_args()
    if a.force_cluster:
        force_cluster(a.force_cluster)
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
    out = TB.bench_topk([fp8], cases=Until(), on_result=lambda o: write_json_atomic(a.json, {**data, "topk": o}))
    write_json_atomic(a.json, {**data, "topk": out})
    print(f"{len(out['results'])} of {len(cases)} shapes in {time.time() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
