"""One tree's MTP bench (scripts/reader_mtp_bench.py with MTP_TUNES, one JSON): per shape, the shipped cubin's cold
and graph us, each tuning's graph us over the shipped cubin's, and the shipped cubin over DeepGEMM's (same process,
same tensors). No GPU needed.

    python bench/results/h100-2026-12-07-s31/mtp_table.py bench/results/h100-2026-12-07-s31/call1/r/mtp2_main_1.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def ratio(a: dict, b: dict) -> str:
    """a's time over b's, graph (cold)."""
    return f"{a['graph']['us'] / b['graph']['us']:.3f} ({a['cold']['us'] / b['cold']['us']:.3f})"


def main() -> None:
    results = json.loads(Path(sys.argv[1]).read_text())["results"]
    tunes = [t for t in results[0]["tunes"] if t != "shipped"]
    print("| B x keys | lengths | next_n | shipped cold / graph | " + " | ".join(f"{t} / shipped, graph (cold)"
                                                                        for t in tunes)
          + " | shipped / DeepGEMM, graph (cold) |")
    print("|---" * (5 + len(tunes)) + "|")
    for e in results:
        s = e["shipped"]
        peer = ratio(s, e["peer"]) if isinstance(e.get("peer"), dict) else "-"
        print(f"| {e['batch']} x {e['keys'] // 1024}K | {e['lengths']} | {e['next_n']} | {s['cold']['us']:.1f} / "
              f"{s['graph']['us']:.1f} | " + " | ".join(ratio(e[t], s) for t in tunes) + f" | {peer} |")


if __name__ == "__main__":
    main()
