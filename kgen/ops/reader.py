"""`torch.ops.kgen.indexer_logits`: the read side's op (CPU = kgen.score's Torch path, CUDA = the kernel),
and its Python API.

    kgen::indexer_logits(str variant, Tensor q, Tensor weights, Tensor cache, Tensor block_table,
                         Tensor seq_lens, int max_seq_len) -> Tensor        # fp32 [B * next_n, max_seq_len]

The CUDA implementation is the reader's KernelOp (kgen.ops.registry): per call it allocates the logits,
runs the check generated from kgen.abi.INDEXER_LOGITS and launches from the entry of the call's device
and shape (the cubin of that shape's tuning, the grid, the shared memory, the cache's tensor map); a call
no entry covers takes `check` (every located message), plans the launch and fills the entry. On the
first CUDA load kgen.native installs a C++ kernel at the op's CUDA key that does the same per call
without entering Python (the logits allocated there too); every call it declines goes to
`_indexer_logits_checked`, the Python kernel, which teaches it the new shape or cache.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import torch

from ..abi import INDEXER_LOGITS, Args, ArgumentError
from ..reader_layout import reader_problems
from ..score import check_logits_arguments, indexer_logits_torch
from ..spec import Spec
from .registry import _kernel_ops, define_op, kernel_op, resolve, same_device, variant_name

__all__ = ["check", "cuda_impl", "indexer_logits", "indexer_logits_op", "prepare"]

KERNEL = INDEXER_LOGITS.kernel


INT_ARGS = {"max_seq_len": 6}  # the op's int argument 6 gives the logits' columns (the ABI's max_seq_len)


def _op(variant: str):
    return _kernel_ops.get((variant, KERNEL)) or kernel_op(variant, KERNEL, int_args=INT_ARGS)


def _readable(spec: Spec) -> None:
    problems = reader_problems(spec)
    if problems:
        raise ArgumentError(f"variant: {spec.name} is not an indexer-key variant indexer_logits reads: "
                            f"{'; '.join(problems)}", fix="score it with kgen.score.indexer_logits_torch")


def check(spec: Spec, q, weights, cache, block_table, seq_lens, max_seq_len, logits=None, *,
          check_bounds: bool = False, require_cuda: bool = True) -> Args:
    """Every check of a kernel call, each failure an ArgumentError naming the argument, before any
    launch: the variant is one the kernel reads, the reader's arguments (kgen.score: shapes, dtypes, and
    with `check_bounds` the values: seq_lens within the table and max_seq_len, table entries inside the
    cache; one host sync), then the table's (kgen.abi.INDEXER_LOGITS: q's dtype for this layout, 64
    heads, 16-B aligned contiguous tensors, one device). Returns kgen.abi.Args (logits allocated when
    None)."""
    _readable(spec)
    c = check_logits_arguments(spec, q, weights, cache, block_table, seq_lens, max_seq_len,
                               require_cuda=require_cuda, check_values=check_bounds)
    if logits is None:
        logits = torch.empty((c.batch * c.next_n, max_seq_len), dtype=torch.float32, device=q.device)
    tensors = {"q": q, "weights": weights, "cache": cache, "block_table": block_table, "seq_lens": seq_lens,
               "logits": logits}
    return INDEXER_LOGITS.check(spec, tensors, require_cuda=require_cuda)


def prepare(variant, q, weights, cache, block_table, seq_lens, max_seq_len: int, *, logits=None,
            check_bounds: bool = False, tune: dict | None = None) -> tuple[Callable[[], None], torch.Tensor]:
    """Check once, load the kernel, pack its parameters: returns (launch, logits), where launch() runs
    the kernel on torch's current stream writing `logits` (for benchmarks and CUDA graphs). The cubin is
    the one for this launch shape (kgen.reader_plan.launch_tune); `tune`: READER_TUNING_DEFAULTS overrides
    (the bench's comparisons; one that fixes kReaderWgStages fixes the ring at every shape)."""
    key = variant_name(variant)
    op = _op(key)
    args = check(op.spec, q, weights, cache, block_table, seq_lens, max_seq_len, logits, check_bounds=check_bounds)
    out = args.tensors["logits"]
    if out.numel() == 0:
        return (lambda: None), out
    return op.prepared(*(args.tensors[n] for n in op.names), tune=tune), out


def cuda_impl(variant: str, q, weights, cache, block_table, seq_lens, max_seq_len: int) -> torch.Tensor:
    """The checked path of the CUDA implementation: every check (metadata only: no sync, so CUDA graphs
    capture it), then the kernel on torch's current stream; the shape is remembered for the fast path."""
    op = _op(variant)
    args = check(op.spec, q, weights, cache, block_table, seq_lens, max_seq_len)
    out = args.tensors["logits"]
    if out.numel():
        op.launch_checked(tuple(args.tensors[n] for n in op.names))
    return out


_empty = torch.empty
_f32 = torch.float32


def _indexer_logits_cuda(variant, q, weights, cache, block_table, seq_lens, max_seq_len):
    op = _kernel_ops.get((variant, KERNEL)) or _op(variant)
    s = q.shape
    if len(s) == 4 and max_seq_len > 0:
        logits = _empty((s[0] * s[1], max_seq_len), dtype=_f32, device=q.device)
        if op.fast(q, weights, cache, block_table, seq_lens, logits):
            return logits
    return cuda_impl(variant, q, weights, cache, block_table, seq_lens, max_seq_len)


def _indexer_logits_checked_cuda(variant, q, weights, cache, block_table, seq_lens, max_seq_len):
    """The Python kernel behind the native one: the calls it declined."""
    op = _kernel_ops.get((variant, KERNEL)) or _op(variant)
    s = q.shape
    if len(s) == 4 and max_seq_len > 0 and op._native is not None:
        logits = _empty((s[0] * s[1], max_seq_len), dtype=_f32, device=q.device)
        hit = op._check(q, weights, cache, block_table, seq_lens, logits)
        if hit is not None and (hit[0], *hit[1]) in op._shapes:
            op.launch_declined(q, weights, cache, block_table, seq_lens, logits)
            return logits
    return cuda_impl(variant, q, weights, cache, block_table, seq_lens, max_seq_len)


def _indexer_logits_cpu(variant, q, weights, cache, block_table, seq_lens, max_seq_len):
    spec = resolve(variant).spec
    _readable(spec)
    for name, t in (("q", q), ("weights", weights), ("cache", cache), ("block_table", block_table),
                    ("seq_lens", seq_lens)):
        if t.device.type != "cpu":
            raise ArgumentError(f"{name}: on {t.device}, but the CPU implementation runs on CPU tensors: all "
                                "arguments must share one device", fix=f"pass {name}.cpu()")
    return indexer_logits_torch(spec, q, weights, cache, block_table, seq_lens, max_seq_len)


def _indexer_logits_fake(variant, q, weights, cache, block_table, seq_lens, max_seq_len):
    spec = resolve(variant).spec
    _readable(spec)
    same_device({"q": q, "weights": weights, "cache": cache, "block_table": block_table, "seq_lens": seq_lens})
    if q.dim() != 4 or q.shape[3] != spec.head_dim:
        raise ArgumentError(f"q: expected [B, next_n, H, {spec.head_dim}], got {list(q.shape)}")
    return q.new_empty((q.shape[0] * q.shape[1], max_seq_len), dtype=torch.float32)


INDEXER_LOGITS_SCHEMA = ("(str variant, Tensor q, Tensor weights, Tensor cache, Tensor block_table, "
                         "Tensor seq_lens, int max_seq_len) -> Tensor")
indexer_logits_op = define_op("indexer_logits", INDEXER_LOGITS_SCHEMA, fake=_indexer_logits_fake,
                              cpu=_indexer_logits_cpu, cuda=_indexer_logits_cuda)
# the Python CUDA implementation under its own name: the native kernel (kgen.native), once installed at
# indexer_logits' CUDA key, hands every call it declines to it
define_op("_indexer_logits_checked", INDEXER_LOGITS_SCHEMA, fake=_indexer_logits_fake,
          cuda=_indexer_logits_checked_cuda)


def indexer_logits(variant: Spec | str | os.PathLike, q, weights, cache, block_table, seq_lens,
                   max_seq_len: int) -> torch.Tensor:
    """fp32 [B * next_n, max_seq_len] logits through `torch.ops.kgen.indexer_logits`."""
    return indexer_logits_op(variant_name(variant), q, weights, cache, block_table, seq_lens, int(max_seq_len))
