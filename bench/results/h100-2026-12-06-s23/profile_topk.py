"""One launch each of kgen's top-k (`indexer_topk_logits`) and SGLang's (plan, then top-k) on the same fp8 reader
logits, for ncu, at the shapes given as B:keys:lengths:next_n:k (session 19's profile_topk.py with k an argument:
session 23 profiles k 512 against k 2048 on the cluster path). SGLang's kit is KGEN_SGLANG_TOPK_KIT; SGLang reads
rows of a stride of whole 16-B groups."""

from __future__ import annotations

import sys

import torch

import kgen.ops  # noqa: F401 - registers the ops
from kgen import reader_check as RC
from kgen.peer_sglang_topk import Peer, aligned_width
from kgen.resolve import resolve_spec
from kgen.score import visible_lengths

V = "specs/dsv4.yaml::dsv4_indexer_fp8"
spec = resolve_spec(V)
peer = Peer.load()
for shape in sys.argv[1:]:
    b, n, dist, j, kk = shape.split(":")
    batch, keys, next_n, k = int(b), int(n), int(j), int(kk)
    lens = RC.batch_lens(batch, keys, dist, 0, next_n)
    msl = max(lens)
    args = RC.make_case(spec, lens, next_n=next_n, seed=0, extra_pages=0, max_seq_len=msl)
    logits = torch.ops.kgen.indexer_logits(V, *args)
    wide = torch.zeros(logits.shape[0], aligned_width(msl), device=logits.device)
    wide[:, :msl] = logits
    vis = visible_lengths(args[4].cpu(), next_n).to(torch.int32).cuda()
    torch.cuda.synchronize()
    torch.ops.kgen.indexer_topk_logits(V, logits, args[4], k)
    peer.topk(wide[:, :msl], vis, k)
    torch.cuda.synchronize()
    print(f"{shape}: rows {logits.shape[0]}, launched", flush=True)
