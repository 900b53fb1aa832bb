"""One reader launch per next_n (1, 2, 4) on fp8 keys, 32 sequences x 64K (equal lengths), for ncu (call1.sh):
the MTP cost's limiter. The writer's launches that fill the cache are filtered out by ncu's -k."""

from __future__ import annotations

import torch

import kgen.ops  # noqa: F401 - registers the ops
from kgen import reader_check as RC
from kgen.resolve import resolve_spec

V = "specs/dsv4.yaml::dsv4_indexer_fp8"
spec = resolve_spec(V)
for next_n in (1, 2, 4):
    args = RC.make_case(spec, [65536] * 32, next_n=next_n, seed=0, extra_pages=0, max_seq_len=65536)
    torch.ops.kgen.indexer_logits(V, *args)
    torch.cuda.synchronize()
