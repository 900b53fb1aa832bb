"""One launch each of kgen's top-k (`indexer_topk_logits`) and of SGLang's (its plan, then its top-k) on the same
fp8 reader logits, k = 512, for ncu's per-instruction source counters: 1 x 4K (kgen: one CTA), 1 x 64K (a cluster
of 8), 8 x 64K (clusters of 8). SGLang's kit is KGEN_SGLANG_TOPK_KIT (built by preamble.sh)."""

from __future__ import annotations

import torch

import kgen.ops  # noqa: F401 - registers the ops
from kgen import reader_check as RC
from kgen.peer_sglang_topk import Peer
from kgen.resolve import resolve_spec

V = "specs/dsv4.yaml::dsv4_indexer_fp8"
spec = resolve_spec(V)
peer = Peer.load()
for batch, keys in ((1, 4096), (1, 65536), (8, 65536)):
    args = RC.make_case(spec, [keys] * batch, seed=0, extra_pages=0, max_seq_len=keys)
    logits = torch.ops.kgen.indexer_logits(V, *args)
    torch.ops.kgen.indexer_topk_logits(V, logits, args[4], 512)
    peer.topk(logits, args[4].clone(), 512)
    torch.cuda.synchronize()
