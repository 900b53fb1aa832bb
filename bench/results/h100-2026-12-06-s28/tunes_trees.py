"""Per shape of an A/B call's MTP bench (mtp_<tree>_<round>.json in DIR, scripts/reader_mtp_bench.py with MTP_TUNES
kr, pair and split): graph us of the shipped cubin and of the split cubin in base and head (rounds averaged),
head / base of the split, pair and keys-in-registers (kr) cubins, head's split over head's shipped, and DeepGEMM's
graph us (base's processes). No GPU needed.

    python bench/results/h100-2026-12-06-s28/tunes_trees.py bench/results/h100-2026-12-06-s28/call/r
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

NAMES = ("shipped", "kr", "pair", "split", "peer")


def main() -> None:
    folder = Path(sys.argv[1])
    rows: dict[tuple, dict[tuple[str, str], list[float]]] = {}
    for tree in ("base", "head"):
        for f in sorted(folder.glob(f"mtp_{tree}_*.json")):
            for e in json.loads(f.read_text())["results"]:
                at = rows.setdefault((e["batch"], e["keys"], e["lengths"], e["next_n"]), {})
                for name in NAMES:
                    if isinstance(e.get(name), dict) and "graph" in e[name]:
                        at.setdefault((tree, name), []).append(e[name]["graph"]["us"])
    print("| B x keys | lengths | next_n | shipped base / head | split base / head | split head/base "
          "| split head/shipped head | pair head/base | kr head/base | peer |")
    print("|---" * 10 + "|")
    for (b, keys, lengths, n), at in rows.items():
        def us(tree: str, name: str, at: dict = at) -> float:
            return statistics.mean(at[(tree, name)]) if (tree, name) in at else float("nan")
        print(f"| {b} x {keys // 1024}K | {lengths} | {n} | {us('base', 'shipped'):.1f} / {us('head', 'shipped'):.1f} "
              f"| {us('base', 'split'):.1f} / {us('head', 'split'):.1f} "
              f"| {us('head', 'split') / us('base', 'split'):.3f} "
              f"| {us('head', 'split') / us('head', 'shipped'):.3f} | {us('head', 'pair') / us('base', 'pair'):.3f} "
              f"| {us('head', 'kr') / us('base', 'kr'):.3f} | {us('base', 'peer'):.1f} |")


if __name__ == "__main__":
    main()
