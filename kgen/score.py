"""The read side's Torch path: DSA indexer logits from a paged key cache in any layout kgen writes.

    from kgen.score import indexer_logits_torch
    logits = indexer_logits_torch("specs/indexer_bf16.yaml", q, weights, cache, block_table,
                                  seq_lens, max_seq_len)          # fp32 [B * next_n, max_seq_len]

For query row r = b * next_n + j and key s of sequence b:

    logits[r, s] = sum_h weights[r, h] * relu(q[b, j, h, :] . key(b, s))   if s is visible to r
                 = -inf                                                    otherwise

`key(b, s)` is token s of sequence b: slot `s % page_size` of page `block_table[b, s // page_size]`,
dequantized (code value times its block scale) by `kgen.reference.decode`, which reads the page
through `kgen.layout`'s byte map; this module computes no offset of its own. q is bf16, or fp8
e4m3 with its per-token scale folded into `weights` (as the engines feed DeepGEMM); its values are
used exactly as stored.

Visibility (multi-token prediction, `next_n` = N >= 1), the convention of DeepGEMM's
`fp8_paged_mqa_logits` with 1-D `context_lens` (its test's reference masks key positions
`k <= context_len - next_n + j`) and of SGLang, which calls it: the N query tokens of sequence b
are its last N tokens, at positions seq_lens[b] - N + j, and each sees the keys up to and
including its own position:

    key s is visible to row b * N + j  iff  s <= seq_lens[b] - N + j   (0 <= j < N)

For N = 1 that is s < seq_lens[b] (the contract's rule). A row whose position is negative
(seq_lens[b] < N - j) sees nothing: all -inf. Columns s >= seq_lens[b] are always -inf.

Accumulation: `accum=torch.float32` (default; what an fp32-accumulating kernel computes, TF32 kept
off for the call) or `torch.float64` (keys decoded exactly, products and sums in double: the
kernel's reference, and device-independent to ~1e-16, which `kgen recall` relies on so that CPU
and GPU report the same numbers). The result is rounded to fp32 once.

Arguments are checked like the writer's (`kgen.ops`): shape, dtype, contiguity and device from
tensor metadata first, then, with one host sync, the values: seq_lens within the block table's
capacity and within max_seq_len, and every block-table entry a visible key needs inside the cache
(entries past a sequence's last page are never read, so engines may pad them with anything).
Every failure is an `ArgumentError` (a KgenError) naming the argument, raised before any work.

Memory: keys are decoded and scored in chunks of at most `chunk_keys` keys per sequence, so the
[rows, heads, keys] intermediate stays within about `CHUNK_BYTES`.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch

from . import reference as R
from .diagnostics import ArgumentError
from .dtypes import torch_name
from .layout import Layout, compute
from .reader_layout import READER_Q_DTYPE
from .resolve import resolve_spec
from .spec import Spec
from .topk_plan import TOPK_MAX_K

__all__ = ["CHUNK_BYTES", "LogitsChecked", "Q_DTYPES", "check_logits_arguments", "dense_logits",
           "gather_keys", "indexer_logits_batched", "indexer_logits_torch", "key_chunk", "sequence_logits",
           "visible_lengths"]

Q_DTYPES = tuple(dict.fromkeys(torch_name(d) for d in READER_Q_DTYPE.values()))  # q's torch dtypes
CHUNK_BYTES = 256 << 20  # budget of one [rows, heads, keys] intermediate
NAMES = ("q", "weights", "cache", "block_table", "seq_lens")
INT32_MAX = 2**31 - 1


@dataclass(frozen=True)
class LogitsChecked:
    """The checked arguments of one call."""

    spec: Spec
    layout: Layout
    batch: int
    next_n: int
    heads: int
    num_pages: int
    max_pages: int  # block_table columns
    max_seq_len: int
    seq_lens: list[int] | None  # host copy (None when values were not checked)


def _layout_of(variant: Spec | Layout | str | os.PathLike) -> Layout:
    if isinstance(variant, Layout):
        return variant
    return compute(resolve_spec(variant))


def _expect(name: str, t: Any, dtype: str, shape: tuple, shape_text: str) -> None:
    """t must be a contiguous tensor of `dtype` whose shape matches `shape` (None = any size); the
    message has the writer's form (kgen.abi), naming the argument."""
    if t is None:
        raise ArgumentError(f"{name}: expected a tensor {dtype} {shape_text}, got None")
    if not hasattr(t, "dtype") or not hasattr(t, "shape"):
        raise ArgumentError(f"{name}: expected a torch tensor {dtype} {shape_text}, got {type(t).__name__}")
    got_dtype, got_shape = _dtype(t), tuple(int(s) for s in t.shape)
    shape_ok = len(got_shape) == len(shape) and all(w is None or w == g for w, g in zip(shape, got_shape))
    if got_dtype != dtype or not shape_ok:
        raise ArgumentError(f"{name}: expected {dtype} {shape_text}, got {got_dtype} {_shape(got_shape)}")
    if not t.is_contiguous():
        raise ArgumentError(f"{name}: expected a contiguous tensor, got strides {tuple(t.stride())} for shape "
                            f"{_shape(got_shape)}", fix=f"pass {name}.contiguous()")


