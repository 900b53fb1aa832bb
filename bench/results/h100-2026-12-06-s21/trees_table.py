"""The top-k alone per tree of a call's A/B (topk_<tree>_<round>.json from scripts/topk_shapes.py): graph us of kgen's
top-k (`kgen_select`), each tree's rounds averaged, the spread of its rounds after it, SGLang's top-k from the same
processes, and each tree's time over the first tree's. No GPU needed.

    python bench/results/h100-2026-12-06-s21/trees_table.py DIR base push s20 head novote
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path


def main() -> None:
    folder, trees = Path(sys.argv[1]), sys.argv[2:]
    rows: dict[tuple, dict[str, list[float]]] = {}
    for tree in trees:
        for f in sorted(folder.glob(f"topk_{tree}_*.json")):
            for r in json.loads(f.read_text())["topk"]["results"]:
                slot = rows.setdefault((r["batch"], r["keys"], r["lengths"], r["next_n"], r["k"]), {})
                slot.setdefault(tree, []).append(r["graph"]["kgen_select"])
                if "sglang_topk" in r["graph"]:
                    slot.setdefault("sglang", []).append(r["graph"]["sglang_topk"])
    ratios = " | ".join(f"{t} / {trees[0]}" for t in trees[1:])
    print(f"| B x keys | lengths, next_n | k | {' | '.join(trees)} | SGLang top-k | {ratios} |")
    print("|---" * (3 + 2 * len(trees)) + "|")
    for (b, keys, lengths, next_n, k), slot in rows.items():
        mean = {t: statistics.mean(slot[t]) for t in trees}
        cells = " | ".join(f"{mean[t]:.1f} ({max(slot[t]) - min(slot[t]):.1f})" for t in trees)
        peer = f"{statistics.mean(slot['sglang']):.1f}" if "sglang" in slot else "-"
        rel = " | ".join(f"{mean[t] / mean[trees[0]]:.3f}" for t in trees[1:])
        print(f"| {b} x {keys // 1024}K | {lengths} {next_n} | {k} | {cells} | {peer} | {rel} |")


if __name__ == "__main__":
    main()
