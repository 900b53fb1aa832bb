"""The read side's batches (bench/results/h100-2026-12-07-s33/batches.py's JSON) against issue 20's goals: per
shape, kgen's cold and graph us, DeepGEMM's and the speed (DeepGEMM time / kgen time) where it ran; fraction of copy
where no peer reads the layout; then issue 20's goals judged by kgen.reader_check.batch_goals (this run's entries
predate their `store` field and batch_lens' one draw per shape: the store is read from the specs, and the MTP cost
at uniform lengths, where next_n 2 and 4 read other keys than next_n 1, is judged per key).

    python bench/results/h100-2026-12-07-s33/batches_table.py DIR/r/batches.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from kgen import reader_check as RC
from kgen.validate import validate_paths


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
    stores = {spec.name: spec.store.dtype for spec in validate_paths([Path("specs/dsv4.yaml")]).specs()}
    goals = RC.batch_goals([{"store": stores.get(e["variant"]), **e} for e in data["results"]])
    print("\n" + RC.goals_line(goals))
    for name, judged in goals.items():
        print(f"\n{name}:")
        for r in judged:
            shape = f"{r['variant']} {r['batch']} x {r['keys'] // 1024}K {r['lengths']} n {r['next_n']}"
            keys = "" if r.get("same_keys", True) else " (other keys: per key)"
            print(f"  {shape}: {r['value']['cold']:.2f} / {r['value']['graph']:.2f} against {r['goal']}{keys}")

if __name__ == "__main__":
    main(sys.argv[1])
