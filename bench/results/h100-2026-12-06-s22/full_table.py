"""The goal table of one scripts/topk_shapes.py run (a JSON file): per shape, kgen's fused op against the fastest
pair of peers it is measured beside (fp8 keys: DeepGEMM's logits + SGLang's top-k, goal 0.6x; bf16 and fp4 keys, no
peer reader: kgen's own reader + SGLang's top-k, goal 0.7x), cold and in graphs, and kgen's top-k alone against
SGLang's. No GPU needed.

    python bench/results/h100-2026-12-06-s22/full_table.py bench/results/h100-2026-12-06-s22/call4/r/full_main.json
"""

from __future__ import annotations

import json
import sys


def main(path: str) -> None:
    print("| keys | B x keys | lengths, next_n | k | fused cold / graph | peers cold / graph (which) | fused / peers "
          "cold, graph | goal | top-k alone / SGLang's, graph |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in json.load(open(path))["topk"]["results"]:
        fp8 = r["variant"].endswith("fp8")
        peer, goal = ("deepgemm+sglang_topk", 0.6) if fp8 else ("kgen_reader+sglang_topk", 0.7)
        c, g = r["cold"], r["graph"]
        name = "DeepGEMM + SGLang" if fp8 else "kgen reader + SGLang"
        print(f"| {r['variant'].split('_')[-1]} | {r['batch']} x {r['keys'] // 1024}K | {r['lengths']} {r['next_n']} "
              f"| {r['k']} | {c['kgen']:.1f} / {g['kgen']:.1f} | {c[peer]:.1f} / {g[peer]:.1f} ({name}) "
              f"| {c['kgen'] / c[peer]:.2f}, {g['kgen'] / g[peer]:.2f} | {goal} "
              f"| {g['kgen_select'] / g['sglang_topk']:.2f} |")


if __name__ == "__main__":
    main(sys.argv[1])
