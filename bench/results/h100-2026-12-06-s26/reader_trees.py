"""The reader per tree of a call's A/B (NAME_<tree>_<round>.json from scripts/reader_mtp_bench.py): per variant and
shape, the shipped cubin's cold / graph us in each tree (its rounds averaged; the spread of the graph rounds after
it), each tree's graph time over the first tree's, and over DeepGEMM's from the same processes (the variant's column
only where the runs hold more than one). No GPU needed.

    python bench/results/h100-2026-12-06-s26/reader_trees.py DIR NAME base qa head
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path


def main() -> None:
    folder, name, trees = Path(sys.argv[1]), sys.argv[2], sys.argv[3:]
    rows: dict[tuple, dict[str, dict[str, list[float]]]] = {}
    for tree in trees:
        for f in sorted(folder.glob(f"{name}_{tree}_*.json")):
            for e in json.loads(f.read_text())["results"]:
                key = (e["variant"], e["batch"], e["keys"], e["lengths"], e["next_n"])
                at = rows.setdefault(key, {}).setdefault(tree, {"cold": [], "graph": [], "peer": []})
                at["cold"].append(e["shipped"]["cold"]["us"])
                at["graph"].append(e["shipped"]["graph"]["us"])
                if "peer" in e:
                    at["peer"].append(e["peer"]["graph"]["us"])
    several = len({key[0] for key in rows}) > 1
    head = [*(["variant"] if several else []), "B x keys", "lengths", "next_n",
            *[f"{t} cold / graph (spread)" for t in trees],
            *[f"{t}/{trees[0]}" for t in trees[1:]], *[f"{t}/peer" for t in trees]]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for (variant, b, k, d, n), at in rows.items():
        mean = {t: statistics.mean(at[t]["graph"]) for t in trees}
        cells = [*([variant] if several else []), f"{b} x {k // 1024}K", d, str(n)]
        for t in trees:
            g = at[t]["graph"]
            cells.append(f"{statistics.mean(at[t]['cold']):.1f} / {mean[t]:.1f} ({max(g) - min(g):.1f})")
        cells += [f"{mean[t] / mean[trees[0]]:.3f}" for t in trees[1:]]
        cells += [f"{mean[t] / statistics.mean(at[t]['peer']):.3f}" if at[t]["peer"] else "" for t in trees]
        print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