def _dims(name: str, t: Any, ndim: int, dtype: str, shape_text: str) -> tuple[int, ...]:
    """The shape of t once it is a tensor of `ndim` dims (else the located error)."""
    if t is None or not hasattr(t, "shape") or len(tuple(t.shape)) != ndim:
        _expect(name, t, dtype, (None,) * ndim, shape_text)
    return tuple(int(s) for s in t.shape)


def check_logits_arguments(variant: Spec | Layout | str | os.PathLike, q, weights, cache, block_table, seq_lens,
                           max_seq_len, *, require_cuda: bool = False, check_values: bool = True) -> LogitsChecked:
    """Check every argument of `indexer_logits` against the variant's layout: metadata first (no
    device work), the device check after the others, the values last (one host sync; skip them
    with `check_values=False`, e.g. inside a CUDA graph)."""
    lay = _layout_of(variant)
    spec = lay.spec
    d, P = spec.head_dim, lay.page_size

    dt = _dtype(q)
    if dt not in Q_DTYPES:
        _dims("q", q, 4, Q_DTYPES[0], f"[B, next_n, H, {d}]")
        raise ArgumentError(f"q: expected bfloat16 or float8_e4m3fn [B, next_n, H, {d}], got {dt} "
                            f"{_shape(q.shape)}", fix="an fp8 q's scale belongs in weights")
    B, N, H, _ = _dims("q", q, 4, dt, f"[B, next_n, H, {d}]")
    _expect("q", q, dt, (B, N, H, d), f"[B, next_n, H, {d}] (head_dim {d})")
    if B < 1 or N < 1 or H < 1:
        raise ArgumentError(f"q: B, next_n and H must be at least 1, got {_shape(q.shape)}")
    _expect("weights", weights, "float32", (B * N, H), f"[B * next_n, H] = [{B * N}, {H}]")
    _dims("cache", cache, 2, "uint8", f"[num_pages, {lay.page_bytes}]")
    _expect("cache", cache, "uint8", (None, lay.page_bytes),
            f"[num_pages, {lay.page_bytes}] ({lay.page_bytes_formula()})")
    _dims("block_table", block_table, 2, "int32", f"[{B}, max_pages]")
    _expect("block_table", block_table, "int32", (B, None), f"[B, max_pages] with B = {B}")
    _expect("seq_lens", seq_lens, "int32", (B,), f"[B] with B = {B}")
    if isinstance(max_seq_len, bool) or not isinstance(max_seq_len, int) or not 0 <= max_seq_len <= INT32_MAX:
        raise ArgumentError(f"max_seq_len: expected an int in [0, {INT32_MAX}], got {max_seq_len!r}")
    num_pages, max_pages = int(cache.shape[0]), int(block_table.shape[1])
    _check_devices((q, weights, cache, block_table, seq_lens), require_cuda)

    lens: list[int] | None = None
    if check_values:
        lens = [int(v) for v in seq_lens.tolist()]
        capacity = max_pages * P
        for b, n in enumerate(lens):
            if n < 0 or n > capacity:
                raise ArgumentError(f"seq_lens: seq_lens[{b}] = {n} is outside [0, {capacity}] (block_table has "
                                    f"{max_pages} pages of {P} tokens)")
            if n > max_seq_len:
                raise ArgumentError(f"seq_lens: seq_lens[{b}] = {n} exceeds max_seq_len = {max_seq_len} "
                                    "(the logits have max_seq_len columns)")
        used = torch.tensor([-(-n // P) for n in lens], dtype=torch.int64)
        needed = torch.arange(max_pages)[None, :] < used[:, None]  # [B, max_pages]: pages visible keys live in
        table = block_table.detach().to("cpu", torch.int64)
        bad = needed & ((table < 0) | (table >= num_pages))
        if bool(bad.any()):
            b, p = (int(i) for i in bad.nonzero()[0])
            raise ArgumentError(f"block_table: block_table[{b}, {p}] = {int(table[b, p])} is outside the cache's "
                                f"{num_pages} pages (sequence {b} has {lens[b]} keys, so it reads pages "
                                f"0..{int(used[b]) - 1} of its row)")
    return LogitsChecked(spec, lay, B, N, H, num_pages, max_pages, max_seq_len, lens)


def _dtype(t: Any) -> str:
    return str(getattr(t, "dtype", type(t).__name__)).removeprefix("torch.")


def _shape(shape) -> str:
    return "[" + ", ".join(str(s) for s in shape) + "]"


def _check_devices(tensors: tuple, require_cuda: bool) -> None:
    first = None
    for name, t in zip(NAMES, tensors):
        if require_cuda and t.device.type != "cuda":
            raise ArgumentError(f"{name}: expected a CUDA tensor, got one on {t.device}", fix=f"pass {name}.cuda()")
        if first is None:
            first = (name, t.device)
        elif t.device != first[1]:
            raise ArgumentError(f"{name}: on {t.device}, but {first[0]} is on {first[1]}: all arguments must "
                                "share one device")


# ---------------------------------------------------------------------------------------------
# the arithmetic


def visible_lengths(seq_lens: torch.Tensor | list[int], next_n: int) -> torch.Tensor:
    """int64 [B * next_n]: how many keys (a prefix 0..len-1) each query row sees (module docstring)."""
    lens = torch.as_tensor(seq_lens, dtype=torch.int64)
    j = torch.arange(next_n, dtype=torch.int64, device=lens.device)
    return (lens[:, None] - next_n + 1 + j[None, :]).clamp(min=0).reshape(-1)


@contextlib.contextmanager
def _exact_fp32_matmul() -> Iterator[None]:
    """Full fp32 products for the call: no TF32 (CUDA) or reduced-precision (CPU) shortcuts."""
    prec = torch.get_float32_matmul_precision()
    tf32 = torch.backends.cuda.matmul.allow_tf32
    try:
        torch.set_float32_matmul_precision("highest")
        torch.backends.cuda.matmul.allow_tf32 = False
        yield
    finally:
        torch.set_float32_matmul_precision(prec)
        torch.backends.cuda.matmul.allow_tf32 = tf32


def _chunk(rows: int, heads: int, accum: torch.dtype, chunk_keys: int | None) -> int:
    if chunk_keys is not None:
        return max(1, chunk_keys)
    per_key = rows * heads * torch.finfo(accum).bits // 8
    return max(256, CHUNK_BYTES // max(per_key, 1))


def dense_logits(q: torch.Tensor, weights: torch.Tensor, keys: torch.Tensor, *, accum: torch.dtype = torch.float32,
                 chunk_keys: int | None = None) -> torch.Tensor:
    """`sum_h weights[m, h] * relu(q[m, h] . keys[s])` for every row m and key s, in `accum`:
    q [M, H, D] (any float dtype, widened exactly), weights [M, H], keys [S, D] -> [M, S] (`accum`).
    No masking. Chunked over keys (see the module docstring); the same call on the same keys gives
    the same bits whatever the keys' origin, which the recall report's 'identical formats give
    agreement 1.0' rests on."""
    if accum not in (torch.float32, torch.float64):
        raise ValueError(f"accum must be torch.float32 or torch.float64, got {accum}")
    M, H, D = q.shape
    S = keys.shape[0]
    qa = q.to(accum).reshape(M * H, D)
    wa = weights.to(accum).reshape(M, 1, H)
    out = torch.empty((M, S), dtype=accum, device=keys.device)
    step = _chunk(M, H, accum, chunk_keys)
    with _exact_fp32_matmul():
        for s0 in range(0, S, step):
            k = keys[s0:s0 + step].to(accum)
            dots = torch.matmul(qa, k.T).clamp_(min=0).reshape(M, H, -1)  # relu(q_h . k_s)
            out[:, s0:s0 + k.shape[0]] = torch.bmm(wa, dots).reshape(M, -1)
    return out


def gather_keys(variant: Spec | Layout | str | os.PathLike, cache: torch.Tensor, pages: torch.Tensor,
                num_keys: int, *, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Keys 0..num_keys-1 of one sequence whose pages are `pages` (its block-table row), dequantized
    by the reference decoder: [num_keys, head_dim] in `dtype`. Only the pages those keys live in are
    read."""
    lay = _layout_of(variant)
    P = lay.page_size
    n_pages = -(-num_keys // P)
    if num_keys == 0:
        return torch.empty((0, lay.spec.head_dim), dtype=dtype, device=cache.device)
    local = cache[pages[:n_pages].to(device=cache.device, dtype=torch.int64)]  # [n_pages, page_bytes]
    return R.decode_pages(lay, local, dtype=dtype)[:num_keys]  # slot s of `local` = key s


def key_chunk(variant: Spec | Layout | str | os.PathLike, rows: int, heads: int,
              accum: torch.dtype = torch.float32) -> int:
    """Keys scored per step for `rows` query rows of `heads` heads: whole pages, the [rows, heads,
    keys] intermediate within CHUNK_BYTES, the decoder's byte index (8 B per cache byte) too."""
    lay = _layout_of(variant)
    P = lay.page_size
    step = min(_chunk(rows, heads, accum, None), CHUNK_BYTES // (8 * lay.bytes_per_token))
    return max(P, step // P * P)


def sequence_logits(variant: Spec | Layout | str | os.PathLike, q: torch.Tensor, weights: torch.Tensor,
                    cache: torch.Tensor, pages: torch.Tensor, num_keys: int, *, accum: torch.dtype = torch.float32,
                    chunk_keys: int | None = None) -> torch.Tensor:
    """Unmasked `dense_logits` of query rows q [M, H, D] (weights [M, H]) against keys 0..num_keys-1
    of one sequence stored in `pages` (its block-table row): [M, num_keys] in `accum`. Decoded and
    scored `chunk_keys` keys at a time (default `key_chunk`; a multiple of the page size), each chunk
    one `dense_logits` call, so `dense_logits(q, weights, keys, chunk_keys=<the same>)` over the same
    key values gives the same bits."""
    lay = _layout_of(variant)
    P = lay.page_size
    M, H, _ = q.shape
    step = key_chunk(lay, M, H, accum) if chunk_keys is None else chunk_keys
    if step % P:
        raise ValueError(f"chunk_keys must be a multiple of the page size {P}, got {step}")
    out = torch.empty((M, num_keys), dtype=accum, device=cache.device)
    for s0 in range(0, num_keys, step):
        s1 = min(num_keys, s0 + step)
        keys = gather_keys(lay, cache, pages[s0 // P:], s1 - s0, dtype=accum)
        out[:, s0:s1] = dense_logits(q, weights, keys, accum=accum, chunk_keys=s1 - s0)
    return out


def indexer_logits_torch(variant: Spec | Layout | str | os.PathLike, q, weights, cache, block_table, seq_lens,
                         max_seq_len: int, *, accum: torch.dtype = torch.float32,
                         chunk_keys: int | None = None) -> torch.Tensor:
    """fp32 [B * next_n, max_seq_len] logits (module docstring), on the arguments' device.
    `chunk_keys`: keys per step (rounded up to whole pages; default `key_chunk`)."""
    c = check_logits_arguments(variant, q, weights, cache, block_table, seq_lens, max_seq_len)
    assert c.seq_lens is not None
    B, N, H = c.batch, c.next_n, c.heads
    P = c.layout.page_size
    dev = q.device
    out = torch.full((B * N, max_seq_len), float("-inf"), dtype=torch.float32, device=dev)
    visible = visible_lengths(c.seq_lens, N).to(dev)
    step = key_chunk(c.layout, N, H, accum) if chunk_keys is None else -(-max(1, chunk_keys) // P) * P
    for b, n in enumerate(c.seq_lens):
        if n == 0:
            continue
        rows = slice(b * N, (b + 1) * N)
        part = sequence_logits(c.layout, q[b], weights[rows], cache, block_table[b], n, accum=accum, chunk_keys=step)
        seen = torch.arange(n, device=dev)[None, :] < visible[rows, None]
        out[rows, :n] = torch.where(seen, part.to(torch.float32), float("-inf"))
    return out


def indexer_logits_batched(variant: Spec | Layout | str | os.PathLike, q, weights, cache, block_table, seq_lens,
                           max_seq_len: int, *, key_dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    """The same logits, computed the way an engine writes a scorer in Torch: one gather of every
    sequence's pages, one decode (`reference.decode_pages`), one batched matmul in `key_dtype`, relu,
    the weighted head sum as a second (fp32) matmul, then the visibility mask. `kgen bench` times it
    beside the kernel as the Torch baseline; it is not the reference (`indexer_logits_torch` is).

    Rounding: each dequantized key value is rounded once from fp32 to `key_dtype`, and the matmul
    returns each q . k rounded to `key_dtype` (bf16: about 2^-9 relative each); the head sum is fp32.
    Memory: the decoded keys and a [B, next_n * heads, max_seq_len] product are materialized at once
    (no chunking: that is the point of the baseline)."""
    c = check_logits_arguments(variant, q, weights, cache, block_table, seq_lens, max_seq_len)
    assert c.seq_lens is not None
    B, N, H = c.batch, c.next_n, c.heads
    P = c.layout.page_size
    n_pages = min(c.max_pages, -(-max_seq_len // P))
    S = min(max_seq_len, n_pages * P)
    # entries past a sequence's last page may be anything (checked entries are the ones read): clamp
    # them into the cache, the mask below drops what they would give
    table = block_table[:, :n_pages].to(torch.int64).clamp(0, c.num_pages - 1)
    keys = R.decode_pages(c.layout, cache[table.reshape(-1)]).to(key_dtype)
    keys = keys.view(B, n_pages * P, -1)[:, :S]
    dots = torch.matmul(q.to(key_dtype).reshape(B, N * H, -1), keys.transpose(1, 2))  # [B, N * H, S]
    heads = dots.float().relu_().view(B, N, H, S)
    with _exact_fp32_matmul():
        scored = torch.matmul(weights.to(torch.float32).view(B, N, 1, H), heads).view(B * N, S)
    seen = torch.arange(S, device=q.device)[None, :] < visible_lengths(c.seq_lens, N).to(q.device)[:, None]
    out = torch.full((B * N, max_seq_len), float("-inf"), dtype=torch.float32, device=q.device)
    out[:, :S] = torch.where(seen, scored, float("-inf"))
    return out


# ---------------------------------------------------------------------------------------------
# the top-k over the logits (torch.ops.kgen.indexer_topk's reference)

def check_topk_k(k: Any, max_k: int = TOPK_MAX_K) -> int:
    """k as an int in [1, max_k] (else the located ArgumentError)."""
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= max_k:
        raise ArgumentError(f"k: expected an int in [1, {max_k}], got {k!r}")
    return k


def topk_reference(logits: torch.Tensor, seq_lens, next_n: int, k: int) -> torch.Tensor:
    """int32 [rows, k]: the k largest visible logits of each row of `logits` [B * next_n, max_seq_len]
    (rows = B * next_n; row r = b * next_n + j sees keys 0..L-1, L = clamp(seq_lens[b] - next_n + 1 + j, 0,
    max_seq_len): kgen.score's visibility rule), as key indices.

    The contract of torch.ops.kgen.indexer_topk:
      * a row with L > k selects the k keys of largest logit; among keys of equal logit (-0.0 == +0.0)
        the lower index wins; NaN counts above +inf, as torch.topk;
      * a row with L <= k holds 0..L-1, then -1 in the remaining k - L places (SGLang's and vLLM's
        padding: the sparse attention skips -1);
      * order: this reference sorts a row by logit (largest first, the lower index first among equals);
        the kernel writes the same set in no particular order (as SGLang's and FlashInfer's top-k
        kernels: the sparse attention reads a set). Compare rows as sets (`same_sets`).
    """
    check_topk_k(k, max(TOPK_MAX_K, k))
    rows, width = int(logits.shape[0]), int(logits.shape[1])
    lens = torch.as_tensor(seq_lens, dtype=torch.int64).cpu()
    if int(lens.numel()) * next_n != rows:
        raise ArgumentError(f"logits: expected {int(lens.numel()) * next_n} rows (B * next_n), got {rows}")
    visible = visible_lengths(lens, next_n).clamp(max=width)
    out = torch.full((rows, k), -1, dtype=torch.int32, device=logits.device)
    x = logits.detach().to(torch.float32)
    for r in range(rows):
        n = int(visible[r])
        if n <= k:
            out[r, :n] = torch.arange(n, dtype=torch.int32, device=logits.device)
            continue
        v = x[r, :n]
        # NaN above +inf (as torch.topk); -0.0 == +0.0 (sort compares values); stable: the lower index
        # first among equal logits
        key = torch.where(torch.isnan(v), torch.full_like(v, float("inf")), v)
        nan = torch.isnan(v).to(torch.int8)
        order = torch.sort(key, descending=True, stable=True).indices
        order = order[torch.sort(nan[order], descending=True, stable=True).indices]
        out[r] = order[:k].to(torch.int32)
    return out


def topk_slots(indices: torch.Tensor, block_table: torch.Tensor, next_n: int, page_size: int) -> torch.Tensor:
    """The cache slots of top-k key indices [B * next_n, k] through the block table (SGLang's
    `topk_transform_paged`: slot = block_table[b, i // page_size] * page_size + i % page_size for row
    r = b * next_n + j; -1 stays -1, and a key with no page, a negative entry or a column past the table, gets -1):
    int32 [B * next_n, k], what `indexer_topk_slots` returns."""
    rows, cols = int(indices.shape[0]), int(block_table.shape[1])
    b = torch.arange(rows, device=indices.device) // next_n
    i = indices.to(torch.int64)
    col = torch.where(i >= 0, i // page_size, cols)
    inside = col < cols
    table = torch.cat([block_table.to(torch.int64), block_table.new_full((block_table.shape[0], 1), -1).long()], 1)
    page = table[b[:, None], torch.where(inside, col, cols)]  # column `cols`: the -1 appended
    slot = page * page_size + torch.where(inside, i % page_size, 0)
    return torch.where(page >= 0, slot, -1).to(torch.int32)


def same_sets(got: torch.Tensor, want: torch.Tensor) -> list[int]:
    """The rows whose index sets differ (-1 padding included), for comparing a kernel's unordered rows."""
    a, _ = torch.sort(got.to(torch.int64).cpu(), dim=1)
    b, _ = torch.sort(want.to(torch.int64).cpu(), dim=1)
    return [int(r) for r in (a != b).any(dim=1).nonzero().flatten()]


def topk_ties(logits: torch.Tensor, seq_lens, next_n: int, k: int) -> torch.Tensor:
    """int64 [rows]: per row, how many visible keys other than the selected share the k-th value (where
    a tie rule decides which of them are selected; 0 for rows with L <= k)."""
    rows, width = int(logits.shape[0]), int(logits.shape[1])
    visible = visible_lengths(torch.as_tensor(seq_lens, dtype=torch.int64).cpu(), next_n).clamp(max=width)
    out = torch.zeros(rows, dtype=torch.int64)
    x = logits.detach().to(torch.float32).cpu()
    for r in range(rows):
        n = int(visible[r])
        if n > k:
            v = x[r, :n]
            kth = torch.topk(v, k).values[-1]
            out[r] = int((v == kth).sum()) - int((torch.topk(v, k).values == kth).sum())
    return out
