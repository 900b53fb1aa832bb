"""The shipped reader and the register-split pair cubin (kgen.reader_plan.reader_wg_split_tuning), one launch
each on the same tensors (fp8 keys, 32 x 64K, next_n 1), for ncu's per-instruction stall sampling
(call7.sh): why one CTA of 4 consumer warpgroups and a producer warp is slower than 2 CTAs of 2."""

from __future__ import annotations

import torch

from kgen import layout as L
from kgen import reader_check as rc
from kgen import reader_plan as RP
from kgen.resolve import resolve_spec

spec = resolve_spec("specs/dsv4.yaml::dsv4_indexer_fp8")
args = rc.make_case(spec, [65536] * 32, next_n=1, seed=0, extra_pages=0, max_seq_len=65536)
for tune in (None, RP.reader_wg_split_tuning(L.compute(spec))):
    launch, _ = rc.launcher(spec, args, tune)
    launch()
torch.cuda.synchronize()
