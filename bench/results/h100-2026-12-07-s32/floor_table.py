"""Issue 21's goal against the byte floor, from a top-k bench JSON (kgen bench's reader.topk, or
scripts/topk_shapes.py's): per shape the floor (kgen.topk_bench.BYTE_MODEL: every sequence's keys read once and the
indices written, at copy speed), the goal (0.6x DeepGEMM + the fastest top-k for fp8) over it, and kgen's fused op
over it, in graphs and cold. Where the JSON has no floor (runs before session 32) it is computed here from the
entry's total_keys at the copy speed given.

    python bench/results/h100-2026-12-07-s32/floor_table.py JSON [--copy-gbps G]
"""

from __future__ import annotations

import argparse
import json

from kgen import topk_bench as TB
from kgen.layout import compute
from kgen.resolve import resolve_spec


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("json")
    ap.add_argument("--copy-gbps", type=float, default=None, help="for a JSON without the run's copy")
    a = ap.parse_args()
    d = json.load(open(a.json))
    topk = d.get("topk") or d.get("reader", {}).get("topk")
    gbps = a.copy_gbps or (topk.get("copy") or d.get("copy") or {}).get("gbps")
    print(f"device: {d.get('device')}  copy: {gbps:.0f} GB/s (read + write)")
    l2 = (d.get("device") or {}).get("l2_bytes")
    print("| B x keys | lengths, next_n | k | keys > L2 | floor us | goal / floor, graph (cold) |"
          " kgen / floor, graph (cold) | kgen / goal, graph |")
    print("|---|---|---|---|---|---|---|---|")
    bpt: dict[str, int] = {}
    for e in topk["results"]:
        if "error" in e:
            continue
        name = e["variant"]
        if name not in bpt:
            bpt[name] = compute(resolve_spec("specs/dsv4.yaml::" + name)).bytes_per_token
        f = TB.floor_record(bpt[name], [e["total_keys"]], e["rows"], e["k"], e["max_seq_len"], gbps, l2)
        floor = e.get("floor_us", f["floor_us"])  # (runs before session 32 recorded the lengths' sum, not the floor)
        exceed = e.get("keys_exceed_l2", f.get("keys_exceed_l2"))
        cells = {}
        for how in ("graph", "cold"):
            g = TB.goal_record(e[how], e["store"], floor)
            cells[how] = g
        g, c = cells["graph"], cells["cold"]
        if not g:
            continue
        keys = f"{e['keys'] // 1024}K"
        print(f"| {e['batch']} x {keys} | {e['lengths']} {e['next_n']} | {e['k']} | {'yes' if exceed else 'no'} | "
              f"{floor:.1f} | "
              f"{g['goal_over_floor']:.2f} ({c['goal_over_floor']:.2f}) | {g['kgen_over_floor']:.2f} "
              f"({c['kgen_over_floor']:.2f}) | {e['graph']['kgen'] / g['goal_us']:.2f} |")


if __name__ == "__main__":
    main()
