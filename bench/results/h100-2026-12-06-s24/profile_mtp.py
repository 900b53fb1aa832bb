"""Reader launches for ncu (call4.sh), fp8 keys, 32 x 64K equal lengths, one launch each, in this order: the shipped
pick at next_n 1, 2 and 4 (next_n 4: the keys-in-registers cubin), the default cubin forced at next_n 4
(kReaderWgKeyRegisters 0), and DeepGEMM's fp8_paged_mqa_logits at next_n 2 where it imports: what bounds each."""

from __future__ import annotations

import torch

from kgen import reader_check as rc
from kgen.resolve import resolve_spec

spec = resolve_spec("specs/dsv4.yaml::dsv4_indexer_fp8")
lens = [65536] * 32
cases = {n: rc.make_case(spec, lens, next_n=n, seed=0, extra_pages=0, max_seq_len=65536) for n in (1, 2, 4)}
for n, tune in [(1, None), (2, None), (4, None), (4, {"kReaderWgKeyRegisters": 0})]:
    launch, _ = rc.launcher(spec, cases[n], tune)
    launch()
dg, why = rc.peer_module()
if dg is not None:
    run_peer, _ = rc.peer_call(dg, spec, cases[2], 2)
    run_peer()
torch.cuda.synchronize()
print("peer:", "ran" if dg is not None else why)
