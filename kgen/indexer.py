"""The read side's earlier module path, kept as a re-export for code written against it: the rules are
kgen.reader_layout, the launch planning kgen.reader_plan, the op kgen.ops.reader."""

from __future__ import annotations

from .ops.reader import check, cuda_impl, prepare
from .reader_layout import READER_DTYPES, readable, reader_problems, runs_tma, runs_wgmma
from .reader_plan import launch_of, launch_tma, launch_tune, launch_wgmma

__all__ = ["READER_DTYPES", "check", "cuda_impl", "indexer_logits", "launch_of", "launch_tma", "launch_tune",
           "launch_wgmma", "prepare", "readable", "reader_problems", "runs_tma", "runs_wgmma"]


def indexer_logits(variant, q, weights, cache, block_table, seq_lens, max_seq_len: int, *, check_bounds: bool = False):
    """fp32 [B * next_n, max_seq_len] logits of the kernel, launched directly (not through torch.ops)."""
    launch, out = prepare(variant, q, weights, cache, block_table, seq_lens, max_seq_len, check_bounds=check_bounds)
    launch()
    return out
