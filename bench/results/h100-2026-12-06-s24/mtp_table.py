"""A markdown table of scripts/reader_mtp_bench.py's JSON files: per shape, each cubin's cold / graph us, DeepGEMM's
where it ran, and the ratios of the graph times named on the command line.

    python bench/results/h100-2026-12-06-s24/mtp_table.py FILE.json [FILE.json ...] [--ratio A/B ...]
"""

from __future__ import annotations

import json
import sys


def main() -> None:
    files = [a for a in sys.argv[1:] if a.endswith(".json")]
    ratios = [a for a in sys.argv[1:] if "/" in a and not a.endswith(".json")]
    rows = [e for f in files for e in json.load(open(f))["results"]]
    names = [n for n in rows[0] if isinstance(rows[0][n], dict) and "graph" in rows[0][n]]
    head = ["B x keys", "lengths", "next_n", *[f"{n} cold / graph" for n in names], *ratios]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for e in rows:
        cells = [f"{e['batch']} x {e['keys'] // 1024}K", e["lengths"], str(e["next_n"])]
        for n in names:
            cells.append(f"{e[n]['cold']['us']:.1f} / {e[n]['graph']['us']:.1f}" if n in e else "")
        for r in ratios:
            a, b = r.split("/")
            cells.append(f"{e[a]['graph']['us'] / e[b]['graph']['us']:.3f}" if a in e and b in e else "")
        print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
