"""Plain PyTorch reference of the fused norm -> RoPE -> Hadamard -> quantize -> paged store.

It performs the arithmetic of docs/numerics.md operation by operation, so that it writes the same
bytes as the CUDA kernel. Every byte offset comes from `kgen.layout` (`spans`, `value_offset`,
`scale_offset`, `row_parts`, `constants`); nothing here computes one on its own.

Device-agnostic (CPU or CUDA tensors), vectorized over tokens. Rules followed so that torch
rounds exactly like the kernel:

* every product and every sum is its own elementwise op (no addcmul/lerp/matmul/baddbmm, which
  fuse or reorder);
* divisions are `torch.div(tensor, tensor)` with both operands on the device: torch's CUDA
  `tensor / python_scalar` is computed as a multiplication by the reciprocal;
* `1 / sqrt(x)` is an IEEE division of ones by a correctly rounded sqrt (`sqrt_rn`; never
  `torch.rsqrt`, and not `torch.sqrt` either: on CPU it is off by one ulp for ~17% of fp32 inputs);
* fp32 constants (eps, amax floor, 1/QMAX, Hadamard scale) are the exact fp32 values of
  `layout.constants`, held in fp32 tensors;
* sums follow the warp order (`warp_sum`); maxima are order-independent (`amax`).

Stage functions (all take/return fp32 `[N, head_dim]` unless noted):
    norm -> rope -> hadamard -> bf16_roundtrip   (= `prequant`)
    quantize -> pack_row -> store                 (= `encode` + `store`)
plus `decode` (cache bytes -> dequantized values and scales); the inputs tests and benchmarks feed
it are kgen.inputs'.

Readings of docs/numerics.md where it leaves room (the kernel must read it the same way):
* the bf16 round trip (§5) applies to every value, the kept RoPE dims included, before their cast
  to `rope_dtype` (a no-op for bf16, a double rounding for fp16);
* the freqs table is (cos_i, sin_i) at [2i, 2i+1] for both RoPE styles (NeoX too);
* `scale_math` changes power-of-two scales never: fp32(1/448) * 448*2^k and fp32(1/6) * 6*2^k
  round to exactly 2^k, and both maps are monotone, so ceil_log2 agrees for every amax. It only
  changes `scale: fp32` (about half of all amax values get a scale one ulp apart);
* e4m3 keeps the sign of zero (-0.0 or a tiny negative -> 0x80), as the CUDA conversion does;
  only e2m1 drops it;
* t = a / QMAX is normal whenever amax_floor >= QMAX * 2^-126; the bit recipe of ceil_log2 needs
  that (this module also handles a subnormal t exactly);
* `torch.compile` of this module is not the reference: Inductor may contract a*b+c into an FMA.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from . import layout as L
from .dtypes import DTYPES
from .spec import Spec
from .validate import validate_paths

__all__ = [
    "E2M1_THRESHOLDS", "E2M1_VALUES", "QMAX", "Quantized",
    "load_spec", "constants", "sqrt_rn", "warp_sum", "norm", "rope", "hadamard", "bf16_roundtrip", "prequant",
    "ceil_log2", "pow2", "block_scales", "e4m3_sat_rne", "e2m1_codes", "pack_nibbles",
    "quantize", "pack_row", "token_byte_columns", "store", "norm_rope_store",
    "decode", "decode_pages",
]

WARP = L.WARP
QMAX = L.QUANT_MAX
# e2m1 magnitudes by code 0..7, and the decision thresholds between neighbours (ties go down)
E2M1_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
E2M1_THRESHOLDS = (0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0)
_HALF = {n: getattr(torch, d.torch) for n, d in DTYPES.items() if d.bits == 16 and d.torch}
INPUT_DTYPE = {n: getattr(torch, d.torch) for n, d in DTYPES.items() if d.input and d.torch}
_INPUT = INPUT_DTYPE


def load_spec(path: str | Path) -> Spec:
    """The single spec of a YAML file, validated (KgenError if invalid, ValueError for a family)."""

    found = validate_paths([Path(path)])
    specs = found.specs()
    if found.results[0].document.is_family:
        raise ValueError(f"{path}: a family, not a single spec")
    return specs[0]


def _layout(spec: Spec | L.Layout) -> L.Layout:
    return spec if isinstance(spec, L.Layout) else L.compute(spec)


def _hexf(s: str) -> float:
    """A `layout.float_hex` literal back to its (exactly fp32) value."""
    return float.fromhex(s[:-1] if s.endswith("f") else s)


def constants(spec: Spec | L.Layout) -> dict[str, float]:
    """The fp32 constants of the arithmetic, exactly as the kernel's config header defines them."""
    k = {c.name: c.value for c in L.constants(_layout(spec))}
    return {name: _hexf(str(k[key])) for name, key in (
        ("eps", "EPS"), ("amax_floor", "AMAX_FLOOR"), ("qmax", "QUANT_MAX"),
        ("inv_qmax", "INV_QUANT_MAX"), ("hadamard_scale", "HADAMARD_SCALE"))}


