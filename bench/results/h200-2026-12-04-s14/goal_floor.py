"""Issue 21's goal (the fused op at most 0.6x DeepGEMM's logits + SGLang's top-k, CUDA graphs) beside the time to
read the fp8 keys once at the H200's peak HBM bandwidth, for every shape session 13 measured (its call1 and call2
JSON, head rounds). fp8 keys of the dsv4 layout: 128 B of key and a 4-B scale each (kgen.layout's bytes_per_token,
132). A shape whose floor passes the goal cannot meet it, whatever the top-k. Run from the repository root:
    python bench/results/h200-2026-12-04-s14/goal_floor.py"""

from __future__ import annotations

import glob
import json

H200_BYTES_PER_S = 4.8e12  # HBM3e peak; a kernel reaches 90 % of it at best
KEY_BYTES = 132

rows: dict[tuple, list] = {}
for path in sorted(glob.glob("bench/results/h200-2026-12-04-s13/call*/r/topk_head_*.json")):
    for r in json.load(open(path))["topk"]["results"]:
        g = r["graph"]
        rows.setdefault((r["batch"], r["keys"], r["lengths"], r["next_n"]), []).append(
            (r["total_keys"], g.get("deepgemm+sglang_topk"), g.get("kgen")))
print("| B x keys | lengths, next_n | DeepGEMM + SGLang | goal (0.6x) | kgen fused (d247e3d) | "
      "keys read once at peak | floor / goal |")
print("|---|---|---|---|---|---|---|")
for (batch, keys, lengths, next_n), seen in sorted(rows.items()):
    total = seen[0][0]
    peer = min(p for _, p, _ in seen if p)
    kgen = min(k for _, _, k in seen if k)
    floor = total * KEY_BYTES / H200_BYTES_PER_S * 1e6
    print(f"| {batch} x {keys // 1024}K | {lengths}, {next_n} | {peer:.1f} | {0.6 * peer:.1f} | {kgen:.1f} | "
          f"{floor:.1f} | {floor / (0.6 * peer):.2f} |")
