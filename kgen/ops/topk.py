"""`torch.ops.kgen.indexer_topk`: the read side's top-k (the reader's logits, then the radix-select kernel), and
`torch.ops.kgen.indexer_topk_logits`, the top-k of logits already computed; `indexer_topk_slots` and
`indexer_topk_logits_slots`, the same selections as cache slots through the block table.

    kgen::indexer_topk(str variant, Tensor q, Tensor weights, Tensor cache, Tensor block_table,
                       Tensor seq_lens, int max_seq_len, int k) -> Tensor       # int32 [B * next_n, k]
    kgen::indexer_topk_logits(str variant, Tensor logits, Tensor seq_lens, int k) -> Tensor
    kgen::indexer_topk_slots(...the same as indexer_topk...) -> Tensor          # int32 [B * next_n, k] slots
    kgen::indexer_topk_logits_slots(str variant, Tensor logits, Tensor seq_lens, Tensor block_table, int k) -> Tensor

The contract (kgen.score.topk_reference): each row's k largest visible logits as key indices, the lower index
first among equal logits; a row with L <= k visible keys holds 0..L-1 then -1; the kernel's rows are sets
(no particular order). The slots ops write each selected key i as its cache slot, block_table[b, i / page_size] *
page_size + i % page_size (SGLang's topk_transform_paged, fused into the kernel: kgen.abi.INDEXER_TOPK_SLOTS; the
reference is kgen.score.topk_slots), -1 where the row has no key or the key has no page (a negative table
entry, a column past the table).

CUDA: indexer_topk runs torch.ops.kgen.indexer_logits (the reader, its own fast path) into a logits tensor of
the call, then indexer_topk_logits: the top-k kernel's KernelOp (kgen.ops.registry; its table is
kgen.abi.INDEXER_TOPK), launched with programmatic stream serialization where the spec asks for PDL, so it
starts while the reader drains. Once both have native kernels (kgen.native), the first call installs their
chain at indexer_topk's CUDA key: one dispatch checks and launches both from C++ (k checked first), and
whatever it declines goes to `_indexer_topk_checked`, this Python implementation. indexer_topk_slots is the same
with indexer_topk_logits_slots (kgen.abi.INDEXER_TOPK_SLOTS) and its own chain. CPU: kgen.score's Torch paths (the
reader's reference logits, then the reference top-k, then topk_slots). Fake: the shape.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import torch

from .. import native
from ..abi import INDEXER_TOPK, INDEXER_TOPK_SLOTS, Args, ArgumentError
from ..score import _expect as expect
from ..score import check_topk_k, topk_reference, topk_slots
from ..spec import Spec
from ..topk_plan import TOPK_MAX_K
from .reader import KERNEL as READER_KERNEL
from .reader import _indexer_logits_cpu, _indexer_logits_fake, _readable, indexer_logits_op
from .reader import prepare as prepare_logits
from .registry import NAMESPACE, _kernel_ops, define_op, kernel_op, resolve, same_device, variant_name

__all__ = ["check_logits", "indexer_topk", "indexer_topk_logits", "indexer_topk_logits_op",
           "indexer_topk_logits_slots", "indexer_topk_logits_slots_op", "indexer_topk_op", "indexer_topk_slots",
           "indexer_topk_slots_op", "prepare"]

KERNEL = INDEXER_TOPK.kernel
SELECT = "indexer_topk_logits"  # the op whose schema lists the kernel's tensors (its native kernel's key)
INT_ARGS = {"K": 3}  # the select op's int argument 3 (k) gives the indices' columns
SLOTS = INDEXER_TOPK_SLOTS.kernel
SELECT_SLOTS = "indexer_topk_logits_slots"  # its select op: (variant, logits, seq_lens, block_table, k)
# per top-k kernel: its select op and the select op's int argument that gives the output's columns (k)
_SELECTS = {KERNEL: (SELECT, INT_ARGS), SLOTS: (SELECT_SLOTS, {"K": 4})}


def _op(variant: str, kernel: str = KERNEL):
    """The KernelOp of top-k kernel `kernel` (indexer_topk, or indexer_topk_slots) of a variant."""
    hit = _kernel_ops.get((variant, kernel))
    if hit is not None:
        return hit
    name, int_args = _SELECTS[kernel]
    return kernel_op(variant, kernel, int_args=int_args, op_name=name)


def check_logits(spec: Spec, logits, seq_lens, k, indices=None, *, require_cuda: bool = True,
                 block_table=None) -> Args:
    """Every check of a top-k launch, each an ArgumentError naming the argument: the variant is one the reader
    reads, logits fp32 [B * next_n, max_seq_len] (rows a multiple of seq_lens' B), seq_lens int32 [B], k an
    int in [1, TOPK_MAX_K], then the table's (kgen.abi.INDEXER_TOPK: contiguous, 16-B aligned, one device).
    With a `block_table` (the slots kernel, kgen.abi.INDEXER_TOPK_SLOTS; `indices` are then the slots): int32
    [B, max_pages] (a key past its columns has no page, as the reader reads it: its slot is -1).
    Returns kgen.abi.Args (indices allocated when None)."""
    _readable(spec)
    k = check_topk_k(k)
    expect("logits", logits, "float32", (None, None), "[B * next_n, max_seq_len]")
    expect("seq_lens", seq_lens, "int32", (None,), "[B]")
    rows, batch = int(logits.shape[0]), int(seq_lens.shape[0])
    if batch < 1 or rows < batch or rows % batch:
        raise ArgumentError(f"logits: its {rows} rows are not B * next_n for seq_lens' B = {batch}")
    if indices is None:
        indices = torch.empty((rows, k), dtype=torch.int32, device=logits.device)
    if block_table is None:
        return INDEXER_TOPK.check(spec, {"logits": logits, "seq_lens": seq_lens, "indices": indices},
                                  require_cuda=require_cuda)
    expect("block_table", block_table, "int32", (batch, None), f"[B, max_pages] with B = {batch}")
    return INDEXER_TOPK_SLOTS.check(spec, {"logits": logits, "seq_lens": seq_lens, "block_table": block_table,
                                           "slots": indices}, require_cuda=require_cuda)


def prepare(variant, q, weights, cache, block_table, seq_lens, max_seq_len: int, k: int, *,
            check_bounds: bool = False, slots: bool = False) -> tuple[Callable[[], None], torch.Tensor]:
    """Check once, load both kernels, pack their parameters: returns (launch, indices), where launch() runs the
    reader then the top-k on torch's current stream (benchmarks, CUDA graphs); `slots`: the top-k writes cache
    slots (indexer_topk_slots)."""
    key = variant_name(variant)
    logits_launch, logits = prepare_logits(key, q, weights, cache, block_table, seq_lens, max_seq_len,
                                           check_bounds=check_bounds)
    select, indices = prepare_select(key, logits, seq_lens, k, block_table=block_table if slots else None)

    def launch() -> None:
        logits_launch()
        select()

    return launch, indices


def prepare_select(variant, logits, seq_lens, k: int, *, block_table=None) -> tuple[Callable[[], None], torch.Tensor]:
    """(launch, indices) of the top-k kernel alone over `logits` (another scorer's, e.g. DeepGEMM's); with a
    `block_table`, the slots kernel and its slots."""
    key = variant_name(variant)
    op = _op(key, KERNEL if block_table is None else SLOTS)
    args = check_logits(op.spec, logits, seq_lens, k, block_table=block_table)
    return op.prepared(*(args.tensors[n] for n in op.names)), args.tensors[op.abi.output]


# ---- the select ops (each kernel's own schema) ---------------------------------------------------
# The Python CUDA paths take (op, logits, seq_lens, block_table or None, k): `op` is the kernel's KernelOp, whose
# tensors are (logits, seq_lens, indices) or (logits, seq_lens, block_table, slots).

_empty = torch.empty
_i32 = torch.int32


def _tensors(logits, seq_lens, table, out) -> tuple:
    return (logits, seq_lens, out) if table is None else (logits, seq_lens, table, out)


def _select_checked(op, logits, seq_lens, table, k):
    args = check_logits(op.spec, logits, seq_lens, k, block_table=table)
    out = args.tensors[op.abi.output]
    if out.numel():
        op.launch_checked(tuple(args.tensors[n] for n in op.names))
    return out


def _select_cuda(op, logits, seq_lens, table, k):
    if logits.dim() == 2 and 0 < k:
        out = _empty((logits.shape[0], k), dtype=_i32, device=logits.device)
        if op.fast(*_tensors(logits, seq_lens, table, out)):
            return out
    return _select_checked(op, logits, seq_lens, table, k)


def _select_declined(op, logits, seq_lens, table, k):
    """The Python kernel behind the native one: the calls it declined."""
    if logits.dim() == 2 and 0 < k and op._native is not None:
        out = _empty((logits.shape[0], k), dtype=_i32, device=logits.device)
        tensors = _tensors(logits, seq_lens, table, out)
        hit = op._check(*tensors)
        if hit is not None and (hit[0], *hit[1]) in op._shapes:
            op.launch_declined(*tensors)
            return out
    return _select_checked(op, logits, seq_lens, table, k)


def _select_cpu(variant, logits, seq_lens, table, k):
    spec = resolve(variant).spec
    for name, t in (("logits", logits), ("seq_lens", seq_lens), ("block_table", table)):
        if t is not None and t.device.type != "cpu":
            raise ArgumentError(f"{name}: on {t.device}, but the CPU implementation runs on CPU tensors: all "
                                "arguments must share one device", fix=f"pass {name}.cpu()")
    args = check_logits(spec, logits, seq_lens, k, require_cuda=False, block_table=table)
    next_n = args.dims["rows"] // args.dims["B"]
    out = topk_reference(logits, seq_lens, next_n, k)
    return out if table is None else topk_slots(out, table, next_n, spec.layout.page_size)


def _select_fake(variant, logits, seq_lens, table, k):
    _readable(resolve(variant).spec)
    check_topk_k(k)
    same_device({"logits": logits, "seq_lens": seq_lens, **({} if table is None else {"block_table": table})})
    if logits.dim() != 2:
        raise ArgumentError(f"logits: expected float32 [B * next_n, max_seq_len], got {list(logits.shape)}")
    return logits.new_empty((logits.shape[0], k), dtype=torch.int32)


def _by_variant(path):
    """A select path as indexer_topk_logits runs it: (variant, logits, seq_lens, k)."""
    return lambda variant, logits, seq_lens, k: path(_op(variant), logits, seq_lens, None, k)


def _slots_by_variant(path):
    """A select path as indexer_topk_logits_slots runs it: (variant, logits, seq_lens, block_table, k)."""
    return lambda variant, logits, seq_lens, table, k: path(_op(variant, SLOTS), logits, seq_lens, table, k)


SELECT_SCHEMA = "(str variant, Tensor logits, Tensor seq_lens, int k) -> Tensor"
indexer_topk_logits_op = define_op(
    SELECT, SELECT_SCHEMA, fake=lambda v, x, s, k: _select_fake(v, x, s, None, k),
    cpu=lambda v, x, s, k: _select_cpu(v, x, s, None, k), cuda=_by_variant(_select_cuda))
# the Python CUDA implementation under its own name: the native kernel (kgen.native), once installed at the
# select op's CUDA key, hands every call it declines to it
define_op(f"_{SELECT}_checked", SELECT_SCHEMA, fake=lambda v, x, s, k: _select_fake(v, x, s, None, k),
          cuda=_by_variant(_select_declined))
SELECT_SLOTS_SCHEMA = "(str variant, Tensor logits, Tensor seq_lens, Tensor block_table, int k) -> Tensor"
indexer_topk_logits_slots_op = define_op(SELECT_SLOTS, SELECT_SLOTS_SCHEMA, fake=_select_fake, cpu=_select_cpu,
                                         cuda=_slots_by_variant(_select_cuda))
define_op(f"_{SELECT_SLOTS}_checked", SELECT_SLOTS_SCHEMA, fake=_select_fake,
          cuda=_slots_by_variant(_select_declined))


# ---- the fused ops ---------------------------------------------------------------------------------


# the chains' arguments: the reader's are the op's first seven; the select's the variant, the reader's result
# (-1), seq_lens and k (and the slots' block_table); k is checked against [1, TOPK_MAX_K] before the reader launches
CHAIN_READER_ARGS = [0, 1, 2, 3, 4, 5, 6]
CHAIN_SELECT_ARGS = [0, -1, 5, 7]
CHAIN_SLOTS_ARGS = [0, -1, 5, 4, 7]
CHAIN_K = (7, 1, TOPK_MAX_K)
_chain_tried: set[str] = set()


def _fused_cuda(name: str, select_name: str, select, chain_args: list[int], paged: bool):
    def run(variant, q, weights, cache, block_table, seq_lens, max_seq_len, k):
        check_topk_k(k)  # before the reader runs: a bad k launches nothing
        logits = indexer_logits_op(variant, q, weights, cache, block_table, seq_lens, max_seq_len)
        out = select(variant, logits, seq_lens, block_table, k) if paged else select(variant, logits, seq_lens, k)
        if name not in _chain_tried:  # both ops have loaded (and their native kernels installed, where there are any)
            _chain_tried.add(name)
            native.install_chain(NAMESPACE, name, f"_{name}_checked", READER_KERNEL, select_name, CHAIN_READER_ARGS,
                                 chain_args, CHAIN_K)
        return out

    return run


def _fused_cpu(paged: bool):
    def run(variant, q, weights, cache, block_table, seq_lens, max_seq_len, k):
        check_topk_k(k)
        logits = _indexer_logits_cpu(variant, q, weights, cache, block_table, seq_lens, max_seq_len)
        return _select_cpu(variant, logits, seq_lens, block_table if paged else None, k)

    return run


def _topk_fake(variant, q, weights, cache, block_table, seq_lens, max_seq_len, k):
    check_topk_k(k)
    logits = _indexer_logits_fake(variant, q, weights, cache, block_table, seq_lens, max_seq_len)
    return logits.new_empty((logits.shape[0], k), dtype=torch.int32)


TOPK_SCHEMA = ("(str variant, Tensor q, Tensor weights, Tensor cache, Tensor block_table, Tensor seq_lens, "
               "int max_seq_len, int k) -> Tensor")
_topk_cuda = _fused_cuda(KERNEL, SELECT, indexer_topk_logits_op, CHAIN_SELECT_ARGS, paged=False)
indexer_topk_op = define_op(KERNEL, TOPK_SCHEMA, fake=_topk_fake, cpu=_fused_cpu(paged=False), cuda=_topk_cuda)
# the Python CUDA implementation under its own name: the native chain, once installed, hands it what it declines
define_op(f"_{KERNEL}_checked", TOPK_SCHEMA, fake=_topk_fake, cuda=_topk_cuda)
_slots_cuda = _fused_cuda(SLOTS, SELECT_SLOTS, indexer_topk_logits_slots_op, CHAIN_SLOTS_ARGS, paged=True)
indexer_topk_slots_op = define_op(SLOTS, TOPK_SCHEMA, fake=_topk_fake, cpu=_fused_cpu(paged=True), cuda=_slots_cuda)
define_op(f"_{SLOTS}_checked", TOPK_SCHEMA, fake=_topk_fake, cuda=_slots_cuda)


def indexer_topk(variant: Spec | str | os.PathLike, q, weights, cache, block_table, seq_lens, max_seq_len: int,
                 k: int) -> torch.Tensor:
    """int32 [B * next_n, k] top-k key indices through `torch.ops.kgen.indexer_topk`."""
    return indexer_topk_op(variant_name(variant), q, weights, cache, block_table, seq_lens, int(max_seq_len), int(k))


def indexer_topk_logits(variant: Spec | str | os.PathLike, logits, seq_lens, k: int) -> torch.Tensor:
    """int32 [rows, k] top-k key indices of fp32 `logits` through `torch.ops.kgen.indexer_topk_logits`."""
    return indexer_topk_logits_op(variant_name(variant), logits, seq_lens, int(k))


def indexer_topk_slots(variant: Spec | str | os.PathLike, q, weights, cache, block_table, seq_lens, max_seq_len: int,
                       k: int) -> torch.Tensor:
    """int32 [B * next_n, k] cache slots of the top-k keys through `torch.ops.kgen.indexer_topk_slots`."""
    return indexer_topk_slots_op(variant_name(variant), q, weights, cache, block_table, seq_lens, int(max_seq_len),
                                 int(k))


def indexer_topk_logits_slots(variant: Spec | str | os.PathLike, logits, seq_lens, block_table,
                              k: int) -> torch.Tensor:
    """int32 [rows, k] cache slots of the top-k keys of fp32 `logits` (`torch.ops.kgen.indexer_topk_logits_slots`)."""
    return indexer_topk_logits_slots_op(variant_name(variant), logits, seq_lens, block_table, int(k))
