"""Two trees' scripts/reader_mtp_bench.py runs side by side (call1's `ab`: each tree's processes in turn, ROUNDS
rounds): per shape the shipped launch's mean over the rounds, cold / graph us, and B's time over A's.

    python bench/results/h100-2026-12-07-s35/ab_table.py DIR A B   (DIR/mtp_A_1.json, mtp_A_2.json, ...)
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path


def means(directory: Path, tree: str) -> dict[tuple, tuple[float, float]]:
    runs = [json.loads(p.read_text())["results"] for p in sorted(directory.glob(f"mtp_{tree}_*.json"))]
    out = {}
    for entry in runs[0]:
        key = (entry["variant"], entry["batch"], entry["keys"], entry["lengths"], entry["next_n"])
        same = [e for run in runs for e in run
                if (e["variant"], e["batch"], e["keys"], e["lengths"], e["next_n"]) == key]
        out[key] = tuple(statistics.mean(e["shipped"][m]["us"] for e in same) for m in ("cold", "graph"))
    return out


def main(directory: str, a: str, b: str) -> None:
    ma, mb = means(Path(directory), a), means(Path(directory), b)
    print(f"| variant | B x keys | lengths | next_n | {a} cold / graph us | {b} cold / graph us "
          f"| {b} / {a} cold, graph |")
    print("|---|---|---|---|---|---|---|")
    for key, (ca, ga) in ma.items():
        cb, gb = mb[key]
        variant, batch, keys, lengths, n = key
        print(f"| {variant} | {batch} x {keys // 1024}K | {lengths} | {n} | {ca:.1f} / {ga:.1f} | {cb:.1f} / {gb:.1f} "
              f"| {cb / ca:.3f}, {gb / ga:.3f} |")


if __name__ == "__main__":
    main(*sys.argv[1:4])
