"""The validator's rules: each a small pure function with a stable id.

A variant rule takes `(spec, layout)` and yields every `Problem` it finds (unlocated: `loc` names
the key, the caller resolves it to file:line:col). `layout` is None when the byte math could not be
computed; rules that need it then stay silent (another rule says why).

Rules marked `twin=True` protect the kernel: the rendered source carries a `static_assert` whose
message starts with `[rule-id]`, so `--no-validate` still fails at compile time, with the same id.

Guards (`check_guards`) are the parts of rules that `render` and `compile` apply even under
`--no-validate`: values no C++ literal, identifier or path can hold (a name that is a C++ keyword, an
integer beyond 64 bits, an eps that overflows fp32, a target that is not an architecture name). Each
guard belongs to a rule and reports under its id; the rule runs it too, so `kgen validate` refuses
everything render and compile refuse.
"""

from __future__ import annotations

import math
import re
import struct
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from pydantic import BaseModel

from . import arch as A
from . import layout as L
from .diagnostics import Problem, shown
from .spec import Spec

Check = Callable[[Spec, "L.Layout | None"], Iterable[Problem]]

NAME_RE = re.compile(r"[a-z][a-z0-9_]*")
NAME_MAX = 64
PAGE_SIZE_MAX = 65536
PAGE_BYTES_LIMIT = 1 << 31
HEAD_DIM_RANGE = (32, 1024)
MAX_TOKENS_PER_WARP = 8
MAX_NUM_TOKENS = 2**31 - 1  # the kernel ABI's int32 num_tokens
FAST_SCALES = ("none", "fp32")  # numerics fast: scales whose tolerance is stated (docs/numerics.md)
INT64_RANGE = (-(1 << 63), (1 << 63) - 1)  # the rendered config's `long long` constants
# C++ keywords and alternative tokens (C++20): a name becomes a struct, namespace and directory name
CXX_KEYWORDS = frozenset("""
    alignas alignof and and_eq asm auto bitand bitor bool break case catch char char8_t char16_t char32_t
    class compl concept const consteval constexpr constinit const_cast continue co_await co_return
    co_yield decltype default delete do double dynamic_cast else enum explicit export extern false float
    for friend goto if inline int long mutable namespace new noexcept not not_eq nullptr operator or
    or_eq private protected public register reinterpret_cast requires return short signed sizeof static
    static_assert static_cast struct switch template this thread_local throw true try typedef typeid
    typename union unsigned using virtual void volatile wchar_t while xor xor_eq
    """.split())


@dataclass(frozen=True)
class Rule:
    id: str
    summary: str
    check: Check
    twin: bool  # has a static_assert twin in the rendered kernel


RULES: dict[str, Rule] = {}
GUARDS: dict[str, Check] = {}  # rule id -> the part of that rule render/compile apply under --no-validate


def guard(rule_id: str):
    """Register the guard of rule `rule_id` (the rule itself must yield from it too)."""

    def register(fn: Check) -> Check:
        assert rule_id not in GUARDS, rule_id
        GUARDS[rule_id] = fn
        return fn

    return register


def rule(rule_id: str, summary: str, *, twin: bool = False):
    def register(fn: Check) -> Check:
        assert rule_id not in RULES, rule_id
        RULES[rule_id] = Rule(rule_id, summary, fn, twin)
        return fn

    return register


def layout_or_none(spec: Spec) -> L.Layout | None:
    """The byte layout, or None where the numbers cannot describe bytes (a rule says which)."""
    try:
        return L.compute(spec)
    except (ValueError, ZeroDivisionError, OverflowError):
        return None


def check_variant(spec: Spec) -> tuple[L.Layout | None, list[Problem]]:
    """Run every variant rule; return the layout (if computable) and all problems found."""
    lay = layout_or_none(spec)
    problems: list[Problem] = []
    for r in RULES.values():
        problems.extend(r.check(spec, lay))
    # a number beyond 64 bits nearly always breaks its own field's rule too: one problem per key
    taken = {p.loc for p in problems if p.rule != "int-range" and p.severity == "error"}
    return lay, [p for p in problems if p.rule != "int-range" or p.loc not in taken]


