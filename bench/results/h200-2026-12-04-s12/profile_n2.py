"""One shipped reader launch and one DeepGEMM fp8_paged_mqa_logits launch on the same tensors (fp8 keys,
32 x 64K, next_n 2), for ncu's per-instruction stall sampling (call4.sh): where the consumers' time goes at
next_n 2, beside the peer's."""

from __future__ import annotations

import torch

from kgen import reader_check as rc
from kgen.resolve import resolve_spec

spec = resolve_spec("specs/dsv4.yaml::dsv4_indexer_fp8")
args = rc.make_case(spec, [65536] * 32, next_n=2, seed=0, extra_pages=0, max_seq_len=65536)
launch, _ = rc.launcher(spec, args)
launch()
dg, why = rc.peer_module()
if dg is not None:
    run_peer, _ = rc.peer_call(dg, spec, args, 2)
    run_peer()
torch.cuda.synchronize()
