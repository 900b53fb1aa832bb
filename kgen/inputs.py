"""Inputs for the writer and the reference: what tests, `kgen test`, `kgen bench` and `kgen recall` feed
a variant (x rows with outliers, a RoPE table, positions or an engine's plan rows, a poisoned cache).

One job, apart from the numerics (kgen.reference computes; this module only makes tensors to compute
on): everything is seeded and device-agnostic. The plan rows' byte format is kgen.reference's
(`make_decode_plan`, `make_compress_plan`), which the reference also reads.
"""

from __future__ import annotations

import torch

from . import layout as L
from .reference import INPUT_DTYPE, make_compress_plan, make_decode_plan
from .spec import Spec

_INPUT = INPUT_DTYPE


def _layout(spec: Spec | L.Layout) -> L.Layout:
    return spec if isinstance(spec, L.Layout) else L.compute(spec)


def poison_pattern(num_pages: int, page_bytes: int, *, device="cpu", invert: bool = False) -> torch.Tensor:
    """A uint8 [num_pages, page_bytes] cache filled with a position-dependent, non-zero pattern
    (so a misplaced or missing write is visible). `invert=True` gives its bitwise complement,
    which differs from it in every byte (two runs tell exactly which bytes were written)."""
    i = torch.arange(num_pages * page_bytes, dtype=torch.int64, device=device)
    p = ((i * 37 + (i >> 8) * 11 + 0x5B) & 0xFF)
    p = torch.where(p == 0, torch.full_like(p, 0xA5), p).to(torch.uint8)
    if invert:
        p = ~p
    return p.reshape(num_pages, page_bytes)


def rope_freqs(max_pos: int, rope_dim: int, theta: float = 10000.0, device="cpu") -> torch.Tensor:
    """fp32 [max_pos, rope_dim]: (cos, sin) of pair i at [2i, 2i+1], angle pos * theta^(-2i/dim)
    (computed in float64 on `device`, rounded once: a 2^20-row bench table is built where it is used)."""
    half = rope_dim // 2
    inv = theta ** (-torch.arange(half, dtype=torch.float64, device=device) * 2.0 / max(rope_dim, 1))
    ang = torch.arange(max_pos, dtype=torch.float64, device=device)[:, None] * inv[None, :]
    f = torch.stack((torch.cos(ang), torch.sin(ang)), dim=-1).reshape(max_pos, 2 * half)
    return f.to(torch.float32)


