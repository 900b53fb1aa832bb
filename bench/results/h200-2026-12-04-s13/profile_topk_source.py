"""One launch each of kgen's top-k (`indexer_topk_logits`) and of SGLang's (its plan, then its top-k) on the same
fp8 reader logits as kgen.topk_bench makes them (k = 512), for ncu's per-instruction source counters: 1 x 4K
(kgen: one CTA), 1 x 64K (a cluster of 8), 1 x 64K +-30 % next_n 2 (two clusters of 8). SGLang's kit is
KGEN_SGLANG_TOPK_KIT (built by preamble.sh); SGLang reads rows of a stride of whole 16-B groups."""

from __future__ import annotations

import torch

import kgen.ops  # noqa: F401 - registers the ops
from kgen import reader_check as RC
from kgen.peer_sglang_topk import Peer, aligned_width
from kgen.resolve import resolve_spec
from kgen.score import visible_lengths

V = "specs/dsv4.yaml::dsv4_indexer_fp8"
spec = resolve_spec(V)
peer = Peer.load()
for batch, keys, dist, next_n in ((1, 4096, "equal", 1), (1, 65536, "equal", 1), (1, 65536, "pm30", 2)):
    lens = RC.batch_lens(batch, keys, dist, 0, next_n)
    msl = max(lens)
    args = RC.make_case(spec, lens, next_n=next_n, seed=0, extra_pages=0, max_seq_len=msl)
    logits = torch.ops.kgen.indexer_logits(V, *args)
    torch.ops.kgen.indexer_topk_logits(V, logits, args[4], 512)
    wide = torch.zeros(logits.shape[0], aligned_width(msl), device=logits.device)
    wide[:, :msl] = logits
    vis = visible_lengths(args[4].cpu(), next_n).to(torch.int32).cuda()
    peer.topk(wide[:, :msl], vis, 512)
    torch.cuda.synchronize()
