"""call2's reader A/B (scripts/reader_mtp_bench.py in main and in head, MTP_TUNES ef0): per shape the shipped cubin of
each tree, ef0 (the same cubin without the evict-first policy) and DeepGEMM, us graph / cold, with head's shipped
cubin over main's and over DeepGEMM's (each tree's DeepGEMM ran in its own process, on its tensors). No GPU needed.

    python bench/results/h100-2026-12-07-s32/ef_table.py bench/results/h100-2026-12-07-s32/call2/r
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def main() -> None:
    folder = Path(sys.argv[1])
    runs = {t: {(e["batch"], e["keys"], e["lengths"], e["next_n"]): e
                for e in json.loads((folder / f"ef_{t}_1.json").read_text())["results"]} for t in ("main", "head")}

    def us(e: dict, row: str) -> str:
        return f"{e[row]['graph']['us']:.1f} / {e[row]['cold']['us']:.1f}" if isinstance(e.get(row), dict) else "-"

    def over(a: dict, b: dict) -> str:
        return f"{a['graph']['us'] / b['graph']['us']:.3f} ({a['cold']['us'] / b['cold']['us']:.3f})"

    print("| B x keys | lengths | next_n | main shipped | main ef0 | head shipped | head ef0 |"
          " head / main, graph (cold) | head / DeepGEMM | main / DeepGEMM |")
    print("|---" * 10 + "|")
    for key, m in runs["main"].items():
        h = runs["head"].get(key)
        if h is None:
            continue
        dg = "peer" if isinstance(h.get("peer"), dict) else None
        print(f"| {key[0]} x {key[1] // 1024}K | {key[2]} | {key[3]} | {us(m, 'shipped')} | {us(m, 'ef0')} | "
              f"{us(h, 'shipped')} | {us(h, 'ef0')} | {over(h['shipped'], m['shipped'])} | "
              f"{over(h['shipped'], h['peer']) if dg else '-'} | {over(m['shipped'], m['peer']) if dg else '-'} |")


if __name__ == "__main__":
    main()
