"""Reader launches for ncu (call2.sh), fp4 keys, 32 x 64K equal lengths, one launch each: the shipped pick at next_n
1, 2 and 4 (next_n 2 and 4: the keys-in-registers cubin on its 2-stage ring), what bounds fp4's time per key."""

from __future__ import annotations

import torch

from kgen import reader_check as rc
from kgen.resolve import resolve_spec

spec = resolve_spec("specs/dsv4.yaml::dsv4_indexer_fp4")
lens = [65536] * 32
for n in (1, 2, 4):
    case = rc.make_case(spec, lens, next_n=n, seed=0, extra_pages=0, max_seq_len=65536)
    launch, _ = rc.launcher(spec, case, None)
    launch()
torch.cuda.synchronize()
