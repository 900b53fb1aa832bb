"""One launch of the top-k kernel per shape (1 x 64K, 1 x 256K keys, k = 512) on the fp8 reader's logits, for
`ncu -k regex:indexer_topk` (run.sh)."""

from __future__ import annotations

import torch

import kgen.ops  # noqa: F401 - registers the ops
from kgen import reader_check as RC
from kgen.resolve import resolve_spec

V = "specs/dsv4.yaml::dsv4_indexer_fp8"
spec = resolve_spec(V)
for keys in (65536, 262144):
    args = RC.make_case(spec, [keys], seed=0, extra_pages=0, max_seq_len=keys)
    logits = torch.ops.kgen.indexer_logits(V, *args)
    torch.ops.kgen.indexer_topk_logits(V, logits, args[4], 512)
    torch.cuda.synchronize()
