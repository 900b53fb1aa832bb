"""Issue 21's goals beside what they allow, CUDA graphs, us. Run from the repository root:
    python bench/results/h200-2026-12-04-s14/goal_floor.py

fp8 keys: the fused op at most 0.6x DeepGEMM's logits + SGLang's top-k, beside the time to read the keys once at the
H200's peak HBM bandwidth, for every shape session 13 measured (its call1 and call2 JSON, head rounds). fp8 keys of
the dsv4 layout: 128 B of key and a 4-B scale each (kgen.layout's bytes_per_token, 132). A shape whose floor passes
the goal cannot meet it, whatever the top-k.

bf16 and fp4 keys: the fused op at most 0.7x kgen's own reader + the fastest top-k (SGLang's), beside the fused op's
time if its top-k cost nothing: the reader's own time (kgen_reader+sglang_topk less sglang_topk, one process), from
session 9's call3 (the last run with these rows)."""

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

print()
print("| keys, B x keys | lengths, next_n | kgen reader + SGLang top-k | goal (0.7x) | kgen fused (session 9) | "
      "the reader alone | reader / (reader + top-k) |")
print("|---|---|---|---|---|---|---|")
for r in json.load(open("bench/results/h200-2026-12-03-s9/call3/r/topk.json"))["topk"]["results"]:
    if r["variant"] == "dsv4_indexer_fp8" or r["k"] != 512:
        continue
    g = r["graph"]
    both, select = g["kgen_reader+sglang_topk"], g["sglang_topk"]
    reader = both - select
    print(f"| {r['store']}, {r['batch']} x {r['keys'] // 1024}K | {r['lengths']}, {r['next_n']} | {both:.1f} | "
          f"{0.7 * both:.1f} | {g['kgen']:.1f} | {reader:.1f} | {reader / both:.2f} |")