def sample_rows(n_tokens: int, n: int, g: torch.Generator, *, outliers: bool = True) -> torch.Tensor:
    """fp32 [n_tokens, n] rows shaped like real activations (CPU, drawn from `g`): Gaussian values
    times a per-token magnitude exp(U(-2.5, 2)) (about two decades), and, with `outliers`, n/64
    (at least one) outlier channels scaled by U(10, 60) for every token."""
    mag = torch.exp(torch.empty(n_tokens, 1).uniform_(-2.5, 2.0, generator=g))
    x = torch.randn(n_tokens, n, generator=g) * mag
    if outliers:
        k = max(1, n // 64)
        cols = torch.randperm(n, generator=g)[:k]
        x[:, cols] *= torch.empty(k).uniform_(10.0, 60.0, generator=g)
    return x


def decode_plan_for(spec: Spec, positions: torch.Tensor, g: torch.Generator) -> torch.Tensor:
    """A DecodePlan per token whose emitted tokens sit at `positions` rounded down to a multiple of R
    (seq_len = position + R), with
    about a third of the tokens not emitting in each of SGLang's ways: seq_len not a multiple of R,
    seq_len < R, write_loc = -1, read_page_0 = -1 (padded entries)."""
    n, R = positions.shape[0], spec.positions.compress_ratio
    seq = torch.div(positions, R, rounding_mode="floor") * R + R  # a key's position is a multiple of R
    write_loc = torch.randint(0, 1 << 20, (n,), generator=g)
    page0 = torch.randint(0, 1 << 16, (n,), generator=g)
    page1 = torch.randint(0, 1 << 16, (n,), generator=g)
    kind = torch.randint(0, 12, (n,), generator=g)
    if R > 1:
        seq = torch.where(kind == 0, seq + torch.randint(1, R, (n,), generator=g), seq)  # mid-group token
        seq = torch.where(kind == 1, torch.randint(0, R, (n,), generator=g), seq)  # before the first key
    write_loc = torch.where(kind == 2, torch.full_like(write_loc, -1), write_loc)
    page0 = torch.where(kind == 3, torch.full_like(page0, -1), page0)
    return make_decode_plan(seq, write_loc, page0, page1)


def compress_plan_for(spec: Spec, n: int, max_pos: int, g: torch.Generator) -> torch.Tensor:
    """A prefill CompressPlan over `n` query tokens as SGLang's planner lays it out: the tokens split
    into requests (ragged ids consecutive, request after request), each with a prefix already
    cached, so that position + extend stays below `max_pos`; a row for every token whose
    (position + 1) % R == 0 (seq_len = position + 1, buffer_len the compressor's window remainder, the
    read pages random stand-ins), the rows in an arbitrary order (the planner appends them with an
    atomic counter), then padding rows up to `n`."""
    R = spec.positions.compress_ratio
    window = 2 * R if R == 4 else R  # C4 overlaps two windows (the compressor's; the store ignores it)
    bounds, cap = [0], max(1, min(max_pos, n // 2))  # requests of 1..cap tokens: a few, none past max_pos
    while bounds[-1] < n:
        bounds.append(min(n, bounds[-1] + int(torch.randint(1, cap + 1, (1,), generator=g))))
    seq, rid, blen = [], [], []
    for b0, b1 in zip(bounds, bounds[1:]):
        extend = b1 - b0
        prefix = int(torch.randint(0, max(1, max_pos - extend), (1,), generator=g))
        for j in range(extend):
            pos = prefix + j
            if (pos + 1) % R == 0:
                seq.append(pos + 1)
                rid.append(b0 + j)
                blen.append(window - min(j + 1, window))
    k, pad = len(seq), n - len(seq)
    order = torch.randperm(k, generator=g)

    def shuffled(v: list[int]) -> torch.Tensor:
        return torch.tensor(v, dtype=torch.int64).reshape(k)[order]

    pages = torch.randint(0, 1 << 16, (k, 2), generator=g)
    return make_compress_plan(torch.cat([shuffled(seq), torch.full((pad,), L.COMPRESS_PLAN_INVALID)]),
                              torch.cat([shuffled(rid), torch.zeros(pad, dtype=torch.int64)]),
                              torch.cat([shuffled(blen), torch.zeros(pad, dtype=torch.int64)]),
                              torch.cat([pages[:, 0], torch.full((pad,), -1)]),
                              torch.cat([pages[:, 1], torch.full((pad,), -1)]))


def make_inputs(spec: Spec, n_tokens: int, *, seed: int = 0, device="cpu", max_pos: int = 4096,
                num_pages: int | None = None, outliers: bool = True, skip_fraction: float = 0.1,
                overflow_locs: bool = True) -> dict[str, torch.Tensor]:
    """Inputs as the GPU test uses them, keyed like `norm_rope_store`'s parameters:
    x [N, n] (input_dtype; per-token magnitudes spread over ~2 decades, a few outlier channels x
    10..60 when `outliers`), weight ~ 1 +- 0.1 and bias ~ 0 +- 0.1 (input_dtype), freqs (a real
    theta-10000 table), positions in [0, max_pos) (with positions.source decode_plan: the plan rows,
    `decode_plan_for`; compress_plan: `compress_plan_for`), out_loc (a shuffled subset of the cache's
    slots, which outnumber the tokens; `skip_fraction` of the tokens get a skipped loc: negative,
    and, with `overflow_locs`, some >= num_slots), cache (poisoned, see `poison_pattern`)."""
    lay = _layout(spec)
    n, P = spec.head_dim, lay.page_size
    g = torch.Generator().manual_seed(seed)
    dt = _INPUT[spec.input_dtype]

    x = sample_rows(n_tokens, n, g, outliers=outliers)
    weight = 1.0 + 0.1 * torch.randn(n, generator=g)
    bias = 0.1 * torch.randn(n, generator=g)
    positions = torch.randint(0, max_pos, (n_tokens,), generator=g, dtype=torch.int64)

    if num_pages is None:
        num_pages = max(2, -(-2 * n_tokens // P) + 1)
    num_slots = lay.slots(num_pages)
    if num_slots < n_tokens:
        raise ValueError(f"{num_pages} pages of {P} slots hold fewer than {n_tokens} tokens")
    out_loc = torch.randperm(num_slots, generator=g)[:n_tokens].to(torch.int64)
    n_skip = int(round(skip_fraction * n_tokens))
    if n_skip:
        who = torch.randperm(n_tokens, generator=g)[:n_skip]
        bad = -1 - torch.randint(0, 4 * num_slots, (n_skip,), generator=g)
        if overflow_locs:
            hi = num_slots + torch.randint(0, 4 * num_slots, (n_skip,), generator=g)
            bad = torch.where(torch.arange(n_skip) % 2 == 1, hi, bad)
        out_loc[who] = bad
    if spec.positions.source == "decode_plan":
        positions = decode_plan_for(spec, positions, g)
    elif spec.positions.source == "compress_plan":
        positions = compress_plan_for(spec, n_tokens, max_pos, g)

    return {
        "x": x.to(dt).to(device),
        "weight": weight.to(dt).to(device),
        "bias": bias.to(dt).to(device),
        "freqs": rope_freqs(max_pos, spec.rope.dim, device=device),
        "positions": positions.to(device),
        "out_loc": out_loc.to(device),
        "cache": poison_pattern(num_pages, lay.page_bytes, device=device),
    }
