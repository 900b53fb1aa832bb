"""The A/B table of a call's top-k bench runs (topk_<tree>_<round>.json from topk_run.py): per shape, graph us of
kgen's top-k alone, its fused op, and SGLang's top-k and DeepGEMM + SGLang (the peers, from the same processes),
each tree's rounds averaged; the ratio head / base. No GPU needed.

    python bench/results/h200-2026-12-04-s13/ab_table.py bench/results/h200-2026-12-04-s13/call1/r [base head]
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path


def rows(folder: Path, tree: str) -> dict[tuple, dict[str, list[float]]]:
    out: dict[tuple, dict[str, list[float]]] = {}
    for f in sorted(folder.glob(f"topk_{tree}_*.json")):
        for r in json.loads(f.read_text())["topk"]["results"]:
            key = (r["variant"].split("_")[-1], r["batch"], r["keys"], r["lengths"], r["next_n"], r["k"])
            slot = out.setdefault(key, {})
            for name in ("kgen_select", "kgen", "sglang_topk", "deepgemm+sglang_topk"):
                if name in r.get("graph", {}):
                    slot.setdefault(name, []).append(r["graph"][name])
    return out


def main() -> None:
    folder = Path(sys.argv[1])
    a, b = (sys.argv[2], sys.argv[3]) if len(sys.argv) > 3 else ("base", "head")
    ra, rb = rows(folder, a), rows(folder, b)
    print(f"| keys, B x keys | lengths, next_n | k | top-k {a} | top-k {b} | SGLang top-k | fused {a} | fused {b} "
          f"| DeepGEMM + SGLang | fused {b} / it |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    mean = lambda xs: statistics.fmean(xs) if xs else float("nan")  # noqa: E731
    for key in ra:
        if key not in rb:
            continue
        v, batch, keys, dist, nn, k = key
        pa, pb = ra[key], rb[key]
        sg = mean(pa.get("sglang_topk", []) + pb.get("sglang_topk", []))
        dg = mean(pa.get("deepgemm+sglang_topk", []) + pb.get("deepgemm+sglang_topk", []))
        fb = mean(pb["kgen"])
        print(f"| {v} {batch} x {keys // 1024}K | {dist} {nn} | {k} | {mean(pa['kgen_select']):.1f} | "
              f"{mean(pb['kgen_select']):.1f} | {sg:.1f} | {mean(pa['kgen']):.1f} | {fb:.1f} | {dg:.1f} | "
              f"{fb / dg:.2f} |")


if __name__ == "__main__":
    main()