def check_guards(spec: Spec) -> list[Problem]:
    """What render and compile refuse even under --no-validate (each under its rule's id)."""
    assert set(GUARDS) <= set(RULES), set(GUARDS) - set(RULES)
    lay = layout_or_none(spec)
    return [p for g in GUARDS.values() for p in g(spec, lay)]


def _p(rule_id: str, loc: tuple, message: str, fix: str, severity="error") -> Problem:
    return Problem(rule_id, message, loc=loc, fix=fix, severity=severity)


def _ratio(a: int, b: int) -> str:
    """a / b for a message, exact where a float cannot hold it (huge user numbers)."""
    try:
        return f"{a / b:g}"
    except (OverflowError, ZeroDivisionError):
        return f"{a}/{b}"


def _lanes(n: int, V) -> str:
    """'64 dims / 4 per lane = 16 lanes' style arithmetic for messages."""
    return f"{n} dims / {V} per lane = {_ratio(n, V)} lanes"


def head_dim_ok(spec: Spec) -> bool:
    """The warp mapping exists (rule head-dim). Rules about lanes stay silent when it does not:
    one wrong head_dim is one problem, not one per lane-derived check."""
    h = spec.head_dim
    lo, hi = HEAD_DIM_RANGE
    return lo <= h <= hi and h % L.WARP == 0 and L.is_pow2(h // L.WARP)


def rope_dim_ok(spec: Spec) -> bool:
    r = spec.rope.dim
    return 0 <= r <= spec.head_dim and r % 2 == 0


# ---------------------------------------------------------------------------------------------
# names and targets


def check_name(value, loc: tuple, what: str) -> Iterator[Problem]:
    if not isinstance(value, str) or not NAME_RE.fullmatch(value) or len(value) > NAME_MAX:
        text = shown(value)
        yield _p("name", loc, f"{what} '{text[:NAME_MAX + 16]}' is not an identifier: it must match "
                 f"[a-z][a-z0-9_]* and have at most {NAME_MAX} characters (it names files and symbols)",
                 "use lower-case letters, digits and underscores, starting with a letter")
    elif value in CXX_KEYWORDS:
        yield _p("name", loc, f"{what} '{value}' is a C++ keyword: it names a struct and a namespace in the "
                 "generated C++", f"use another name, e.g. {value}_v")


@guard("name")
def guard_name(spec: Spec, lay) -> Iterator[Problem]:
    yield from check_name(spec.name, ("name",), "name")


@rule("name", "names are identifiers (not C++ keywords)")
def rule_name(spec: Spec, lay) -> Iterator[Problem]:
    yield from guard_name(spec, lay)


@guard("targets")
def guard_targets(spec: Spec, lay) -> Iterator[Problem]:
    """A target names a cache directory and an NVRTC option: only sm_<digits>[a|f] ever reaches them."""
    for i, t in enumerate(spec.targets):
        if not A.ARCH_RE.fullmatch(t):
            yield _p("targets", ("targets", i), f"'{shown(t)[:40]}' is not an architecture name like sm_90a",
                     "write sm_<major><minor>[a|f], e.g. sm_90a")


@rule("targets", "each target is an architecture NVRTC can compile for")
def rule_targets(spec: Spec, lay) -> Iterator[Problem]:
    if not spec.targets:
        yield _p("targets", ("targets",), "no targets", "list at least one, e.g. [sm_90a]")
    yield from guard_targets(spec, lay)
    seen = set()
    for i, t in enumerate(spec.targets):
        if t in seen:
            yield _p("targets", ("targets", i), f"target {t} is listed twice", "remove the duplicate", "warning")
        seen.add(t)
        if A.ARCH_RE.fullmatch(t):
            bad = A.problem(t)
            if bad is not None:
                yield _p("targets", ("targets", i), *bad)


# ---------------------------------------------------------------------------------------------
# dims and the warp mapping


@rule("head-dim", "head_dim is 32 lanes x a power-of-two count per lane: 32, 64, 128, 256, 512 or 1024", twin=True)
def rule_head_dim(spec: Spec, lay) -> Iterator[Problem]:
    h = spec.head_dim
    lo, hi = HEAD_DIM_RANGE
    if not head_dim_ok(spec):
        yield _p("head-dim", ("head_dim",), f"head_dim {h} cannot be spread over a warp: it must be 32 lanes "
                 f"x a power-of-two count of values in [{lo}, {hi}] (got {h} / 32 = {_ratio(h, 32)} per lane)",
                 "use 32, 64, 128, 256, 512 or 1024")


@rule("rope-dim", "rope.dim is even and at most head_dim (0 = no RoPE)", twin=True)
def rule_rope_dim(spec: Spec, lay) -> Iterator[Problem]:
    r, h = spec.rope.dim, spec.head_dim
    if not rope_dim_ok(spec):
        yield _p("rope-dim", ("rope", "dim"), f"rope.dim {r} must be even and within [0, head_dim = {h}]",
                 "use an even count of rotated dims, e.g. 64, or 0 for no RoPE")


@rule("rope-lanes", "the rotated span is made of whole lanes and each pair meets in one place", twin=True)
def rule_rope_lanes(spec: Spec, lay) -> Iterator[Problem]:
    if lay is None or spec.rope.dim <= 0 or not head_dim_ok(spec) or not rope_dim_ok(spec):
        return
    r, V = spec.rope.dim, int(lay.values_per_lane)
    if r % V:
        yield _p("rope-lanes", ("rope", "dim"), f"the rotated span is not whole lanes: {_lanes(r, V)}",
                 f"make rope.dim a multiple of head_dim/32 = {V}")
    elif spec.rope.style == "interleaved" and V % 2:
        yield _p("rope-lanes", ("rope", "style"), f"interleaved pairs (2i, 2i+1) would straddle lanes: "
                 f"each lane holds {V} value(s) (head_dim {spec.head_dim} / 32)",
                 "use style neox, or head_dim >= 64")
    elif spec.rope.style == "neox" and (r // 2) % V:
        yield _p("rope-lanes", ("rope", "dim"), f"neox pairs (i, i + {r // 2}) must be whole lanes apart: "
                 f"{r // 2} dims / {V} per lane = {_ratio(r // 2, V)} lanes", f"make rope.dim a multiple of {2 * V}")


@rule("hadamard", "the Walsh-Hadamard transform needs a power-of-two head_dim", twin=True)
def rule_hadamard(spec: Spec, lay) -> Iterator[Problem]:
    if spec.hadamard and not L.is_pow2(spec.head_dim):
        yield _p("hadamard", ("hadamard",), f"Walsh-Hadamard needs a power-of-two head_dim (got {spec.head_dim})",
                 "set hadamard: false or use a power-of-two head_dim")


def fp32(x: float) -> float | None:
    """`x` rounded to the nearest fp32, as the kernel holds it (None: a finite x that overflows to inf)."""
    try:
        return struct.unpack("<f", struct.pack("<f", x))[0]
    except OverflowError:
        return None


def _fp32_guard(rule_id: str, loc: tuple, value: float) -> Iterator[Problem]:
    """A finite value beyond fp32: the config header cannot spell it as an fp32 literal."""
    if math.isfinite(value) and fp32(value) is None:
        yield _p(rule_id, loc, f"{loc[-1]} {value} is not a finite fp32 (it overflows to inf; the largest "
                 "fp32 is about 3.4e38): the kernel, which computes in fp32, cannot express it",
                 "use a value below 3.4e38")


def _positive_fp32(rule_id: str, loc: tuple, value: float, what: str, fix: str) -> Iterator[Problem]:
    """finite and > 0 as the fp32 the kernel computes with (the overflow case is the guard's)."""
    if not math.isfinite(value) or value <= 0:
        yield _p(rule_id, loc, f"{what} must be finite and > 0 (got {value})", fix)
    elif fp32(value) == 0.0:
        yield _p(rule_id, loc, f"{what} {value} rounds to 0 as fp32, which the kernel computes in",
                 "use a value of at least 1.0e-45 (1.0e-38 avoids subnormals)")


@guard("norm-eps")
def guard_norm_eps(spec: Spec, lay) -> Iterator[Problem]:
    yield from _fp32_guard("norm-eps", ("norm", "eps"), spec.norm.eps)


@rule("norm-eps", "norm.eps is finite and > 0 as an fp32", twin=True)
def rule_norm_eps(spec: Spec, lay) -> Iterator[Problem]:
    problems = list(guard_norm_eps(spec, lay))
    yield from problems
    if spec.norm.kind != "none" and not problems:
        yield from _positive_fp32("norm-eps", ("norm", "eps"), spec.norm.eps, "norm.eps", "use e.g. 1.0e-6")


# ---------------------------------------------------------------------------------------------
# store and scales

SCALES_FOR = {
    "bf16": ("none",),
    "fp16": ("none",),
    "fp8_e4m3": ("fp32", "fp32_pow2", "ue8m0", "none"),
    "fp4_e2m1": ("ue8m0",),
}
FP4_BLOCK = 32


@rule("store-scale", "the store dtype takes this scale kind", twin=True)
def rule_store_scale(spec: Spec, lay) -> Iterator[Problem]:
    s = spec.store
    allowed = SCALES_FOR[s.dtype]
    if s.scale not in allowed:
        yield _p("store-scale", ("store", "scale"), f"{s.dtype} takes scale {' or '.join(allowed)} (got {s.scale})",
                 f"set store.scale: {allowed[0]}")
    if s.dtype == "fp4_e2m1" and s.block is not None and s.block != FP4_BLOCK:
        yield _p("store-scale", ("store", "block"), f"fp4_e2m1 needs scale ue8m0 with block {FP4_BLOCK} "
                 f"(got {s.scale}, block {s.block})", f"set store.block: {FP4_BLOCK}")
    if s.dtype == "fp4_e2m1" and s.block is None and lay is not None and lay.quant_span.size != FP4_BLOCK:
        yield _p("store-scale", ("store",), f"fp4_e2m1 needs block {FP4_BLOCK}; the default block is the "
                 f"whole quantized span ({lay.quant_span.size})", f"set store.block: {FP4_BLOCK}")


@rule("store-block", "the scale block divides the quantized span and is one aligned warp reduction", twin=True)
def rule_store_block(spec: Spec, lay) -> Iterator[Problem]:
    s = spec.store
    if s.block is not None and s.block <= 0:  # with or without a scale: no byte math has such a block
        yield _p("store-block", ("store", "block"), f"block must be positive (got {s.block})",
                 "remove store.block (default: the whole quantized span) or give a positive count")
        return
    if lay is None or s.scale == "none":
        return
    b, n = lay.block, lay.quant_span.size
    loc = ("store", "block")
    if n % b:
        yield _p("store-block", loc, f"block {b} does not divide the quantized span of {n} dims "
                 f"({n} / {b} = {_ratio(n, b)})", "pick a block that divides it")
        return
    if not head_dim_ok(spec):
        return
    V = int(lay.values_per_lane)
    if b % V:
        yield _p("store-block", loc, f"block {b} is not whole lanes: {_lanes(b, V)}", f"use a multiple of {V}")
        return
    lanes = b // V
    if not L.is_pow2(lanes) or lanes > L.WARP:
        yield _p("store-block", loc, f"block {b} spans {lanes} lanes ({b} / {V} per lane); one warp reduction "
                 f"covers a power of two up to 32 lanes", f"use {V} x a power of two up to {32 * V}")
    elif (lay.quant_span.start // V) % lanes:
        yield _p("store-block", loc, f"blocks of {lanes} lanes start at lane {lay.quant_span.start // V}, "
                 f"not a multiple of {lanes}", "pick a block that aligns with the quantized span")


@rule("store-rope-dtype", "rope_dtype only with a quantized store and RoPE", twin=True)
def rule_store_rope_dtype(spec: Spec, lay) -> Iterator[Problem]:
    s = spec.store
    if s.rope_dtype is None:
        return
    if s.dtype in ("bf16", "fp16"):
        yield _p("store-rope-dtype", ("store", "rope_dtype"), f"rope_dtype keeps RoPE dims unquantized, but "
                 f"the store ({s.dtype}) is not quantized", "remove store.rope_dtype")
    elif spec.rope.dim == 0:
        yield _p("store-rope-dtype", ("store", "rope_dtype"), "rope_dtype is set but rope.dim is 0",
                 "remove store.rope_dtype or set rope.dim")
    elif spec.rope.dim >= spec.head_dim:
        yield _p("store-rope-dtype", ("store", "rope_dtype"), f"rope_dtype with rope.dim {spec.rope.dim} = "
                 f"head_dim leaves nothing to quantize", "store bf16 instead")


@guard("store-amax-floor")
def guard_store_amax_floor(spec: Spec, lay) -> Iterator[Problem]:
    yield from _fp32_guard("store-amax-floor", ("store", "amax_floor"), spec.store.amax_floor)


@rule("store-amax-floor", "amax_floor is finite and > 0 as an fp32 for scaled stores", twin=True)
def rule_store_amax_floor(spec: Spec, lay) -> Iterator[Problem]:
    s = spec.store
    problems = list(guard_store_amax_floor(spec, lay))
    yield from problems
    if s.scale != "none" and not problems:
        yield from _positive_fp32("store-amax-floor", ("store", "amax_floor"), s.amax_floor, "amax_floor",
                                  "use e.g. 1.0e-4 (a zero amax would give a zero scale)")


# ---------------------------------------------------------------------------------------------
# page layout


@rule("page-size", "page_size is a power of two in [1, 65536]", twin=True)
def rule_page_size(spec: Spec, lay) -> Iterator[Problem]:
    P = spec.layout.page_size
    if not (L.is_pow2(P) and P <= PAGE_SIZE_MAX):
        yield _p("page-size", ("layout", "page_size"), f"page_size {P} must be a power of two in "
                 f"[1, {PAGE_SIZE_MAX}] (the kernel splits a slot with a shift and a mask)",
                 f"use {1 << max(0, min(16, P.bit_length() - 1)) if P > 0 else 64}")


def page_align_ok(spec: Spec) -> bool:
    return 1 <= spec.layout.page_align < PAGE_BYTES_LIMIT


@rule("page-align", "page_align is in [1, 2^31)", twin=True)
def rule_page_align(spec: Spec, lay) -> Iterator[Problem]:
    a = spec.layout.page_align
    if not page_align_ok(spec):
        yield _p("page-align", ("layout", "page_align"), f"page_align must be in [1, 2^31) (got {a})",
                 "use 1 for no rounding")


@rule("scale-stride", "the scale slot holds a token's scales, aligned for them", twin=True)
def rule_scale_stride(spec: Spec, lay) -> Iterator[Problem]:
    st = spec.layout.scale_stride
    if st is None or lay is None:
        if st is not None and st < 0:
            yield _p("scale-stride", ("layout", "scale_stride"), f"scale_stride {st} is negative", "remove it")
        return
    need, unit = lay.scale_bytes, lay.scale_unit
    if st < need:
        yield _p("scale-stride", ("layout", "scale_stride"), f"scale_stride {st} B is less than a token's scales "
                 f"need: {lay.blocks_per_token} x {unit} B = {need} B", f"set scale_stride: {need} (or remove it)")
    elif unit and st % unit:
        yield _p("scale-stride", ("layout", "scale_stride"), f"scale_stride {st} B is not a multiple of the "
                 f"{unit}-B scale", f"use {-(-st // unit) * unit}")


@rule("layout-align", "rows, RoPE part and scale region are aligned for the kernel's vector stores", twin=True)
def rule_layout_align(spec: Spec, lay) -> Iterator[Problem]:
    if lay is None or not head_dim_ok(spec):
        return
    bits = L.VALUE_BITS[spec.store.dtype]
    V = lay.values_per_lane
    if V * bits % 8:
        yield _p("layout-align", ("store", "dtype"), f"a lane holds head_dim {spec.head_dim} / 32 = {V} value(s) "
                 f"x {bits} bit = {V * bits} bit, not whole bytes: lanes cannot store a fraction of a byte",
                 f"use head_dim >= {32 * 8 // bits} for {spec.store.dtype}")
        return
    vec = L.store_vector_bytes(lay)
    kvec = L.kept_vector_bytes(lay)
    checks = [
        ("row_bytes", lay.row_bytes, vec, ("store", "dtype")),
        ("quantized part offset", lay.quant_row_offset, vec, ("store", "rope_dtype")),
    ]
    if kvec:
        checks += [("RoPE part offset", lay.kept_row_offset, kvec, ("store", "rope_dtype")),
                   ("row_bytes", lay.row_bytes, kvec, ("store", "rope_dtype"))]
    # one problem per offending key, listing every misaligned quantity it causes
    failed: dict[tuple, list[str]] = {}
    for what, value, width, loc in checks:
        if width and value % width:
            text = f"{what} = {value} B is not a multiple of the {width}-B vector store each lane issues"
            if text not in failed.setdefault(loc, []):
                failed[loc].append(text)
    for loc, texts in failed.items():
        yield _p("layout-align", loc, f"{'; '.join(texts)} ({lay.bytes_per_token_formula()})",
                 "change head_dim, rope.dim or dtypes")
    need = max(vec, kvec, lay.scale_unit if lay.scale_unit > 1 else 1)
    if lay.page_bytes % need:
        yield _p("layout-align", ("layout", "page_align"), f"page_bytes {lay.page_bytes} is not a multiple of "
                 f"{need} B, so rows of the next page lose their store alignment ({lay.page_bytes_formula()})",
                 f"set page_align to a multiple of {need}")
    if lay.scale_unit > 1 and lay.scale_region_offset % lay.scale_unit:
        yield _p("layout-align", ("layout", "page_size"), f"the scale region starts at {lay.scale_region_offset} "
                 f"(= {lay.page_size} tokens x {lay.row_bytes} B), not a multiple of the {lay.scale_unit}-B scale",
                 "change page_size or head_dim")


@guard("page-bytes-limit")
def guard_page_bytes(spec: Spec, lay) -> Iterator[Problem]:
    """Every offset the config header spells is at most the page's bytes: those must fit `long long`."""
    if lay is not None and lay.page_bytes > INT64_RANGE[1]:
        yield _p("page-bytes-limit", ("layout", "page_size"), f"a page of {lay.page_bytes} B "
                 f"({lay.page_bytes_formula()}) does not fit a 64-bit integer", "use a smaller page_size")


@rule("page-bytes-limit", "a page is smaller than 2^31 bytes (32-bit offsets)", twin=True)
def rule_page_bytes_limit(spec: Spec, lay) -> Iterator[Problem]:
    problems = list(guard_page_bytes(spec, lay))
    yield from problems
    # a page_align out of range is the page-align rule's problem (it alone rounds the page past 2^31)
    if not problems and lay is not None and lay.page_bytes >= PAGE_BYTES_LIMIT and page_align_ok(spec):
        yield _p("page-bytes-limit", ("layout", "page_size"), f"a page of {lay.page_bytes} B "
                 f"({lay.page_bytes_formula()}) does not fit 32-bit offsets (< 2^31 = {PAGE_BYTES_LIMIT})",
                 "use a smaller page_size")


@rule("host", "the host's allocation matches kgen's byte math")
def rule_host(spec: Spec, lay) -> Iterator[Problem]:
    if spec.host is None or lay is None:
        return
    h = spec.host
    if h.bytes_per_token is not None and h.bytes_per_token != lay.bytes_per_token:
        yield _p("host", ("host", "bytes_per_token"), f"the host allocates {h.bytes_per_token} B/token but the "
                 f"kernel writes {lay.bytes_per_token} B/token: {lay.bytes_per_token_formula()}",
                 f"set host.bytes_per_token: {lay.bytes_per_token}, or change the store")
    if h.page_bytes is not None and h.page_bytes != lay.page_bytes:
        yield _p("host", ("host", "page_bytes"), f"the host allocates pages of {h.page_bytes} B but the kernel "
                 f"expects {lay.page_bytes} B: {lay.page_bytes_formula()}",
                 f"set host.page_bytes: {lay.page_bytes}, or change the store/layout")


COMPRESS_RATIO_MAX = 1 << 16


def twin_limits() -> dict[str, int]:
    """The numbers the kernel's static_assert twins compare against (templates/include/kgen/checks.cuh),
    by their C++ name: kgen.render writes them into every variant's config, so a header re-derives the
    rules' logic from them and never types a number this module (or kgen.arch) owns."""
    return {
        "kPageSizeMax": PAGE_SIZE_MAX,
        "kPageBytesLimit": PAGE_BYTES_LIMIT,
        "kHeadDimMin": HEAD_DIM_RANGE[0],
        "kHeadDimMax": HEAD_DIM_RANGE[1],
        "kMaxWarpsPerBlock": A.MAX_THREADS_PER_BLOCK // L.WARP,
        "kMaxTokensPerWarp": MAX_TOKENS_PER_WARP,
        "kMaxWarpsPerSm": A.MAX_WARPS_PER_SM,
        "kFp4Block": FP4_BLOCK,
        "kMaxNumTokens": MAX_NUM_TOKENS,
        "kCompressRatioMax": COMPRESS_RATIO_MAX,
        "kSmRegisters": A.REGISTERS_PER_SM,
    }


@rule("positions", "an engine plan (decode_plan, compress_plan) replaces the positions array: it needs RoPE "
      "and a sane compress ratio", twin=True)
def rule_positions(spec: Spec, lay) -> Iterator[Problem]:
    p = spec.positions
    if p.source != "array":
        plan = p.source.replace("_", " ")
        if spec.rope.dim <= 0:
            yield _p("positions", ("positions", "source"), f"a {plan} stands in for the positions array, "
                     "which only RoPE reads (rope.dim is 0)", "set rope.dim, or positions.source: array")
        if not 1 <= p.compress_ratio <= COMPRESS_RATIO_MAX:
            yield _p("positions", ("positions", "compress_ratio"), f"compress_ratio {p.compress_ratio} must be "
                     f"in [1, {COMPRESS_RATIO_MAX}]", "use 4 (DeepSeek-V4's C4 indexer) or 128")
    elif "compress_ratio" in p.model_fields_set:
        yield _p("positions", ("positions", "compress_ratio"), "compress_ratio is only read with "
                 "positions.source: decode_plan or compress_plan", "remove it, or set source: decode_plan",
                 severity="warning")


@rule("launch", "the launch shape fits a thread block", twin=True)
def rule_launch(spec: Spec, lay) -> Iterator[Problem]:
    w, t = spec.launch.warps_per_block, spec.launch.tokens_per_warp
    if not 1 <= w <= A.MAX_THREADS_PER_BLOCK // L.WARP:
        yield _p("launch", ("launch", "warps_per_block"), f"{w} warps x 32 = {w * 32} threads; a block holds "
                 f"1 to {A.MAX_THREADS_PER_BLOCK}", "use 1 to 32 warps (8 is a good default)")
    if not 1 <= t <= MAX_TOKENS_PER_WARP:
        yield _p("launch", ("launch", "tokens_per_warp"), f"tokens_per_warp {t} must be in "
                 f"[1, {MAX_TOKENS_PER_WARP}] (registers)", "use 1 or 2")
    k = spec.launch.stage_tokens
    if not 0 <= k <= MAX_TOKENS_PER_WARP:
        yield _p("launch", ("launch", "stage_tokens"), f"stage_tokens {k} must be in [0, {MAX_TOKENS_PER_WARP}] "
                 "(0: no staging; a group of more tokens than a warp owns is no stage)",
                 "use 0, or a divisor of large_tokens_per_warp (e.g. 2 of 8)")
    m = spec.launch.min_blocks_per_sm
    if m < 0 or (1 <= w and m * w > A.MAX_WARPS_PER_SM):
        yield _p("launch", ("launch", "min_blocks_per_sm"), f"min_blocks_per_sm {m} x {w} warps = {m * w} "
                 f"resident warps; an SM holds at most {A.MAX_WARPS_PER_SM}",
                 f"use 0 to {A.MAX_WARPS_PER_SM // max(w, 1)}")


@rule("launch-large", "the large-N launch shape is one the kernel can run", twin=True)
def rule_launch_large(spec: Spec, lay) -> Iterator[Problem]:
    m, t = spec.launch.large_min_tokens, spec.launch.large_tokens_per_warp
    if not 0 <= m <= MAX_NUM_TOKENS:
        yield _p("launch-large", ("launch", "large_min_tokens"), f"large_min_tokens {m} must be in "
                 f"[0, {MAX_NUM_TOKENS}] (the kernel's num_tokens is an int32; 0: one shape)",
                 "use 0, or the token count from which the large shape is faster (e.g. 65536)")
    if not 1 <= t <= MAX_TOKENS_PER_WARP:
        yield _p("launch-large", ("launch", "large_tokens_per_warp"), f"large_tokens_per_warp {t} must be in "
                 f"[1, {MAX_TOKENS_PER_WARP}] (registers)", "use 4")
    elif m > 0 and t == spec.launch.tokens_per_warp:
        yield _p("launch-large", ("launch", "large_tokens_per_warp"), f"large_tokens_per_warp {t} equals "
                 "tokens_per_warp: both shapes are the same launch, and the kernel carries a second copy of "
                 "its code for nothing", "set large_min_tokens to 0, or choose another large_tokens_per_warp",
                 severity="warning")


@rule("numerics", "the fast numerics mode only where its stated tolerance holds")
def rule_numerics(spec: Spec, lay) -> Iterator[Problem]:
    if spec.numerics != "fast":
        return
    s = spec.store
    if s.dtype != "fp8_e4m3" or s.rope_dtype is not None:
        what = f"store.dtype {s.dtype}" if s.dtype != "fp8_e4m3" else f"kept RoPE dims in {s.rope_dtype}"
        yield _p("numerics", ("numerics",), f"numerics fast with {what}: a fused multiply-add near a cancellation "
                 "(RoPE's re*c - im*s ~ 0) changes a tiny result by many ulps, which a 16-bit value keeps (measured: "
                 "13237 bf16 codes) and only an fp8 code quantized against its block's amax absorbs",
                 "use numerics: exact, or an fp8_e4m3 store without rope_dtype")
    elif s.scale not in FAST_SCALES:
        yield _p("numerics", ("numerics",), f"numerics fast with scale {s.scale}: an amax a few ulps off can cross "
                 "a power of two, and then every value of its block is one binade (8 codes) away from the "
                 "reference's, outside the fast mode's tolerance (one code)",
                 "use numerics: exact, or store.scale fp32")


@rule("launch-occupancy", "min_blocks_per_sm is one each target's SM can hold (else ptxas ignores it)")
def rule_launch_occupancy(spec: Spec, lay) -> Iterator[Problem]:
    w, m = spec.launch.warps_per_block, spec.launch.min_blocks_per_sm
    if m <= 0 or not 1 <= w <= A.MAX_THREADS_PER_BLOCK // L.WARP or m * w > A.MAX_WARPS_PER_SM:
        return  # no hint, or already the launch rule's problem
    for t in spec.targets:
        limits = A.sm_limits(t)
        if limits is None:
            continue
        warps, blocks = limits
        if m > blocks or m * w > warps:
            yield _p("launch-occupancy", ("launch", "min_blocks_per_sm"), f"min_blocks_per_sm {m} x {w} warps: "
                     f"an SM of {t} holds at most {blocks} blocks and {warps} warps, so the hint cannot be met "
                     f"(ptxas ignores it)", f"use at most {min(blocks, warps // w)} for {t}")
            return


def _int_fields(model, prefix: tuple = ()) -> Iterator[tuple[tuple, int]]:
    """(loc, value) of every integer of a spec (bools aside), nested sections included."""
    for name in type(model).model_fields:
        value = getattr(model, name)
        if isinstance(value, BaseModel):
            yield from _int_fields(value, (*prefix, name))
        elif isinstance(value, int) and not isinstance(value, bool):
            yield (*prefix, name), value


@guard("int-range")
def guard_int_range(spec: Spec, lay) -> Iterator[Problem]:
    lo, hi = INT64_RANGE
    for loc, v in _int_fields(spec):
        if not lo <= v <= hi:
            yield _p("int-range", loc, f"{'.'.join(loc)} = {v} does not fit a 64-bit integer, which the "
                     "generated C++ holds it in", "use a realistic value")


@rule("int-range", "every integer fits the 64-bit constants of the generated C++")
def rule_int_range(spec: Spec, lay) -> Iterator[Problem]:
    yield from guard_int_range(spec, lay)
