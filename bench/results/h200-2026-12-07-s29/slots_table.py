"""The slots rows of a top-k bench JSON (scripts/topk_shapes.py): kgen's top-k alone with and without the slots,
SGLang's with and without its page table, the fused ops, graph us, and the slot rows differing from kgen's indices
through the table (kgen_slots / kgen_select_slots / sglang_topk_slots).

    python bench/results/h200-2026-12-07-s29/slots_table.py bench/results/h200-2026-12-07-s29/call1/r/slots_head.json
"""

import json
import sys


def cell(g: dict, name: str, digits: int = 1) -> str:
    return f"{g[name]:.{digits}f}" if isinstance(g.get(name), float) else "-"


d = json.load(open(sys.argv[1]))["topk"]
print("| variant | B x keys | lengths, next_n | k | kgen_select | kgen_select_slots | sglang_topk | "
      "sglang_topk_slots | select_slots / sglang_slots | kgen | kgen_slots | kgen_slots / kgen | slot rows differing |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
for e in d["results"]:
    if "error" in e:
        print(f"| {e['variant']} | {e['batch']} x {e['keys'] // 1024}K | error: {e['error'][:200]} |")
        continue
    g = e["graph"]
    sc = e.get("slots_check", {})
    diff = "/".join(str(sc.get(n, "-")) for n in ("kgen_slots", "kgen_select_slots", "sglang_topk_slots"))
    print(f"| {e['variant'].removeprefix('dsv4_indexer_')} | {e['batch']} x {e['keys'] // 1024}K | {e['lengths']} "
          f"{e['next_n']} | {e['k']} | {cell(g, 'kgen_select')} | {cell(g, 'kgen_select_slots')} | "
          f"{cell(g, 'sglang_topk')} | {cell(g, 'sglang_topk_slots')} | "
          f"{cell(g, 'ratio_kgen_select_slots_to_sglang', 2)} | {cell(g, 'kgen')} | {cell(g, 'kgen_slots')} | "
          f"{cell(g, 'ratio_kgen_slots_to_kgen', 3)} | {diff} |")
