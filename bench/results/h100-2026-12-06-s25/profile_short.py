"""Reader launches for ncu (call1.sh), fp8 keys, one launch each per shape B:KEYS:LENGTHS:NEXT_N of argv: kgen's
shipped pick, then DeepGEMM's fp8_paged_mqa_logits where it imports and takes next_n: what bounds each on short
rows (4K keys, batches of 8-128)."""

from __future__ import annotations

import sys

import torch

from kgen import reader_check as rc
from kgen.resolve import resolve_spec

spec = resolve_spec("specs/dsv4.yaml::dsv4_indexer_fp8")
dg, why = rc.peer_module()
for item in sys.argv[1:]:
    b, keys, dist, n = item.split(":")
    lens = rc.batch_lens(int(b), int(keys), dist, 0, int(n))
    case = rc.make_case(spec, lens, next_n=int(n), seed=0, extra_pages=0, max_seq_len=max(lens))
    launch, _ = rc.launcher(spec, case, None)
    launch()
    if dg is not None and int(n) <= 2:
        run_peer, _ = rc.peer_call(dg, spec, case, int(n))
        run_peer()
torch.cuda.synchronize()
print("peer:", "ran" if dg is not None else why)
