"""The top-k bench (../tpeer-2026-12-03/bench_topk_peer.py) under another launch rule, in its own process:
TOPK_AB=slice16k  each CTA of a cluster aims at 16K keys (TOPK_SLICE_KEYS), not 8K;
TOPK_AB=one_cta   session 7's SM rule: rows x C > SMs gives one CTA per row (no halving);
TOPK_AB=rank:N    TOPK_RANK_CAP = N (rendered into the kernel: a cubin of its own).
The others only pick the grid; the kernel stays as it is."""

from __future__ import annotations

import os
import runpy
import sys

import kgen.topk_plan as TP

which = os.environ.get("TOPK_AB", "")
if which == "slice16k":
    TP.TOPK_SLICE_KEYS = 16384
elif which == "one_cta":
    rule = TP.topk_cluster

    def topk_cluster(max_seq_len, rows=1, sm_count=None):
        c = rule(max_seq_len)
        return 1 if sm_count is not None and int(rows) * c > int(sm_count) else rule(max_seq_len, rows, sm_count)

    TP.topk_cluster = topk_cluster
elif which.startswith("rank:"):
    TP.TOPK_RANK_CAP = int(which.split(":")[1])
else:
    sys.exit(f"TOPK_AB={which!r}: slice16k, one_cta or rank:N")
sys.argv = [sys.argv[0], *sys.argv[1:]]
runpy.run_path(os.path.join(os.path.dirname(__file__), "..", "tpeer-2026-12-03", "bench_topk_peer.py"),
               run_name="__main__")
