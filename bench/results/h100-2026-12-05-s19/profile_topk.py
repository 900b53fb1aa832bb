"""One launch each of kgen's top-k (`indexer_topk_logits`) and SGLang's (plan, then top-k) on the same fp8 reader
logits (k = 512), for ncu's throughput, memory, warp-state and instruction sections at the shapes where kgen's top-k
is furthest behind SGLang's with the machine not short of rows: 16 x 256K and 1 x 256K equal (next_n 1) and
16 x 256K +-30 % next_n 2; other shapes as arguments, B:keys:lengths:next_n each (session 20's call passes
1:65536:equal:1 1:4096:equal:1 8:65536:equal:1). SGLang's kit is KGEN_SGLANG_TOPK_KIT; SGLang reads rows of a stride
of whole 16-B groups."""

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
SHAPES = [(int(b), int(n), d, int(j)) for b, n, d, j in (a.split(":") for a in sys.argv[1:])] or [
    (16, 262144, "equal", 1), (1, 262144, "equal", 1), (16, 262144, "pm30", 2)]
for batch, keys, dist, next_n in SHAPES:
    lens = RC.batch_lens(batch, keys, dist, 0, next_n)
    msl = max(lens)
    args = RC.make_case(spec, lens, next_n=next_n, seed=0, extra_pages=0, max_seq_len=msl)
    logits = torch.ops.kgen.indexer_logits(V, *args)
    wide = torch.zeros(logits.shape[0], aligned_width(msl), device=logits.device)
    wide[:, :msl] = logits
    vis = visible_lengths(args[4].cpu(), next_n).to(torch.int32).cuda()
    torch.cuda.synchronize()
    torch.ops.kgen.indexer_topk_logits(V, logits, args[4], 512)
    peer.topk(wide[:, :msl], vis, 512)
    torch.cuda.synchronize()
    print(f"{batch} x {keys} {dist} next_n {next_n}: rows {logits.shape[0]}, launched", flush=True)
