"""The read side's host cost per eager call, split, from one call's results: host_parts.json (the fused op's native
chain with the driver's launches stubbed out, beside the real ops), host.json (scripts/host_breakdown.py) and
reader_host.json (kgen.host_cost.read_host_cost: the dispatch floor, DeepGEMM's call where it was built), each where
the call wrote it. Every figure is a median us per call behind a busy GPU (the host's alone) and, in brackets, with
the GPU idle. No GPU needed.

    python bench/results/h100-2026-12-07-s31/host_table.py bench/results/h100-2026-12-07-s31/call2/r
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def main() -> None:
    folder = Path(sys.argv[1])

    def row(name: str, b: float, i: float) -> None:
        print(f"| {name} | {b:.2f} ({i:.2f}) |")

    print("| way (fp8, 1 x 4K keys, k 512) | us per call, GPU busy (idle) |")
    print("|---|---|")
    if (folder / "host_parts.json").exists():
        parts = json.loads((folder / "host_parts.json").read_text())
        busy, idle = parts["us_per_call_gpu_busy"], parts["us_per_call"]
        for way in busy:
            row(way, busy[way], idle[way])
        pairs = (("op indexer_topk", "stub chain (one dispatch, no driver)", "the chain's two launches"),
                 ("op indexer_logits", "stub reader op alone", "the reader's launch"),
                 ("op indexer_topk_logits", "stub top-k op alone", "the top-k's launch"))
        for real, stub, what in pairs:
            row(f"{what} ({real} - {stub})", busy[real] - busy[stub], idle[real] - idle[stub])
    if (folder / "host.json").exists():
        host = json.loads((folder / "host.json").read_text())
        for side in ("writer", "reader", "topk"):
            row(f"host_breakdown.py {side}: op (packet)", host[side]["host_us_per_call_gpu_busy"],
                host[side]["host_us_per_call"])
    if (folder / "reader_host.json").exists():
        e = json.loads((folder / "reader_host.json").read_text())
        for way, b in e["us_per_call_gpu_busy"].items():
            row(f"read_host_cost {way}", b, e["us_per_call"][way])


if __name__ == "__main__":
    main()
