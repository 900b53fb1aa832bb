"""The whole-cache comparison of `kgen test`: the kernel's cache against the reference's, byte for byte.

Every differing byte is classified by the page's byte ownership (kgen.layout `Layout.byte_owners`):
value codes, kept RoPE values, scales, or bytes no token owns ("stray" writes). Differing values are
decoded as sign-magnitude codes and their code distance is reported (1 = adjacent codes).

Pass rules (`Comparison.ok`):
  * bf16/fp16 stores: every byte equal;
  * quantized stores (fp8, fp4, incl. kept bf16 RoPE dims): no stray byte, every scale byte equal,
    every differing value exactly one code away, and at most max(1, 1e-4 x written values) of them
    (>= 99.99 % of the written values equal). The reference follows the kernel's reduction order
    (docs/numerics.md), so any difference is reported with examples for a human to explain;
  * `numerics: fast` (fp8 stores with scale none or fp32, rule `numerics`): no stray byte, every differing
    value at most one code away, every fp32 scale within FAST_SCALE_ULPS ulps; all counted, none capped.

Plain torch on any device (tests/test_runtime.py runs it on CPU).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

from .layout import VALUE_BITS, Layout, compute
from .spec import Spec

QUANT_TOLERANCE = 1e-4  # fraction of written values allowed to differ by one code (quantized stores)
FAST_SCALE_ULPS = 16  # numerics fast: fp32 scales this close to the exact reference's (docs/numerics.md;
# the H200 measured at most 7 over 1M tokens, bench/results/h200-2026-11-30/writer2)
MAX_CLASSIFIED = 1 << 24  # differing bytes decoded in detail (the rest are only counted)
MAX_EXAMPLES = 8

ROLE_NONE, ROLE_VALUE, ROLE_KEPT, ROLE_SCALE = 0, 1, 2, 3
ROLE_NAMES = {ROLE_NONE: "unowned", ROLE_VALUE: "value", ROLE_KEPT: "kept", ROLE_SCALE: "scale"}


# ---------------------------------------------------------------------------------------------
# the page's byte map


@dataclass(frozen=True)
class ByteMap:
    """Per byte of a page: who owns it (role), where its element starts, and the element's width."""

    role: list[int]  # ROLE_*
    start: list[int]  # column of the first byte of the element this byte belongs to
    value_bytes: int  # bytes per element of the quantized span (1 for fp4: two codes per byte)
    value_bits: int  # bits per code of the quantized span
    scale_bytes: int  # bytes per scale (0 = no scales)


ROLE_OF = {None: ROLE_NONE, "values": ROLE_VALUE, "rope": ROLE_KEPT, "scale": ROLE_SCALE}


