"""Reader launches for ncu (call3.sh): fp8 keys, 32 x 64K equal lengths, the shipped launch at next_n 1 and 4 (next_n
4: the keys-in-registers cubin), each twice (ncu profiles the second round)."""

from __future__ import annotations

import torch

from kgen import reader_check as rc
from kgen.resolve import resolve_spec

spec = resolve_spec("specs/dsv4.yaml::dsv4_indexer_fp8")
lens = [65536] * 32
launches = []
for n in (1, 4):
    case = rc.make_case(spec, lens, next_n=n, seed=0, extra_pages=0, max_seq_len=65536)
    launch, _ = rc.launcher(spec, case, None)
    launches.append(launch)
for _ in range(2):  # ncu -s 2: the second round
    for launch in launches:
        launch()
    torch.cuda.synchronize()
