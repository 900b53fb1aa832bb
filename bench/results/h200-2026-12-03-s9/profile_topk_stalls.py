"""One launch of the top-k kernel per shape on the fp8 reader's logits (k = 512) for ncu's stall breakdown
(call3.sh): 1 x 4K (one CTA), 1 x 64K (a cluster of 8), 32 x 64K (clusters of 4)."""

from __future__ import annotations

import torch

import kgen.ops  # noqa: F401 - registers the ops
from kgen import reader_check as RC
from kgen.resolve import resolve_spec

V = "specs/dsv4.yaml::dsv4_indexer_fp8"
spec = resolve_spec(V)
for batch, keys in ((1, 4096), (1, 65536), (32, 65536)):
    args = RC.make_case(spec, [keys] * batch, seed=0, extra_pages=0, max_seq_len=keys)
    logits = torch.ops.kgen.indexer_logits(V, *args)
    torch.ops.kgen.indexer_topk_logits(V, logits, args[4], 512)
    torch.cuda.synchronize()
