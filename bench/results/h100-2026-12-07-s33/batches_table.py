"""The read side's batches (bench/results/h100-2026-12-07-s33/batches.py's JSON) against issue 20's goals: per
shape, kgen's cold and graph us, DeepGEMM's and the speed (DeepGEMM time / kgen time) where it ran; fraction of copy
where no peer reads the layout; next_n 2 and 4 against next_n 1 on the same shape's keys.

    python bench/results/h100-2026-12-07-s33/batches_table.py DIR/r/batches.json
"""

from __future__ import annotations

import json
import sys


def main(path: str) -> None:
    data = json.load(open(path))
    print(f"copy {data['copy']['gbps']:.0f} GB/s; peer: {data['peer'].get('version') or data['peer'].get('why')}")
    print("| variant | B x keys | lengths | next_n | kgen cold / graph us | peer cold / graph us | speed cold / graph"
          " | kgen fraction of copy cold / graph |")
    print("|---|---|---|---|---|---|---|---|")
    by_shape = {}
    for e in data["results"]:
        key = (e["variant"], e["batch"], e["keys"], e["lengths"], e["next_n"])
        if "error" in e:
            print(f"| {' | '.join(map(str, key))} | ERROR {e['error'][:120]} | | | |")
            continue
        by_shape[key] = e
        c, g, p = e["cold"], e["graph"], e.get("peer", {})
        peer = speed = "-"
        if p.get("present"):
            peer = f"{p['cold']['us']:.1f} / {p['graph']['us']:.1f}"
            speed = f"{p['speed']['cold']:.2f} / {p['speed']['graph']:.2f}"
        print(f"| {key[0]} | {key[1]} x {key[2] // 1024}K | {key[3]} | {key[4]} | {c['us']:.1f} / {g['us']:.1f} |"
              f" {peer} | {speed} | {c.get('fraction_of_copy', 0):.2f} / {g.get('fraction_of_copy', 0):.2f} |")
    print("\nnext_n n against next_n 1 on the same keys (graph; goal: n 2 <= 1.15, n 4 <= 1.4):")
    for (v, b, k, d, n), e in by_shape.items():
        one = by_shape.get((v, b, k, d, 1))
        if n > 1 and one is not None:
            ratio = e["graph"]["us"] / one["graph"]["us"]
            print(f"  {v} {b} x {k // 1024}K {d} n {n}: {ratio:.2f}")


if __name__ == "__main__":
    main(sys.argv[1])
