"""Layout math: the single source of truth for every byte offset and every lane assignment.

The validator's rules, the templates (through the `constants` table), the Torch reference, the runtime
and the engine patches all call this module; nothing else computes a byte offset.

Page of P tokens (contract):
    [ P rows of `row_bytes` ][ P scale slots of `scale_stride` ][ padding to `page_align` ]
    row t   at t * row_bytes
    scales  of token t at P * row_bytes + t * scale_stride (+ g * scale_unit for block g)

A row holds the head_dim values in dimension order. With `store.rope_dtype` set, the RoPE dims are
kept in that dtype: the row is then [quantized span][rope span] (placement last) or the reverse
(placement first), each part contiguous.

Thread mapping: one warp per token; lane l owns the `values_per_lane` = head_dim / 32 contiguous
values [l*V, (l+1)*V). Every span (RoPE, quantized part, scale block) is therefore a range of
whole lanes, which is what the rules check.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

from .arch import WARP_THREADS, supports_pdl
from .dtypes import INPUT_BYTES, QUANT_MAX, STORE_BITS
from .spec import Spec

WARP = WARP_THREADS
VALUE_BITS = STORE_BITS  # by store dtype (kgen.dtypes)
SCALE_UNIT_BYTES = {"none": 0, "fp32": 4, "fp32_pow2": 4, "ue8m0": 1}
MAX_VECTOR_BYTES = 16  # widest global store a lane issues


def is_pow2(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


@dataclass(frozen=True)
class Span:
    """A contiguous range of dims [start, start + size)."""

    start: int
    size: int

    @property
    def end(self) -> int:
        return self.start + self.size


@dataclass(frozen=True)
class Region:
    """A named byte range inside one page, for `kgen layout` and the property tests."""

    name: str
    offset: int
    size: int
    note: str = ""

    @property
    def end(self) -> int:
        return self.offset + self.size


@dataclass(frozen=True)
class Owned:
    """Bytes of a page that one token owns: a part of its row or one of its scales."""

    token: int  # slot in the page
    role: str  # a row part's name ("values", "rope") or "scale"
    offset: int  # page column of the first byte
    size: int
    element_bytes: int  # bytes of one element: a value code (1 for fp4's shared bytes), a kept value, a scale


@dataclass(frozen=True)
class Layout:
    spec: Spec
    # dims
    values_per_lane: Fraction  # head_dim / 32; a Fraction so an invalid head_dim still computes
    rope_span: Span  # the rotated dims (size 0 = no RoPE)
    quant_span: Span  # dims stored as store.dtype
    kept_span: Span  # dims kept in store.rope_dtype (size 0 if none)
    block: int  # elements per scale
    blocks_per_token: int  # scales per token (0 when unscaled)
    # bytes
    quant_bytes: int  # bytes of the quantized span in a row
    kept_bytes: int  # bytes of the kept RoPE span in a row
    row_bytes: int
    scale_unit: int  # bytes of one scale
    scale_bytes: int  # bytes the scales of one token need
    scale_stride: int  # bytes per token in the scale region
    bytes_per_token: int  # row + scale slot: the logical footprint
    page_bytes: int  # P * bytes_per_token rounded up to page_align

    # -- offsets ------------------------------------------------------------------------------
    @property
    def page_size(self) -> int:
        return self.spec.layout.page_size

    @property
    def rows_bytes(self) -> int:
        return self.page_size * self.row_bytes

    @property
    def scale_region_offset(self) -> int:
        return self.rows_bytes

    @property
    def scale_region_bytes(self) -> int:
        return self.page_size * self.scale_stride

    @property
    def padding_bytes(self) -> int:
        return self.page_bytes - self.rows_bytes - self.scale_region_bytes

    @property
    def quant_row_offset(self) -> int:
        """Offset of the quantized span inside a row."""
        return self.kept_bytes if self._kept_first else 0

    @property
    def kept_row_offset(self) -> int:
        """Offset of the kept RoPE span inside a row."""
        return 0 if self._kept_first else self.quant_bytes

    @property
    def _kept_first(self) -> bool:
        return self.kept_span.size > 0 and self.kept_span.start == 0

    def value_offset(self, t: int) -> int:
        """Byte offset of token t's row inside its page."""
        self._check_token(t)
        return t * self.row_bytes

    def scale_offset(self, t: int, g: int = 0) -> int:
        """Byte offset of scale g of token t inside its page."""
        self._check_token(t)
        if not 0 <= g < max(self.blocks_per_token, 1):
            raise IndexError(f"scale {g} of {self.blocks_per_token}")
        return self.scale_region_offset + t * self.scale_stride + g * self.scale_unit

    @property
    def written_bytes_per_token(self) -> int:
        """Bytes the kernel writes for one token: its row and its scales (scale-slot padding and
        page padding are never written)."""
        return self.row_bytes + self.scale_bytes

    @property
    def read_bytes_per_token(self) -> int:
        """Bytes the kernel reads for one token: its x row, and with RoPE its freqs row (rope_dim
        fp32) and position (int64), and its out_loc (int64). The norm weight and bias are read once
        per warp, not per token."""
        spec = self.spec
        rope = spec.rope.dim
        return spec.head_dim * INPUT_BYTES[spec.input_dtype] + (rope * 4 + 8 if rope else 0) + 8

    def slots(self, num_pages: int) -> int:
        """Slot indices a cache of `num_pages` pages holds; `out_loc` outside [0, this) is skipped."""
        return num_pages * self.page_size

    def slot(self, loc: int) -> tuple[int, int]:
        """(page, token in page) of a cache slot index (`out_loc`)."""
        return divmod(loc, self.page_size)

    def _check_token(self, t: int) -> None:
        if not 0 <= t < self.page_size:
            raise IndexError(f"token {t} outside a page of {self.page_size}")

    def regions(self) -> list[Region]:
        """The page's byte map: rows, scale region, padding (zero-sized ones omitted)."""
        P = self.page_size
        out = [Region("rows", 0, self.rows_bytes, f"{P} x {self.row_bytes} B")]
        if self.scale_region_bytes:
            out.append(Region("scales", self.scale_region_offset, self.scale_region_bytes,
                              f"{P} x {self.scale_stride} B ({self.blocks_per_token} x {self.scale_unit} B used)"))
        if self.padding_bytes:
            out.append(Region("padding", self.rows_bytes + self.scale_region_bytes, self.padding_bytes,
                              f"to a multiple of {self.spec.layout.page_align}"))
        return out

    def row_parts(self) -> list[Region]:
        """The parts of one row, in byte order."""
        d = self.spec.store.dtype
        quant = Region("values", self.quant_row_offset, self.quant_bytes,
                       f"dims [{self.quant_span.start}, {self.quant_span.end}) as {d}")
        if not self.kept_bytes:
            return [quant]
        kept = Region("rope", self.kept_row_offset, self.kept_bytes,
                      f"dims [{self.kept_span.start}, {self.kept_span.end}) as {self.spec.store.rope_dtype}")
        return sorted([quant, kept], key=lambda r: r.offset)

    def owned(self) -> list[Owned]:
        """Every byte range of a page that a token owns (what the kernel writes), token by token; a
        token's ranges in the order it writes them: its row parts in byte order, then its scales
        g = 0, 1, ... Scale-slot padding and page padding belong to no token."""
        value_element = max(VALUE_BITS[self.spec.store.dtype] // 8, 1)  # fp4: two codes share a byte
        out = []
        for t in range(self.page_size):
            base = self.value_offset(t)
            for part in self.row_parts():
                width = value_element if part.name == "values" else 2  # kept RoPE dims: 16-bit
                out.append(Owned(t, part.name, base + part.offset, part.size, width))
            if self.scale_unit:
                out += [Owned(t, "scale", self.scale_offset(t, g), self.scale_unit, self.scale_unit)
                        for g in range(self.blocks_per_token)]
        return out

    def byte_owners(self) -> tuple[list[str | None], list[int]]:
        """Per byte of a page: the role of its owner ("values", "rope", "scale"; None = no token
        owns it) and the page column where its element (a value code, a kept value, a scale) starts."""
        role: list[str | None] = [None] * self.page_bytes
        start = list(range(self.page_bytes))
        for o in self.owned():
            for i in range(o.size):
                role[o.offset + i] = o.role
                start[o.offset + i] = o.offset + (i // o.element_bytes) * o.element_bytes
        return role, start

    # -- formulas, for messages -----------------------------------------------------------------
    def bytes_per_token_formula(self) -> str:
        s = self.spec.store
        parts = [f"{self.quant_span.size} x {VALUE_BITS[s.dtype]} bit"]
        if self.kept_bytes:
            parts.append(f"{self.kept_span.size} x 16 bit {s.rope_dtype}")
        text = " + ".join(parts) + f" = {self.row_bytes} B row"
        if self.scale_stride:
            text += f" + {self.scale_stride} B scales ({self.blocks_per_token} x {self.scale_unit} B"
            text += f", stride {self.scale_stride})" if self.scale_stride != self.scale_bytes else ")"
        return f"{text} = {self.bytes_per_token} B/token"

    def page_bytes_formula(self) -> str:
        P, a = self.page_size, self.spec.layout.page_align
        raw = P * self.bytes_per_token
        text = f"{P} tokens x {self.bytes_per_token} B = {raw} B"
        if a > 1:
            text += f", rounded up to a multiple of {a}: {self.page_bytes} B"
        return text


def spans(spec: Spec) -> tuple[Span, Span, Span]:
    """(rope, quantized, kept) dim spans."""
    h, r = spec.head_dim, spec.rope.dim
    rope = Span(0, r) if spec.rope.placement == "first" else Span(h - r, r)
    if spec.store.rope_dtype is not None and r > 0:
        kept = rope
        quant = Span(r, h - r) if spec.rope.placement == "first" else Span(0, h - r)
    else:
        kept = Span(rope.start, 0)
        quant = Span(0, h)
    return rope, quant, kept


def compute(spec: Spec) -> Layout:
    """The layout of a spec. Total for any spec the schema accepts with positive sizes; raises
    ValueError only where the numbers cannot describe bytes at all (a rule reports why)."""
    s, lay = spec.store, spec.layout
    if spec.head_dim <= 0 or lay.page_size <= 0 or lay.page_align <= 0:
        raise ValueError("head_dim, page_size and page_align must be positive")
    if s.rope_dtype is not None and not 0 <= spec.rope.dim <= spec.head_dim:
        raise ValueError("the kept RoPE span must lie inside head_dim")
    rope, quant, kept = spans(spec)
    bits = VALUE_BITS[s.dtype]
    if quant.size * bits % 8:
        raise ValueError(f"{quant.size} values of {bits} bit are not whole bytes")
    quant_bytes = quant.size * bits // 8
    kept_bytes = kept.size * 2
    row = quant_bytes + kept_bytes
    unit = SCALE_UNIT_BYTES[s.scale]
    block = s.block if s.block is not None else quant.size
    if block <= 0:
        raise ValueError("block must be positive")
    blocks = -(-quant.size // block) if unit else 0
    scale_bytes = blocks * unit
    stride = lay.scale_stride if lay.scale_stride is not None else scale_bytes
    if stride < 0:
        raise ValueError("scale_stride must not be negative")
    per_token = row + stride
    page = -(-lay.page_size * per_token // lay.page_align) * lay.page_align
    return Layout(
        spec=spec,
        values_per_lane=Fraction(spec.head_dim, WARP),
        rope_span=rope, quant_span=quant, kept_span=kept,
        block=block, blocks_per_token=blocks,
        quant_bytes=quant_bytes, kept_bytes=kept_bytes, row_bytes=row,
        scale_unit=unit, scale_bytes=scale_bytes, scale_stride=stride,
        bytes_per_token=per_token, page_bytes=page,
    )


# ---------------------------------------------------------------------------------------------
# What the kernel needs, handed to the templates (they do no arithmetic of their own).


def lane_bytes(lay: Layout, dtype_bits: int) -> int:
    """Bytes one lane stores for its values of a span stored at `dtype_bits` per value."""
    return int(lay.values_per_lane * dtype_bits) // 8


def store_vector_bytes(lay: Layout) -> int:
    """Width of each lane's value store: its bytes, at most 16, aligned in every page."""
    bits = VALUE_BITS[lay.spec.store.dtype]
    return min(lane_bytes(lay, bits), MAX_VECTOR_BYTES)


def kept_vector_bytes(lay: Layout) -> int:
    return min(lane_bytes(lay, 16), MAX_VECTOR_BYTES) if lay.kept_bytes else 0


def float_hex(x: float) -> str:
    """A C++ hex-float literal of the fp32 value nearest to x (exact, no decimal round trip)."""
    import numpy as np

    f = float(np.float32(x))
    if not math.isfinite(f):
        raise ValueError(f"{x} is not a finite fp32")
    return f.hex() + "f" if f != 0 else "0.0f"


def threads_per_block(spec: Spec) -> int:
    return spec.launch.warps_per_block * WARP


def uses_large_shape(spec: Spec, num_tokens: int) -> bool:
    """Whether a launch over `num_tokens` takes the large-N shape (`launch.large_min_tokens`). The kernel
    decides the same from its num_tokens (kLargeMinTokens), so host and kernel always agree."""
    m = spec.launch.large_min_tokens
    return m > 0 and num_tokens >= m


def tokens_per_warp(spec: Spec, num_tokens: int | None = None) -> int:
    """Tokens each warp owns in a launch over `num_tokens` (None: the small-N shape, `tokens_per_warp`)."""
    if num_tokens is not None and uses_large_shape(spec, num_tokens):
        return spec.launch.large_tokens_per_warp
    return spec.launch.tokens_per_warp


def tokens_per_block(spec: Spec, num_tokens: int | None = None) -> int:
    """One warp per token at a time, each warp owning `tokens_per_warp(spec, num_tokens)` consecutive tokens."""
    return spec.launch.warps_per_block * tokens_per_warp(spec, num_tokens)


def launch_shape(spec: Spec, num_tokens: int) -> tuple[int, int]:
    """(blocks, threads per block) of a launch over `num_tokens`; the block is the same at every N."""
    return max(1, -(-num_tokens // tokens_per_block(spec, num_tokens))), threads_per_block(spec)


# SGLang's plan rows that stand in for `positions`, by positions.source: (field, little-endian numpy
# type) in struct order, the one description the reference's encoder/decoder and the byte sizes use.
# DecodePlan: one row per decode token. CompressPlan (prefill): one row per compressed key, in the
# compressor's output order, rows past the last key padding; the store reads seq_len (position =
# seq_len - R) and ragged_id (the row of out_loc, which is per query token), the rest is the compressor's.
PLAN_FIELDS = {
    "decode_plan": (("seq_len", "<u4"), ("write_loc", "<i4"), ("read_page_0", "<i4"), ("read_page_1", "<i4")),
    "compress_plan": (("seq_len", "<u4"), ("ragged_id", "<u2"), ("buffer_len", "<u2"), ("read_page_0", "<i4"),
                      ("read_page_1", "<i4")),
}
PLAN_BYTES = {source: sum(int(kind[2:]) for _, kind in fields) for source, fields in PLAN_FIELDS.items()}
DECODE_PLAN_BYTES = PLAN_BYTES["decode_plan"]  # 16
DECODE_PLAN_FIELDS = tuple(name for name, _ in PLAN_FIELDS["decode_plan"])
COMPRESS_PLAN_BYTES = PLAN_BYTES["compress_plan"]  # 16
COMPRESS_PLAN_FIELDS = PLAN_FIELDS["compress_plan"]
COMPRESS_PLAN_INVALID = 0xFFFFFFFF  # seq_len of a padding row (SGLang's CompressPlan::invalid())



def uses_pdl(spec: Spec, capability: tuple[int, int]) -> bool:
    """Whether a launch of `spec` on a device of `capability` sets the programmatic stream
    serialization attribute: exactly when the kernel waits for its predecessor (kPdl and sm_90+;
    the kernel's griddepcontrol is compiled for __CUDA_ARCH__ >= 900 only). A launch with the
    attribute of a kernel that does not wait would race with the kernel before it."""
    return spec.launch.pdl and supports_pdl(capability)


def null_layout(spec: Spec) -> Layout:
    """A layout of zeros, for rendering a spec whose byte math cannot be computed (`--no-validate`):
    the kernel's static_asserts then say which rule it breaks."""
    z = Span(0, 0)
    return Layout(spec=spec, values_per_lane=Fraction(0), rope_span=z, quant_span=z, kept_span=z,
                  block=0, blocks_per_token=0, quant_bytes=0, kept_bytes=0, row_bytes=0, scale_unit=0,
                  scale_bytes=0, scale_stride=0, bytes_per_token=0, page_bytes=0)


# ---------------------------------------------------------------------------------------------
# The constants: every number the kernel config (kgen::render -> config.cuh) and the host constants
# (host.h, host.py, select_kernel.*) define, in one table. A constant has one name (UPPER_SNAKE);
# the kernel config spells it kCamelCase. `kernel`: the rendered config defines it (the header
# multiplies lane indices by these and re-checks them in static_asserts); `host`: an engine's
# allocator gets it. Floats are C++ hex-float literals (exact fp32).


@dataclass(frozen=True)
class Constant:
    name: str  # UPPER_SNAKE, e.g. PAGE_BYTES
    value: int | str  # an int, or a float_hex literal
    kernel: bool = True
    host: bool = False

    @property
    def cxx(self) -> str:
        """The kernel config's name: kPageBytes."""
        return cxx_name(self.name)


def cxx_name(upper_snake: str) -> str:
    return "k" + "".join(part.capitalize() for part in upper_snake.lower().split("_"))


def _q(n, d) -> int:
    """n / d when it is a whole number, else 0 (the kernel's static_asserts say why)."""
    if d == 0 or n % d:
        return 0
    return int(n // d)


def constants(lay: Layout) -> list[Constant]:
    """The table. Host constants first, in the order engines read them; then the kernel's own.
    Zeros where a mapping does not exist (the kernel's twins reject such a spec)."""
    import numpy as np

    spec, s = lay.spec, lay.spec.store
    V = lay.values_per_lane
    Vi = int(V) if V.denominator == 1 else 0
    bits = VALUE_BITS[s.dtype]
    r = spec.rope.dim
    neox = spec.rope.style == "neox"
    P = lay.page_size
    had_scale = float(np.float32(1.0) / np.sqrt(np.float32(spec.head_dim))) if spec.head_dim > 0 else 1.0
    host: list[tuple[str, int, bool]] = [  # name, value, also in the kernel config
        ("PAGE_SIZE", P, True), ("BYTES_PER_TOKEN", lay.bytes_per_token, True), ("PAGE_BYTES", lay.page_bytes, True),
        ("ROW_BYTES", lay.row_bytes, True), ("ROWS_BYTES", lay.rows_bytes, False),
        ("QUANT_ROW_OFFSET", lay.quant_row_offset, True), ("QUANT_BYTES", lay.quant_bytes, False),
        ("KEPT_ROW_OFFSET", lay.kept_row_offset, True), ("KEPT_BYTES", lay.kept_bytes, False),
        ("SCALE_REGION_OFFSET", lay.scale_region_offset, True), ("SCALE_REGION_BYTES", lay.scale_region_bytes, False),
        ("SCALE_STRIDE", lay.scale_stride, True), ("SCALE_UNIT", lay.scale_unit, True),
        ("SCALE_BYTES", lay.scale_bytes, True), ("BLOCKS_PER_TOKEN", lay.blocks_per_token, True),
        ("BLOCK", lay.block, True), ("PADDING_BYTES", lay.padding_bytes, False), ("HEAD_DIM", spec.head_dim, True),
        ("ROPE_DIM", r, True), ("WARPS_PER_BLOCK", spec.launch.warps_per_block, True),
        ("TOKENS_PER_WARP", spec.launch.tokens_per_warp, True),
        ("THREADS_PER_BLOCK", threads_per_block(spec), False), ("TOKENS_PER_BLOCK", tokens_per_block(spec), False),
        # the large-N shape: from LARGE_MIN_TOKENS tokens on (0: never) a warp owns LARGE_TOKENS_PER_WARP
        # tokens; an engine sizes its grid as launch_shape does, the kernel picks the same path
        ("LARGE_MIN_TOKENS", spec.launch.large_min_tokens, True),
        ("LARGE_TOKENS_PER_WARP", spec.launch.large_tokens_per_warp, True),
    ]
    kernel: list[tuple[str, int | str]] = [
        ("VALUES_PER_LANE", Vi),
        ("ROPE_START", lay.rope_span.start), ("QUANT_START", lay.quant_span.start), ("QUANT_DIM", lay.quant_span.size),
        ("KEPT_START", lay.kept_span.start), ("KEPT_DIM", lay.kept_span.size),
        ("STORE_VECTOR_BYTES", store_vector_bytes(lay)), ("KEPT_VECTOR_BYTES", kept_vector_bytes(lay)),
        ("EPS", float_hex(spec.norm.eps) if math.isfinite(spec.norm.eps) else "0.0f"),
        ("AMAX_FLOOR", float_hex(s.amax_floor) if math.isfinite(s.amax_floor) else "0.0f"),
        ("QUANT_MAX", float_hex(QUANT_MAX.get(s.dtype, 1.0))),
        ("INV_QUANT_MAX", float_hex(1.0 / QUANT_MAX.get(s.dtype, 1.0))),
        ("HADAMARD_SCALE", float_hex(had_scale)),
        ("MIN_BLOCKS_PER_SM", spec.launch.min_blocks_per_sm),
        ("STAGE_TOKENS", spec.launch.stage_tokens),  # x/freqs loads one group ahead (0: all at once)
        ("FAST_MATH", int(spec.numerics == "fast")),  # docs/numerics.md "Fast mode"
        ("PDL", int(spec.launch.pdl)),  # griddepcontrol in the kernel (sm_90+); the launch: uses_pdl
        ("DECODE_PLAN", int(spec.positions.source == "decode_plan")),  # positions holds DecodePlan rows
        ("COMPRESS_PLAN", int(spec.positions.source == "compress_plan")),  # positions holds CompressPlan rows
        ("COMPRESS_PLAN_INVALID", COMPRESS_PLAN_INVALID),
        ("COMPRESS_RATIO", spec.positions.compress_ratio),
        # the lane mapping of the spans (lane l owns values [l*V, (l+1)*V))
        ("ROPE_LANE0", _q(lay.rope_span.start, Vi)), ("ROPE_LANES", _q(lay.rope_span.size, Vi)),
        ("ROPE_HALF_LANES", _q(r // 2, Vi) if r > 0 else 0),  # lanes between NeoX partners
        ("QUANT_LANE0", _q(lay.quant_span.start, Vi)), ("QUANT_LANES", _q(lay.quant_span.size, Vi)),
        ("KEPT_LANE0", _q(lay.kept_span.start, Vi)), ("KEPT_LANES", _q(lay.kept_span.size, Vi)),
        ("BLOCK_LANES", _q(lay.block, Vi)),
        ("IN_LANE_BYTES", Vi * INPUT_BYTES[spec.input_dtype]),  # bytes of x (and weight, bias) per lane
        ("FREQS_LANE_FLOATS", (2 * Vi if neox else Vi) if r > 0 else 0),  # freqs floats per rope lane
        ("QUANT_LANE_BITS", Vi * bits),  # bits of quantized values per lane (4 = two lanes share a byte)
        ("QUANT_LANE_BYTES", lane_bytes(lay, bits)),
        ("KEPT_LANE_BYTES", lane_bytes(lay, 16) if lay.kept_bytes else 0),
        ("PAGE_SHIFT", P.bit_length() - 1 if is_pow2(P) else 0),  # slot -> (page, token): shift and mask
    ]
    return ([Constant(n, v, kernel=k, host=True) for n, v, k in host]
            + [Constant(n, v) for n, v in kernel])


def host_constants(lay: Layout) -> dict[str, int | str]:
    """The byte math an engine's allocator needs, by name (rendered as C++ and Python constants)."""
    return {c.name: c.value for c in constants(lay) if c.host}