def _f32(value: float, like: torch.Tensor) -> torch.Tensor:
    """A 0-dim fp32 tensor on `like`'s device (never a CPU scalar: see the module docstring)."""
    return torch.tensor(value, dtype=torch.float32, device=like.device)


def _div(a: torch.Tensor, b: torch.Tensor | float) -> torch.Tensor:
    """IEEE fp32 division a / b, with b broadcast to a full tensor on the device."""
    bt = b if isinstance(b, torch.Tensor) else _f32(b, a)
    a, bt = torch.broadcast_tensors(a, bt.to(a.device))
    return torch.div(a, bt.contiguous())


def sqrt_rn(x: torch.Tensor) -> torch.Tensor:
    """Correctly rounded fp32 sqrt (IEEE `sqrtf`, what `-prec-sqrt=true` gives).

    torch.sqrt is NOT correctly rounded on CPU (this build's vectorized fp32 sqrt is off by one
    ulp for ~17% of inputs; its fp64 sqrt is not exact either), so: a float64 sqrt rounded to
    fp32 as a first guess, then an exact fix-up: the answer s is the fp32 with
    (s - ulp/2)^2 < x < (s + ulp/2)^2; midpoints have 25 bits, so their squares are exact in
    float64, and x is never exactly a midpoint's square."""
    x = x.to(torch.float32)
    s = torch.sqrt(x.double()).float()
    inf = torch.full_like(s, float("inf"))
    up, dn = torch.nextafter(s, inf), torch.nextafter(s, torch.zeros_like(s))
    xd, sd = x.double(), s.double()
    hi = (sd + up.double()) * 0.5
    lo = (sd + dn.double()) * 0.5
    s = torch.where(torch.isfinite(s) & (xd > hi * hi), up, s)
    return torch.where(torch.isfinite(s) & (xd < lo * lo), dn, s)


# ---------------------------------------------------------------------------------------------
# §1 warp-order sum