def byte_map(lay: Layout) -> ByteMap:
    """kgen.layout's byte ownership (`Layout.byte_owners`) as the comparison indexes it."""

    roles, start = lay.byte_owners()
    vbits = VALUE_BITS[lay.spec.store.dtype]
    return ByteMap([ROLE_OF[r] for r in roles], start, max(vbits // 8, 1), vbits, lay.scale_unit)


# ---------------------------------------------------------------------------------------------
# comparison


@dataclass
class Comparison:
    variant: str
    tokens: int
    equal_bytes: int
    total_bytes: int
    fraction: float
    max_code_distance: int
    ok: bool
    written_tokens: int = 0
    written_values: int = 0
    diff_values: int = 0  # differing value elements (quantized span + kept span)
    value_fraction: float = 1.0  # equal written values / written values
    diff_bytes_by_role: dict = field(default_factory=dict)
    stray_bytes: int = 0
    scale_mismatches: int = 0
    max_scale_distance: int = 0
    distance_histogram: dict = field(default_factory=dict)
    sampled: bool = False
    examples: list = field(default_factory=list)
    reason: str = ""
    seconds: float = 0.0
    error: str | None = None

    def to_json(self) -> dict:
        d = asdict(self)
        d["fraction"] = round(self.fraction, 9)
        d["value_fraction"] = round(self.value_fraction, 9)
        return d


def _ordinal(code, bits: int):
    """Sign-magnitude code -> a position on the number line (+0 and -0 both 0); int64 tensor."""
    import torch

    code = code.to(torch.int64)
    sign = (code >> (bits - 1)) & 1
    mag = code & ((1 << (bits - 1)) - 1)
    return torch.where(sign == 1, -mag, mag)


def _gather(flat, starts, width: int):
    """Little-endian unsigned integers of `width` bytes at byte offsets `starts` (int64 tensor)."""
    import torch

    out = torch.zeros_like(starts)
    for i in range(width):
        out |= flat[starts + i].to(torch.int64) << (8 * i)
    return out


def compare_caches(spec: Spec, a, b, *, out_loc=None, tokens: int | None = None) -> Comparison:
    """Compare the kernel's cache `a` with the reference's `b` (uint8 [pages, page_bytes], any device)."""
    import torch

    lay = compute(spec)
    if a.shape != b.shape or a.dtype != torch.uint8 or b.dtype != torch.uint8:
        raise ValueError(f"caches differ in shape/dtype: {a.dtype} {tuple(a.shape)} vs {b.dtype} {tuple(b.shape)}")
    num_pages, pb = a.shape
    total = a.numel()
    n = tokens if tokens is not None else (0 if out_loc is None else int(out_loc.numel()))
    written = n
    if out_loc is not None:
        ol = out_loc.to(a.device)
        written = int(((ol >= 0) & (ol < lay.slots(num_pages))).sum())
    per_token_values = lay.quant_span.size + lay.kept_span.size
    quantized = spec.store.dtype not in ("bf16", "fp16")
    c = Comparison(variant=spec.name, tokens=n, equal_bytes=total, total_bytes=total, fraction=1.0,
                   max_code_distance=0, ok=True, written_tokens=written,
                   written_values=written * per_token_values)
    diff = a != b
    n_diff = int(diff.sum())
    if n_diff == 0:
        return c
    c.equal_bytes = total - n_diff
    c.fraction = c.equal_bytes / total
    bm = byte_map(lay)
    role = torch.tensor(bm.role, dtype=torch.int64, device=a.device)
    start = torch.tensor(bm.start, dtype=torch.int64, device=a.device)
    for rid, name in ROLE_NAMES.items():
        cnt = int((diff & (role == rid)[None, :]).sum())
        if cnt:
            c.diff_bytes_by_role[name] = cnt
    c.stray_bytes = c.diff_bytes_by_role.get("unowned", 0)

    idx = diff.reshape(-1).nonzero().squeeze(1)
    if idx.numel() > MAX_CLASSIFIED:
        idx, c.sampled = idx[:MAX_CLASSIFIED], True
    page, col = idx // pb, idx % pb
    r = role[col]
    fa, fb = a.reshape(-1), b.reshape(-1)
    hist: dict[int, int] = {}
    maxd = 0
    diff_values = 0

    def account(dist) -> None:
        nonlocal maxd, diff_values
        dist = dist[dist > 0]
        if dist.numel() == 0:
            return
        diff_values += int(dist.numel())
        maxd = max(maxd, int(dist.max()))
        vals, counts = torch.unique(dist, return_counts=True)
        for v, k in zip(vals.tolist(), counts.tolist()):
            hist[v] = hist.get(v, 0) + k

    # quantized span
    sel = r == ROLE_VALUE
    if bool(sel.any()):
        starts = torch.unique(page[sel] * pb + start[col[sel]])
        if bm.value_bits == 4:
            va, vb = _gather(fa, starts, 1), _gather(fb, starts, 1)
            for shift in (0, 4):
                account((_ordinal((va >> shift) & 15, 4) - _ordinal((vb >> shift) & 15, 4)).abs())
        else:
            w = bm.value_bytes
            account((_ordinal(_gather(fa, starts, w), 8 * w) - _ordinal(_gather(fb, starts, w), 8 * w)).abs())
    # kept RoPE span (16-bit)
    sel = r == ROLE_KEPT
    if bool(sel.any()):
        starts = torch.unique(page[sel] * pb + start[col[sel]])
        account((_ordinal(_gather(fa, starts, 2), 16) - _ordinal(_gather(fb, starts, 2), 16)).abs())
    # scales: fp32 in ulps (sign-magnitude ordinal), ue8m0 in exponent steps
    sel = r == ROLE_SCALE
    if bool(sel.any()):
        starts = torch.unique(page[sel] * pb + start[col[sel]])
        w = bm.scale_bytes
        sa, sb = _gather(fa, starts, w), _gather(fb, starts, w)
        d = (sa - sb).abs() if w == 1 else (_ordinal(sa, 32) - _ordinal(sb, 32)).abs()
        c.scale_mismatches = int((d > 0).sum())
        c.max_scale_distance = int(d.max()) if d.numel() else 0

    c.diff_values = diff_values
    c.max_code_distance = maxd
    c.distance_histogram = {str(k): v for k, v in sorted(hist.items())}
    c.value_fraction = 1.0 - diff_values / c.written_values if c.written_values else 0.0
    for i in range(min(MAX_EXAMPLES, idx.numel())):
        p, q = int(page[i]), int(col[i])
        c.examples.append({"page": p, "byte": q, "role": ROLE_NAMES[int(r[i])],
                           "token_slot": _slot_of(lay, q), "kernel": int(a[p, q]), "reference": int(b[p, q])})

    reasons = []
    if c.stray_bytes:
        reasons.append(f"{c.stray_bytes} byte(s) no token owns were changed")
    if spec.numerics == "fast":  # docs/numerics.md "Fast mode": the stated tolerance, every value counted
        if maxd > 1:
            reasons.append(f"a value is {maxd} codes away (numerics fast tolerates adjacent codes)")
        if c.max_scale_distance > FAST_SCALE_ULPS:
            reasons.append(f"a scale is {c.max_scale_distance} ulps away (numerics fast tolerates {FAST_SCALE_ULPS})")
        if c.sampled:
            reasons.append(f"more than {MAX_CLASSIFIED} differing bytes")
    elif not quantized:
        reasons.append(f"{n_diff} byte(s) differ; a {spec.store.dtype} store must match exactly")
    else:
        if c.scale_mismatches:
            reasons.append(f"{c.scale_mismatches} scale(s) differ (max distance {c.max_scale_distance})")
        if maxd > 1:
            reasons.append(f"a value is {maxd} codes away (only adjacent codes are tolerated)")
        allowed = max(1, math.floor(QUANT_TOLERANCE * c.written_values))
        if diff_values > allowed:
            reasons.append(f"{diff_values} values differ (> {allowed} = 1e-4 of {c.written_values} written)")
        if c.sampled:
            reasons.append(f"more than {MAX_CLASSIFIED} differing bytes")
    c.reason = "; ".join(reasons)
    c.ok = not reasons
    return c


def _slot_of(lay: Layout, col: int) -> int | None:
    if col < lay.rows_bytes:
        return col // lay.row_bytes
    if lay.scale_stride and col < lay.rows_bytes + lay.scale_region_bytes:
        return (col - lay.rows_bytes) // lay.scale_stride
    return None