def warp_sum(t: torch.Tensor) -> torch.Tensor:
    """Sum over the last dim (n = 32*V) in the kernel's order: each lane l sums its V values
    [l*V, (l+1)*V) left to right, then 5 xor-butterfly steps (off 16, 8, 4, 2, 1).
    Returns `t.shape[:-1]` (every lane holds the same value; lane 0's is returned)."""
    n = t.shape[-1]
    if n % WARP:
        raise ValueError(f"warp_sum needs a multiple of {WARP} values, got {n}")
    v = t.reshape(*t.shape[:-1], WARP, n // WARP)
    s = v[..., 0]
    for j in range(1, v.shape[-1]):
        s = s + v[..., j]
    lanes = torch.arange(WARP, device=t.device)
    for off in (16, 8, 4, 2, 1):
        s = s + s[..., lanes ^ off]
    return s[..., 0]


# ---------------------------------------------------------------------------------------------
# §2 norm, §3 RoPE, §4 Hadamard, §5 bf16 round trip


def norm(spec: Spec, x: torch.Tensor, weight: torch.Tensor | None = None,
         bias: torch.Tensor | None = None) -> torch.Tensor:
    """RMSNorm / LayerNorm / none in fp32 (x [N, n] any float dtype, widened exactly)."""
    v = x.to(torch.float32)
    kind = spec.norm.kind
    if kind == "none":
        return v.clone()
    n = v.shape[-1]
    eps = _f32(constants(spec)["eps"], v)
    nn = _f32(float(n), v)
    one = _f32(1.0, v)
    if weight is None or (kind == "layernorm" and bias is None):
        raise ValueError(f"{kind} needs a weight" + (" and a bias" if kind == "layernorm" else ""))
    w = weight.to(device=v.device, dtype=torch.float32)
    if kind == "rmsnorm":
        sq = v * v
        mean = _div(warp_sum(sq), nn)
        r = _div(one, sqrt_rn(mean + eps))
        return (v * r[..., None]) * w
    if kind == "layernorm":
        mu = _div(warp_sum(v), nn)
        d = v - mu[..., None]
        var = _div(warp_sum(d * d), nn)
        r = _div(one, sqrt_rn(var + eps))
        assert bias is not None  # checked above: layernorm without a bias raised
        return (d * r[..., None]) * w + bias.to(device=v.device, dtype=torch.float32)
    raise ValueError(f"unknown norm kind {kind!r}")


def _rope_pairs(spec: Spec) -> tuple[torch.Tensor, torch.Tensor]:
    """Dim indices (re, im) of every RoPE pair i (python lists as long tensors, CPU)."""
    rope_span = L.spans(spec)[0]
    half = spec.rope.dim // 2
    i = torch.arange(half)
    if spec.rope.style == "interleaved":
        re, im = rope_span.start + 2 * i, rope_span.start + 2 * i + 1
    else:
        re, im = rope_span.start + i, rope_span.start + i + half
    return re, im


def rope(spec: Spec, y: torch.Tensor, freqs: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """Rotate the RoPE span: re' = re*c - im*s, im' = re*s + im*c (each product rounded)."""
    if spec.rope.dim == 0:
        return y
    re_i, im_i = (t.to(y.device) for t in _rope_pairs(spec))
    f = freqs.to(device=y.device, dtype=torch.float32)[positions.to(y.device)]  # [N, rope_dim]
    c, s = f[:, 0::2], f[:, 1::2]
    re, im = y[:, re_i], y[:, im_i]
    new_re = re * c - im * s
    new_im = re * s + im * c
    out = y.clone()
    out[:, re_i] = new_re
    out[:, im_i] = new_im
    return out


def hadamard(y: torch.Tensor, scale: float | None = None) -> torch.Tensor:
    """Natural-order Walsh-Hadamard over the last dim, stages h = 1, 2, ..., n/2 in that order
    (a, b -> a + b, a - b), then `* scale` (default: fp32(1)/sqrt(fp32(n)), the kernel's
    kHadamardScale; pass 1.0 for the unscaled transform)."""
    n = y.shape[-1]
    if not L.is_pow2(n):
        raise ValueError(f"Hadamard needs a power-of-two length, got {n}")
    lead = y.shape[:-1]
    h = 1
    while h < n:
        v = y.reshape(*lead, n // (2 * h), 2, h)
        a, b = v[..., 0, :], v[..., 1, :]
        y = torch.stack((a + b, a - b), dim=-2).reshape(*lead, n)
        h *= 2
    if scale is None:
        import numpy as np

        scale = float(np.float32(1.0) / np.sqrt(np.float32(n)))
    return y * _f32(scale, y)


def bf16_roundtrip(y: torch.Tensor) -> torch.Tensor:
    return y.to(torch.bfloat16).to(torch.float32)


def prequant(spec: Spec, x, weight, bias, freqs, positions) -> torch.Tensor:
    """norm -> rope -> hadamard -> bf16 round trip: the fp32 values [N, n] the quantizer sees."""
    y = norm(spec, x, weight, bias)
    y = rope(spec, y, freqs, positions)
    if spec.hadamard:
        y = hadamard(y, constants(spec)["hadamard_scale"])
    if spec.store.bf16_roundtrip:
        y = bf16_roundtrip(y)
    return y


# ---------------------------------------------------------------------------------------------
# §6 quantize


def ceil_log2(t: torch.Tensor) -> torch.Tensor:
    """Exact ceil(log2(t)) of positive fp32 t, int32: with t = m * 2^E (1 <= m < 2), E if m == 1
    else E + 1. From the fp32 bits (exponent field, mantissa != 0), as the kernel does; subnormal
    t (outside the contract) is handled exactly through frexp."""
    t = t.to(torch.float32).contiguous()
    bits = t.view(torch.int32)
    E = ((bits >> 23) & 0xFF) - 127
    e = E + ((bits & 0x7FFFFF) != 0).to(torch.int32)
    m, ex = torch.frexp(t)  # t = m * 2^ex, 0.5 <= m < 1
    exact = ex - (m == 0.5).to(ex.dtype)
    return torch.where(E == -127, exact.to(torch.int32), e.to(torch.int32))


def pow2(e: torch.Tensor) -> torch.Tensor:
    """2^e as fp32, built from the exponent bits (exact; e in [-126, 127])."""
    return ((e.to(torch.int32) + 127) << 23).contiguous().view(torch.float32)


def block_scales(spec: Spec, amax: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """From block maxima (fp32 [..., blocks]): (scale fp32, multiplier fp32, exponent int32 or None).
    `q = code(x * multiplier)`; dequantized = code value * scale."""
    c = constants(spec)
    kind = spec.store.scale
    a = torch.maximum(amax, _f32(c["amax_floor"], amax))
    if spec.store.scale_math == "divide":
        t = _div(a, c["qmax"])
    else:
        t = a * _f32(c["inv_qmax"], a)
    if kind == "fp32":
        return t, _div(_f32(1.0, t).expand_as(t), t), None
    if kind in ("fp32_pow2", "ue8m0"):
        e = ceil_log2(t)
        return pow2(e), pow2(-e), e
    raise ValueError(f"no scale for kind {kind!r}")


def e4m3_sat_rne(v: torch.Tensor) -> torch.Tensor:
    """fp32 -> e4m3fn byte codes (uint8): clamp to [-448, 448], then round to nearest even
    (subnormals kept) = CUDA __nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3)."""
    return v.to(torch.float32).clamp(-448.0, 448.0).to(torch.float8_e4m3fn).view(torch.uint8)


def e2m1_codes(v: torch.Tensor) -> torch.Tensor:
    """fp32 (already divided by the scale) -> e2m1 nibbles (uint8 0..15): magnitude code by the
    thresholds with ties going down, sign bit 8 only for a nonzero code (no negative zero)."""
    mag = v.abs()
    code = torch.zeros(v.shape, dtype=torch.uint8, device=v.device)
    for th in E2M1_THRESHOLDS:
        code += (mag > th).to(torch.uint8)
    neg = (v < 0) & (code != 0)
    return code | (neg.to(torch.uint8) << 3)


def pack_nibbles(nib: torch.Tensor) -> torch.Tensor:
    """[..., 2k] nibbles -> [..., k] bytes; element 2k in the low nibble."""
    pairs = nib.reshape(*nib.shape[:-1], nib.shape[-1] // 2, 2)
    return pairs[..., 0] | (pairs[..., 1] << 4)


def _le_bytes(t: torch.Tensor) -> torch.Tensor:
    """A [N, k] tensor of multi-byte values as [N, k * size] uint8, little-endian."""
    import sys

    assert sys.byteorder == "little", "the cache is little-endian; this host is not"
    return t.contiguous().view(torch.uint8)


@dataclass
class Quantized:
    """One token per row. `values`: the quantized span's bytes [N, quant_bytes]; `kept`: the kept
    RoPE span's bytes [N, kept_bytes]; `scale_bytes`: [N, blocks * scale_unit] (block g at
    g * scale_unit); `scales`: fp32 [N, blocks] (what a dequantizer multiplies by)."""

    values: torch.Tensor
    kept: torch.Tensor
    scale_bytes: torch.Tensor
    scales: torch.Tensor


def quantize(spec: Spec, y: torch.Tensor) -> Quantized:
    """§6 on prequantized fp32 values y [N, n] (bf16 round trip already applied)."""
    lay = _layout(spec)
    s = spec.store
    N = y.shape[0]
    dev = y.device
    q = y[:, lay.quant_span.start:lay.quant_span.end]
    kept = y[:, lay.kept_span.start:lay.kept_span.end]
    if lay.kept_span.size:
        assert s.rope_dtype is not None  # layout.spans: a kept span exists only with rope_dtype set
        kept_bytes = _le_bytes(kept.to(_HALF[s.rope_dtype]))
    else:
        kept_bytes = torch.zeros((N, 0), dtype=torch.uint8, device=dev)
    empty = torch.zeros((N, 0), dtype=torch.uint8, device=dev)
    noscale = torch.zeros((N, 0), dtype=torch.float32, device=dev)

    if s.dtype in _HALF:
        return Quantized(_le_bytes(q.to(_HALF[s.dtype])), kept_bytes, empty, noscale)
    if s.scale == "none":
        if s.dtype != "fp8_e4m3":
            raise ValueError(f"{s.dtype} needs a scale")
        return Quantized(e4m3_sat_rne(q), kept_bytes, empty, noscale)

    B, G = lay.block, lay.blocks_per_token
    if q.shape[1] != B * G:  # the rules forbid it; pad with zeros (amax unchanged) to be total
        q = torch.nn.functional.pad(q, (0, B * G - q.shape[1]))
    blocks = q.reshape(N, G, B)
    amax = blocks.abs().amax(dim=-1)
    scale, mult, e = block_scales(spec, amax)
    v = (blocks * mult[..., None]).reshape(N, G * B)[:, :lay.quant_span.size]
    if s.dtype == "fp8_e4m3":
        codes = e4m3_sat_rne(v)
    elif s.dtype == "fp4_e2m1":
        codes = pack_nibbles(e2m1_codes(v))
    else:
        raise ValueError(f"unknown store dtype {s.dtype!r}")
    if s.scale == "ue8m0":
        assert e is not None  # block_scales returns the exponent for ue8m0
        sbytes = (e + 127).to(torch.uint8)
    else:
        sbytes = _le_bytes(scale)
    return Quantized(codes, kept_bytes, sbytes, scale)


# ---------------------------------------------------------------------------------------------
# §7 rows and the paged store


def _part_bytes(qz: Quantized) -> dict[str, torch.Tensor]:
    return {"values": qz.values, "rope": qz.kept}


def pack_row(spec: Spec, qz: Quantized) -> torch.Tensor:
    """A token's row [N, row_bytes], its parts placed as `layout.row_parts()` says."""
    lay = _layout(spec)
    parts = _part_bytes(qz)
    N = qz.values.shape[0]
    row = torch.empty((N, lay.row_bytes), dtype=torch.uint8, device=qz.values.device)
    for r in lay.row_parts():
        b = parts[r.name]
        if b.shape[1] != r.size:
            raise AssertionError(f"{r.name}: {b.shape[1]} B for a {r.size}-B part")
        row[:, r.offset:r.end] = b
    return row


def token_byte_columns(spec: Spec | L.Layout) -> torch.Tensor:
    """int64 [P, written_bytes_per_token]: for a token at slot t of a page, the page column of each
    byte it writes, in the order `Layout.owned` gives (its row, then its scales)."""
    lay = _layout(spec)
    cols: list[list[int]] = [[] for _ in range(lay.page_size)]
    for o in lay.owned():
        cols[o.token] += range(o.offset, o.offset + o.size)
    return torch.tensor(cols, dtype=torch.int64).reshape(lay.page_size, lay.written_bytes_per_token)


def _slots(lay: L.Layout, cache: torch.Tensor, locs: torch.Tensor):
    num_slots = lay.slots(cache.shape[0])
    locs = locs.to(device=cache.device, dtype=torch.int64)
    valid = (locs >= 0) & (locs < num_slots)
    page = torch.div(locs, lay.page_size, rounding_mode="floor")
    slot = locs - page * lay.page_size
    return valid, page, slot


def _check_cache(lay: L.Layout, cache: torch.Tensor) -> None:
    if cache.dtype != torch.uint8 or cache.dim() != 2 or cache.shape[1] != lay.page_bytes:
        raise ValueError(f"cache must be uint8 [num_pages, {lay.page_bytes}], got "
                         f"{cache.dtype} {tuple(cache.shape)}")


def store(spec: Spec, cache: torch.Tensor, out_loc: torch.Tensor, row: torch.Tensor,
          scale_bytes: torch.Tensor) -> None:
    """Write each token's row and scale bytes at its `out_loc` slot; locs < 0 or >= num_slots
    are skipped. Duplicate valid locs are a caller error (the kernel races on them too)."""
    lay = _layout(spec)
    _check_cache(lay, cache)
    valid, page, slot = _slots(lay, cache, out_loc)
    cols = token_byte_columns(lay).to(cache.device)
    data = torch.cat((row, scale_bytes.reshape(row.shape[0], scale_bytes.shape[-1] if scale_bytes.dim() else 0)), dim=1)
    if data.shape[1] != cols.shape[1]:
        raise AssertionError(f"{data.shape[1]} B per token for {cols.shape[1]} columns")
    # boolean selection: the one host sync of the reference (a data-dependent count)
    page, slot, data = page[valid], slot[valid], data[valid]
    cache[page[:, None], cols[slot]] = data


def encode(spec: Spec, x, weight, bias, freqs, positions) -> tuple[torch.Tensor, Quantized]:
    """(row bytes [N, row_bytes], Quantized) of every token, before the store."""
    qz = quantize(spec, prequant(spec, x, weight, bias, freqs, positions))
    return pack_row(spec, qz), qz


def read_plan(plan: torch.Tensor, source: str) -> dict[str, torch.Tensor]:
    """Each field of SGLang's plan rows (uint8 [N, PLAN_BYTES[source]], little-endian, kgen.layout's
    PLAN_FIELDS[source]) as int64 [N], on the plan's device."""
    what = source.replace("_", " ")
    if plan.dtype != torch.uint8 or plan.dim() != 2 or plan.shape[1] != L.PLAN_BYTES[source]:
        raise ValueError(f"a {what} is uint8 [N, {L.PLAN_BYTES[source]}], got {plan.dtype} {tuple(plan.shape)}")
    b, out, offset = plan.to(torch.int64), {}, 0
    for name, kind in L.PLAN_FIELDS[source]:
        size = int(kind[2:])
        v = b[:, offset]
        for i in range(1, size):
            v = v | (b[:, offset + i] << (8 * i))
        out[name] = torch.where(v >= 1 << (8 * size - 1), v - (1 << 8 * size), v) if kind[1] == "i" else v
        offset += size
    return out


def make_plan(source: str, **fields: torch.Tensor) -> torch.Tensor:
    """uint8 [N, PLAN_BYTES[source]] plan rows from their fields (kgen.layout's PLAN_FIELDS[source]);
    tests and benchmarks, SGLang's planner writes these in an engine. A value outside its field's type
    is refused (SGLang's planner packs, e.g., ragged ids in 16 bits)."""
    what = source.replace("_", " ")
    n = len(next(iter(fields.values())))
    out, offset = torch.zeros(n, L.PLAN_BYTES[source], dtype=torch.uint8), 0
    for name, kind in L.PLAN_FIELDS[source]:
        size, signed = int(kind[2:]), kind[1] == "i"
        v = fields[name].to(torch.int64).reshape(-1)
        lo, hi = (-(1 << (8 * size - 1)), 1 << (8 * size - 1)) if signed else (0, 1 << 8 * size)
        if v.numel() and (int(v.min()) < lo or int(v.max()) >= hi):
            bad = int(v.min()) if int(v.min()) < lo else int(v.max())
            raise ValueError(f"{name} {bad} does not fit the {what}'s {'int' if signed else 'uint'}{8 * size}")
        v = v & ((1 << 8 * size) - 1)
        for i in range(size):
            out[:, offset + i] = (v >> (8 * i)) & 0xFF
        offset += size
    return out


def plan_positions(spec: Spec, plan: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(positions int64 [N], emit bool [N]) of SGLang's DecodePlan rows (`read_plan`): position =
    seq_len - R; a token is written only where seq_len % R == 0, seq_len >= R, write_loc >= 0 and
    read_page_0 >= 0 (R = positions.compress_ratio). Positions of tokens that are not written are
    clamped to 0 (their freqs row is never used)."""
    f = read_plan(plan, "decode_plan")
    seq_len, ratio = f["seq_len"], spec.positions.compress_ratio
    emit = (f["write_loc"] >= 0) & (f["read_page_0"] >= 0) & (seq_len >= ratio) & (seq_len % ratio == 0)
    return torch.where(emit, seq_len - ratio, torch.zeros_like(seq_len)), emit


def make_decode_plan(seq_len: torch.Tensor, write_loc: torch.Tensor, read_page_0: torch.Tensor,
                     read_page_1: torch.Tensor) -> torch.Tensor:
    """uint8 [N, 16] DecodePlan rows from the four fields (`make_plan`)."""
    return make_plan("decode_plan", seq_len=seq_len, write_loc=write_loc, read_page_0=read_page_0,
                     read_page_1=read_page_1)


def compress_plan_slots(spec: Spec, plan: torch.Tensor, out_loc: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(positions int64 [N], slots int64 [N]) of SGLang's prefill CompressPlan rows (`read_plan`), one
    row per compressed key: row i's position is seq_len - R and its slot out_loc[ragged_id] (out_loc
    holds a slot per query token, [N] like the plan). A row is skipped (slot -1, position 0) where
    seq_len is COMPRESS_PLAN_INVALID (padding), seq_len < R or ragged_id >= N (R = positions.compress_ratio)."""
    f = read_plan(plan, "compress_plan")
    seq_len, ragged = f["seq_len"], f["ragged_id"]
    n, ratio = plan.shape[0], spec.positions.compress_ratio
    emit = (seq_len != L.COMPRESS_PLAN_INVALID) & (seq_len >= ratio) & (ragged < n)
    loc = out_loc.to(torch.int64)[torch.where(emit, ragged, torch.zeros_like(ragged)).to(out_loc.device)]
    slots = torch.where(emit.to(out_loc.device), loc, torch.full_like(loc, -1))
    return torch.where(emit, seq_len - ratio, torch.zeros_like(seq_len)), slots


def make_compress_plan(seq_len: torch.Tensor, ragged_id: torch.Tensor, buffer_len: torch.Tensor,
                       read_page_0: torch.Tensor, read_page_1: torch.Tensor) -> torch.Tensor:
    """uint8 [N, 16] CompressPlan rows from the five fields (`make_plan`; seq_len COMPRESS_PLAN_INVALID:
    a padding row)."""
    return make_plan("compress_plan", seq_len=seq_len, ragged_id=ragged_id, buffer_len=buffer_len,
                     read_page_0=read_page_0, read_page_1=read_page_1)


def norm_rope_store(spec: Spec, x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None,
                    freqs: torch.Tensor, positions: torch.Tensor, out_loc: torch.Tensor,
                    cache: torch.Tensor) -> None:
    """The whole kernel: writes into `cache` (uint8 [num_pages, page_bytes]) in place the bytes
    the CUDA kernel writes for these inputs. With positions.source decode_plan, `positions` is the
    plan (`plan_positions`); with compress_plan, the prefill plan (`compress_plan_slots`)."""
    if spec.positions.source == "decode_plan":
        positions, emit = plan_positions(spec, positions)
        out_loc = torch.where(emit.to(out_loc.device), out_loc, torch.full_like(out_loc, -1))
    elif spec.positions.source == "compress_plan":
        positions, out_loc = compress_plan_slots(spec, positions, out_loc)
    row, qz = encode(spec, x, weight, bias, freqs, positions)
    store(spec, cache, out_loc, row, qz.scale_bytes)


# ---------------------------------------------------------------------------------------------
# decoding (inspection, precision reports)


def _e2m1_value(nib: torch.Tensor) -> torch.Tensor:
    table = torch.tensor(E2M1_VALUES, dtype=torch.float32, device=nib.device)
    mag = table[(nib & 7).long()]
    return torch.where((nib & 8) != 0, -mag, mag)


def decode(spec: Spec | L.Layout, cache: torch.Tensor, locs: torch.Tensor,
           dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
    """Read tokens back from the cache: (values [n, head_dim] = code value * block scale, in
    `dtype`; scales fp32 [n, blocks]). Locs outside the cache give NaN rows.

    `dtype=torch.float64` makes every value exact (a code has at most 11 significant bits, a scale
    24, so the product fits a double's 53); in fp32 a code times an fp32 (non power-of-two) scale is
    rounded once."""
    lay = _layout(spec)
    _check_cache(lay, cache)
    valid, page, slot = _slots(lay, cache, locs)
    cols = token_byte_columns(lay).to(cache.device)
    page_c = torch.where(valid, page, torch.zeros_like(page))
    slot_c = torch.where(valid, slot, torch.zeros_like(slot))
    values, scales = _decode_token_bytes(lay, cache[page_c[:, None], cols[slot_c]], dtype)
    nan = torch.tensor(float("nan"), device=cache.device)
    values = torch.where(valid[:, None], values, nan)
    scales = torch.where(valid[:, None], scales, nan)
    return values, scales


def decode_pages(spec: Spec | L.Layout, pages: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Every slot of the pages given (uint8 [n, page_bytes]), in page order: values [n * P, head_dim]
    exactly as `decode` gives them for those slots. A page at a time: one gather by the [P, bytes]
    column table instead of a byte index per token, so a whole sequence decodes at about the cost
    of a copy (the Torch scorers read with it)."""
    lay = _layout(spec)
    _check_cache(lay, pages)
    cols = token_byte_columns(lay).to(pages.device)
    values, _ = _decode_token_bytes(lay, pages[:, cols].reshape(-1, lay.written_bytes_per_token), dtype)
    return values


def _decode_token_bytes(lay: L.Layout, data: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """`decode` of the bytes tokens own (uint8 [n, row + scale bytes], `token_byte_columns` order)."""
    s = lay.spec.store
    n_tok = data.shape[0]
    row, sb = data[:, :lay.row_bytes], data[:, lay.row_bytes:]
    parts = {r.name: row[:, r.offset:r.end] for r in lay.row_parts()}
    G = lay.blocks_per_token if lay.scale_unit else 0

    if G == 0:
        scales = torch.zeros((n_tok, 0), dtype=torch.float32, device=data.device)
    elif s.scale == "ue8m0":
        scales = pow2(sb.to(torch.int32) - 127)
    else:
        scales = sb.contiguous().view(torch.float32)

    qb = parts["values"].contiguous()
    if s.dtype in _HALF:
        qv = qb.view(_HALF[s.dtype]).to(torch.float32)
    elif s.dtype == "fp8_e4m3":
        qv = qb.view(torch.float8_e4m3fn).to(torch.float32)
    else:
        nib = torch.stack((qb & 15, qb >> 4), dim=-1).reshape(n_tok, -1)
        qv = _e2m1_value(nib)
    if G:
        B = lay.block
        pad = B * G - qv.shape[1]
        qv = torch.nn.functional.pad(qv, (0, pad)).reshape(n_tok, G, B)
        qv = (qv.to(dtype) * scales.to(dtype)[..., None]).reshape(n_tok, G * B)[:, :lay.quant_span.size]

    values = torch.empty((n_tok, lay.spec.head_dim), dtype=dtype, device=data.device)
    values[:, lay.quant_span.start:lay.quant_span.end] = qv
    if lay.kept_span.size:
        assert s.rope_dtype is not None  # layout.spans: a kept span exists only with rope_dtype set
        kv = parts["rope"].contiguous().view(_HALF[s.rope_dtype]).to(dtype)
        values[:, lay.kept_span.start:lay.kept_span.end] = kv
    return values, scales


# ---------------------------------------------------------------------------------------------
# test inputs

