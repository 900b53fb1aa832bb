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

from .spec import Spec

WARP = 32
VALUE_BITS = {"bf16": 16, "fp16": 16, "fp8_e4m3": 8, "fp4_e2m1": 4}
INPUT_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2}
SCALE_UNIT_BYTES = {"none": 0, "fp32": 4, "fp32_pow2": 4, "ue8m0": 1}
QUANT_MAX = {"fp8_e4m3": 448.0, "fp4_e2m1": 6.0}  # largest finite magnitude of the code
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

PDL_MIN_SM = 90  # griddepcontrol (programmatic dependent launch) exists from sm_90 on


def uses_pdl(spec: Spec, capability: tuple[int, int]) -> bool:
    """Whether a launch of `spec` on a device of `capability` sets the programmatic stream
    serialization attribute: exactly when the kernel waits for its predecessor (kPdl and sm_90+;
    the kernel's griddepcontrol is compiled for __CUDA_ARCH__ >= 900 only). A launch with the
    attribute of a kernel that does not wait would race with the kernel before it."""
    return spec.launch.pdl and capability[0] * 10 + capability[1] >= PDL_MIN_SM


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


# ---------------------------------------------------------------------------------------------
# The read side: kgen::indexer_logits (templates/include/kgen/indexer_logits.cuh) scores q against
# the keys of a page in place. Its config is the writer's config struct (the same byte constants)
# plus these; the header re-derives each of them from the raw spec values in a static_assert.
#
# Fragment mapping: a key row's quantized bytes are read as 16-B chunks in groups of 4 (64 B); the 4
# lanes of an mma quad (tig = lane % 4) own chunk tig of every group. One mma m16n8k16 k-step consumes
# 4 values of q per lane and the matching 4 key values of the lane's chunk (both widened to the 16-bit
# operand), so a chunk feeds kReaderStepsPerChunk steps. The dot product does not care which k a value sits at,
# only that q and key agree: q is staged in shared memory under the same mapping.

READER_HEADS = 64  # q heads (DeepSeek's indexer); the kernel keeps 64 x head_dim of q per token in smem
READER_WARPS = 4  # warps per CTA
READER_WARP_KEYS = 32  # keys a warp scores per tile (two m16 tiles)
READER_CHUNK_BYTES = 16  # one lane's key load per group
READER_GROUP_BYTES = 4 * READER_CHUNK_BYTES  # the 4 lanes of a quad
READER_SMEM_BYTES = 48 * 1024  # static + dynamic shared memory without an opt-in
READER_MAX_GROUPS_IN_FLIGHT = 4  # 16 registers per group and lane; more would spill
READER_STEP_ELEMS = 4  # values per lane and row of one mma m16n8k16 step (8 B of a 16-bit operand)
READER_MMA_K = 16  # every key dtype is multiplied as a 16-bit operand: mma.sync m16n8k16, fp32 accumulate
READER_OPERAND_BYTES = 2
# dtype of q the caller passes, by key dtype
READER_Q_DTYPE = {"bf16": "bf16", "fp8_e4m3": "fp8_e4m3", "fp4_e2m1": "bf16"}
# Keys and q are widened to a 16-bit tensor-core operand, exactly: fp8 to f16 (every e4m3 value is an
# fp16), fp4 to bf16 (every e2m1 x ue8m0 value is a bf16). fp8 does not use mma.sync e4m3: sm_90 has no
# native one (its compiler widens every fragment per instruction); here each key fragment is widened
# once and used for all heads.


def reader_q_dtype(spec: Spec) -> str:
    """dtype of q the reader multiplies the keys with (fp4 keys are widened to bf16 in registers)."""
    return READER_Q_DTYPE[spec.store.dtype]


def reader_key_vector_bytes(lay: Layout) -> int:
    """Widest load (16, 8, 4 B) every key chunk and scale of every page is aligned to (0: none)."""
    for v in (16, 8, 4):
        if lay.page_bytes % v == 0 and lay.row_bytes % v == 0 and lay.quant_row_offset % v == 0:
            return v
    return 0


def reader_q_token_bytes(spec: Spec) -> int:
    """Shared memory for one query token: its q (READER_HEADS x head_dim, as the 16-bit operand) and its
    fp32 weights."""
    return READER_HEADS * spec.head_dim * READER_OPERAND_BYTES + 4 * READER_HEADS


def reader_tokens_per_cta(spec: Spec) -> int:
    """Query tokens (next_n) one CTA scores together: as many as fit the shared memory, at most 8."""
    return max(0, min(8, READER_SMEM_BYTES // reader_q_token_bytes(spec)))


# Free choices of the reader (no byte depends on them; the bench compares them): prefetch the next
# tile's rows while this one computes; __launch_bounds__ minimum CTAs per SM (0: none); the heads in
# kReaderHeadPasses passes (fewer accumulator registers; the rows stay in registers).
# By key dtype; chosen on the H200 (bench/results/h200-2026-11-30/reader/run2-f16-widened: no prefetch
# was fastest or within noise at every (B, keys) for fp8 and bf16; a prefetched tile costs registers).
# kReaderWgStages: the wgmma path's ring of staged chunks (kReaderWgmma 1: the path runs where it can);
# kReaderWgL2Prefetch: the L2 prefetch size (0, 128, 256 B) of its key copies. 4 stages (an even ring:
# two 64-key tiles of fp8, one whole bf16 tile, per pipeline step), no prefetch:
# bench/results/h200-2026-11-30/reader3 (4 faster than 3 at 32 x 64K and 128 x 64K for both; 2 stages is
# faster for fp8 below 128 x 64K keys and not there) and reader2 (a 256-B prefetch helps bf16 at 64K
# keys and slows fp8 at 128 x 64K). fp4's 3 stages are not measured yet: the fewest that still give 4 CTAs
# per SM (the converted operand and q take 32 KB of each CTA; 2 stages give 5 CTAs, 4 stages 4).
# kReaderWgTma: the TMA variant where it reads the layout (reader_wg_tma_layout), with its own ring of
# kReaderWgTmaStages tiles shared by kReaderWgConsumers warpgroups; elsewhere the cp.async variant and its
# kReaderWgStages. bench/results/h200-2026-11-30/tma1 (both variants and 7 TMA rings on the same inputs in one
# process): fp8 with 2 consumers and 8 stages (2 CTAs per SM) is faster in CUDA graphs from 1 x 64K to
# 128 x 64K keys (1 x 256K: 8.8 against 10.0 us; 128 x 64K: 300 against 319 us) and within 2 % cold; bf16
# with 2 consumers and 4 stages is 5-10 % faster at 32 and 128 x 64K (0.96 / 0.97 of copy at 128 x 64K).
# One CTA of 3 or 4 consumers is 40-50 % slower at large shapes (one producer warp per SM does not keep up).
READER_TUNING_DEFAULTS = {
    "bf16": {"kReaderPrefetch": 0, "kReaderMinBlocks": 0, "kReaderHeadPasses": 2, "kReaderWgmma": 1,
             "kReaderWgStages": 4, "kReaderWgL2Prefetch": 0,
             "kReaderWgTma": 1, "kReaderWgTmaStages": 4, "kReaderWgConsumers": 2, "kReaderWgEvictFirst": 0},
    "fp8_e4m3": {"kReaderPrefetch": 0, "kReaderMinBlocks": 0, "kReaderHeadPasses": 2, "kReaderWgmma": 1,
                 "kReaderWgStages": 4, "kReaderWgL2Prefetch": 0,
                 "kReaderWgTma": 1, "kReaderWgTmaStages": 8, "kReaderWgConsumers": 2, "kReaderWgEvictFirst": 0},
    "fp4_e2m1": {"kReaderPrefetch": 0, "kReaderMinBlocks": 0, "kReaderHeadPasses": 2, "kReaderWgmma": 1,
                 "kReaderWgStages": 3, "kReaderWgL2Prefetch": 0,
                 "kReaderWgTma": 0, "kReaderWgTmaStages": 4, "kReaderWgConsumers": 2, "kReaderWgEvictFirst": 0},
}

# The wgmma path's ring chosen per launch (kgen.indexer picks the cubin; each is rendered, and twinned, from
# the one spec). Where a key dtype has an entry (shallow stages, staged keys per SM), a launch that stages
# fewer keys per SM than that (B x token groups x max_seq_len keys over the SMs) runs `shallow` stages; at or
# above it, the default (READER_TUNING_DEFAULTS). fp8 on the H200, CUDA-graph times, both rings in one
# process (bench/results/h200-2026-11-30/reader4): 2 stages (8 CTAs per SM, one tile per pipeline step)
# are faster from 1 x 256K to 64 x 64K keys (64 x 64K, 31.8K keys per SM: 155.0 against 163.0 us), 4 stages
# (5 CTAs per SM, two tiles per step) at 128 x 64K (63.6K per SM: 319.7 against 340.0 us); the threshold
# sits between the two. bf16 has none: 4 stages are as fast or faster at every shape (reader3).
READER_WG_SHAPE_STAGES: dict[str, tuple[int, int]] = {"fp8_e4m3": (2, 49152)}


def reader_wg_shape_tune(lay: Layout, tune: dict[str, int] | None, batch: int, next_n: int, max_seq_len: int,
                         sm_count: int, l2_bytes: int = 0) -> dict[str, int] | None:
    """The tuning a wgmma-path launch of this shape runs (the result None: the shipped default):
    - the TMA variant: `tune` plus the evict-first L2 policy where the launch's keys overflow the L2
      (reader_wg_evict_first; `l2_bytes` 0: unknown, never), unless `tune` fixes kReaderWgEvictFirst;
    - the cp.async variant: `tune` itself where it fixes kReaderWgStages or the key dtype has no shape rule
      (READER_WG_SHAPE_STAGES), else `tune` plus this shape's stages."""
    if reader_wg_tma(lay, tune):
        if (tune and "kReaderWgEvictFirst" in tune) or not reader_wg_evict_first(lay, batch, next_n, max_seq_len,
                                                                                  l2_bytes, tune):
            return tune
        return {**(tune or {}), "kReaderWgEvictFirst": 1}
    rule = READER_WG_SHAPE_STAGES.get(lay.spec.store.dtype)
    if rule is None or (tune and "kReaderWgStages" in tune):
        return tune
    shallow, min_keys_per_sm = rule
    groups = -(-max(1, next_n) // max(1, reader_wg_tokens_per_cta(lay, reader_wg_stages(lay, tune))))
    if batch * groups * max_seq_len >= min_keys_per_sm * max(1, sm_count):
        return tune
    return {**(tune or {}), "kReaderWgStages": shallow}


# The TMA variant's L2 policy per launch. Keys are read once per launch (per token group); copied under an
# evict-first policy they displace each other rather than the lines the launch reuses, and cold calls get
# faster: tma1 run 8, fp8, both orders, 128 x 4K keys 26.7 against 29.4 us, 1 x 256K 17.3 against 18.6,
# 32 x 4K 12.2 against 12.7, 32 x 64K 83.3-83.7 against 84.6-85.0. But back-to-back calls on the same keys
# (CUDA-graph replays) no longer find them in the L2: 1 x 256K 11.4 against 8.6 us, 32 x 4K 6.3 against
# 5.2. So the policy is used only where the launch's keys cannot stay in the L2 anyway: more key bytes than
# the L2 holds (the H200's 60 MB, as torch reports it: fp8 32 x 64K, 128 x 4K and larger; not 32 x 4K or
# 1 x 256K, 17 and 35 MB). With the rule (tma1 run 9, against kReaderWgEvictFirst 0, both orders): fp8
# 128 x 4K 27.0 / 20.5 against 29.6 / 21.2 us cold / graph, 32 x 64K 83.4 / 73.5 against 85.0 / 74.9, 128 x
# 64K within the order effect; bf16 1 x 256K 25.7 against 27.7 us cold, 128 x 64K 1-2 % slower.
def reader_wg_evict_first(lay: Layout, batch: int, next_n: int, max_seq_len: int, l2_bytes: int,
                          tune: dict[str, int] | None = None) -> bool:
    """Does a TMA-variant launch of this shape read more key bytes than an L2 of `l2_bytes` holds?"""
    groups = -(-max(1, next_n) // max(1, reader_wg_tokens_per_cta(lay, reader_wg_stages(lay, tune), tma=True)))
    return l2_bytes > 0 and batch * groups * max_seq_len * lay.bytes_per_token > l2_bytes


# The sm_90a path (wgmma, kgen.arch.has_wgmma): a tile of READER_WG_TILE_KEYS consecutive keys is the
# A operand (M = 64 keys, K-major), q of one token the B operand (N = 64 heads, K-major), both in shared
# memory in the 128-B swizzled layout wgmma reads (8 rows x 128 B repeat: every operand base 1024-B
# aligned). A key row's quantized bytes are staged in chunks of READER_WG_CHUNK_BYTES (one swizzle
# atom's width: 4 k-steps of 32 B, k32 for fp8, k16 for bf16) by cp.async, each stage one chunk of the
# tile's 64 rows plus a 4-B word per row (the fp32 scale, or 1; NaN for a row whose page is outside
# the table or cache), kReaderWgStages stages in a ring (a tuning: all of them in flight while the
# CTA waits for the oldest). Shared memory of a CTA scoring `ntok` tokens: the alignment pad, the
# stages, and per token its q (chunks x 8 KB) and fp32 weights; above 48 KB the launch opts in.
# fp4 keys (e2m1, a ue8m0 scale per READER_WG_FP4_BLOCK values) are widened to the bf16 operand in
# shared memory: each stage holds a tile's packed rows and their scale bytes as stored (plus the row
# word), and one more buffer (the operand's chunks x 8 KB, 1024-B aligned) the tile converted to bf16,
# which the bf16 wgmma m64n64k16 reads; the operand's chunks are those of the bf16 row (head_dim x 2 B).
READER_WG_TILE_KEYS = 64  # wgmma m64: keys per tile
READER_WG_CHUNK_BYTES = 128  # one 128-B swizzle atom's width of a key row (and of q's rows)
READER_WG_ALIGN = 1024  # the 128-B swizzle pattern repeats every 1024 B: operand bases aligned to it
READER_WG_ROW_INFO_BYTES = 4  # per key row and stage: its scale (fp32) or 1, NaN where the page is bad
READER_WG_MAX_TOKENS = 4  # query tokens (MTP, next_n 1-4) a CTA scores from one staging of the keys
READER_MAX_SMEM_BYTES = 227 * 1024  # dynamic shared memory one CTA may opt in to (sm_90)
READER_SM_SHARED_BYTES = 228 * 1024  # shared memory of an sm_90 SM; the driver keeps 1 KB per CTA
READER_CTA_RESERVED_BYTES = 1024
READER_WG_MAX_CTAS = 16  # CTAs per SM the launch plans for at most (16 x 128 threads: the SM's 2048)
READER_WG_FP4_BLOCK = 32  # fp4 values per ue8m0 scale the wgmma path converts (one 16-B operand piece: 8)


def reader_wg_operand_row_bytes(lay: Layout) -> int:
    """Bytes of one key row as the wgmma A operand: as stored (bf16, fp8), widened to bf16 (fp4)."""
    if lay.spec.store.dtype == "fp4_e2m1":
        return lay.spec.head_dim * READER_OPERAND_BYTES
    return lay.row_bytes


def reader_wg_fp4_stage_bytes(lay: Layout) -> int:
    """fp4 keys: bytes of one stage's packed rows and scale bytes (the row words follow the stages)."""
    return READER_WG_TILE_KEYS * (lay.row_bytes + lay.scale_bytes)


def reader_wg_chunks(lay: Layout) -> int:
    """128-B operand chunks per key row (0: operand rows are not whole 128-B atoms); bf16 and fp8 stage
    them as stored, fp4 converts its packed rows into them."""
    row = reader_wg_operand_row_bytes(lay)
    return row // READER_WG_CHUNK_BYTES if row % READER_WG_CHUNK_BYTES == 0 else 0


def reader_wg_smem_bytes(lay: Layout, ntok: int, stages: int, tma: bool = False) -> int:
    """Dynamic shared memory of a wgmma-path CTA scoring `ntok` query tokens through `stages` stages
    (`tma`: the TMA variant's, whose stages also hold their two mbarriers)."""
    tile = READER_WG_TILE_KEYS
    token = reader_wg_chunks(lay) * READER_HEADS * READER_WG_CHUNK_BYTES + 4 * READER_HEADS
    if lay.spec.store.dtype == "fp4_e2m1":
        stage = reader_wg_fp4_stage_bytes(lay) + tile * READER_WG_ROW_INFO_BYTES
        operand = reader_wg_chunks(lay) * tile * READER_WG_CHUNK_BYTES
        return READER_WG_ALIGN + operand + stages * stage + ntok * token
    stage = reader_wg_chunks(lay) * tile * READER_WG_CHUNK_BYTES + tile * READER_WG_ROW_INFO_BYTES
    if tma:
        stage += READER_WG_TMA_BARRIER_BYTES
    return READER_WG_ALIGN + stages * stage + ntok * token


def reader_wg_tokens_per_cta(lay: Layout, stages: int, tma: bool = False) -> int:
    """Query tokens a wgmma-path CTA scores together from one staging of the keys (their q in shared
    memory): up to READER_WG_MAX_TOKENS that fit; 0: one token does not fit. 1 for the cp.async variant of
    rows of several chunks, which stages a tile chunk by chunk (each token would keep its own accumulators
    across the chunks); the TMA variant stages, and fp4 converts, whole tiles."""
    chunks = reader_wg_chunks(lay)
    fits = [t for t in range(1, READER_WG_MAX_TOKENS + 1)
            if reader_wg_smem_bytes(lay, t, stages, tma) <= READER_MAX_SMEM_BYTES]
    if not chunks or not fits:
        return 0
    whole_tiles = tma or lay.spec.store.dtype == "fp4_e2m1"
    return 1 if chunks > 1 and not whole_tiles else max(fits)


def reader_wgmma(lay: Layout, stages: int) -> bool:
    """Can the wgmma path read this layout? bf16 or fp8 keys, rows of whole 128-B chunks at offset 0 of
    16-B aligned pages (cp.async of 16 B), no scale or one 4-B scale per token at 4-B aligned offsets,
    and one token's q fitting shared memory; or fp4 keys with a ue8m0 scale per READER_WG_FP4_BLOCK
    values, rows of whole 16-B pieces, a token's scale bytes whole 4-B words at 4-B aligned offsets.
    Otherwise the mma.sync path runs on sm_90a too."""
    spec = lay.spec
    dtype = spec.store.dtype
    if dtype not in ("bf16", "fp8_e4m3", "fp4_e2m1") or lay.kept_span.size or lay.quant_row_offset:
        return False
    if lay.page_bytes % 16 or lay.row_bytes % 16 or not reader_wg_chunks(lay) or stages < 2:
        return False
    if dtype == "fp4_e2m1":
        if spec.store.scale != "ue8m0" or lay.block != READER_WG_FP4_BLOCK or lay.scale_unit != 1:
            return False
        if lay.scale_bytes % 4 or lay.scale_region_offset % 4 or lay.scale_stride % 4:
            return False
        # a packed row's 16-B pieces split the CTA's threads into passes of whole 8-row swizzle groups
        pieces = lay.row_bytes // 16
        threads = reader_threads()
        if threads % pieces or (threads // pieces) % 8 or READER_WG_TILE_KEYS % (threads // pieces):
            return False
    elif lay.blocks_per_token:  # scaled
        if dtype != "fp8_e4m3" or lay.blocks_per_token != 1 or lay.scale_unit != 4:
            return False
        if lay.scale_region_offset % 4 or lay.scale_stride % 4:
            return False
    return reader_wg_tokens_per_cta(lay, stages) >= 1


def reader_wg_ctas_per_sm(lay: Layout, ntok: int, stages: int, tma: bool = False, consumers: int = 0) -> int:
    """CTAs of the wgmma path one SM holds (shared memory bound, and for the TMA variant register bound;
    the kernel's __launch_bounds__ caps its registers for the one-token count, so registers do not bind
    first)."""
    per = reader_wg_smem_bytes(lay, ntok, stages, tma) + READER_CTA_RESERVED_BYTES
    # the TMA variant's CTAs are large: its threads' registers (planned at READER_WG_TMA_REGISTERS each)
    # bind before the SM's thread count does
    most = (READER_SM_REGISTERS // (reader_wg_tma_threads(consumers) * READER_WG_TMA_REGISTERS) if tma
            else READER_WG_MAX_CTAS)
    return max(1, min(most, READER_SM_SHARED_BYTES // per))


def reader_wg_stages(lay: Layout, tune: dict[str, int] | None = None) -> int:
    """The ring of the wgmma path's variant that runs: the tuning's (READER_TUNING_DEFAULTS by key dtype,
    `tune` over it) kReaderWgTmaStages where the TMA variant runs, else kReaderWgStages."""
    merged = {**_tuning(lay.spec), **(tune or {})}
    return int(merged["kReaderWgTmaStages" if reader_wg_tma(lay, tune) else "kReaderWgStages"])


def reader_wg_enabled(lay: Layout, tune: dict[str, int] | None = None) -> bool:
    """Does the reader rendered with `tune` take the wgmma path where the arch has it? The layout must
    allow it and the tuning want it (kReaderWgmma 0: the mma.sync path, the bench's comparison)."""
    merged = {**_tuning(lay.spec), **(tune or {})}
    return bool(merged["kReaderWgmma"]) and reader_wgmma(lay, int(merged["kReaderWgStages"]))



# The TMA variant of the sm_90a path (kReaderWgTma 1). One producer warp copies each 64-key tile with
# one tensor copy (cp.async.bulk.tensor through a tensor map of the cache, encoded on the host per cache
# tensor, kgen.tma: the copy writes the 128-B swizzle wgmma reads) and the tile's 64 scales with one bulk
# copy, into a ring of kReaderWgStages stages shared by kReaderWgConsumers warpgroups (tile i is scored by
# warpgroup i mod consumers); per stage a `full` mbarrier (the copies' bytes have landed) hands it to its
# warpgroup, an `empty` one (its wgmma has read it) back to the producer. 128 threads no longer issue 16-B
# copies and wait on barriers per tile, and q is staged once for several warpgroups. It reads a tile as one
# box, so a tile must lie in one page (page_size a multiple of 64), and fp8 scales as one 256-B copy
# (one 4-B scale per token, consecutive, at a 16-B aligned offset); else the cp.async variant runs.
READER_WG_TMA_BARRIER_BYTES = 16  # per stage: the full and the empty mbarrier, 8 B each
READER_WG_TMA_PRODUCER_THREADS = 32  # one warp, after the consumers' warpgroups
READER_WG_TMA_MAX_CONSUMERS = 4
READER_WG_TMA_MAX_STAGES = 32
READER_WG_TMA_MAP_BYTES = 128  # a CUtensorMap (64-B aligned)
READER_SM_REGISTERS = 65536  # 32-bit registers of an sm_90 SM
# registers per thread a TMA-variant CTA plan leaves (the consumers' 32 accumulators, descriptors, the
# epilogue; ptxas uses 72 for fp8, 64-69 for bf16): __launch_bounds__ then never makes ptxas spill to fit
READER_WG_TMA_REGISTERS = 80


def reader_wg_tma_layout(lay: Layout) -> bool:
    """Can the TMA variant read a layout the wgmma path reads (reader_wgmma: rows of whole 128-B chunks at
    offset 0, 16-B aligned pages, one 4-B fp8 scale per token)? Its own rules on top: bf16 or fp8 keys as
    stored (not fp4's converted tiles), a tile inside one page (page_size a multiple of 64: one box), and
    fp8 scales consecutive at a 16-B aligned offset (a tile's 64 are one 256-B bulk copy)."""
    if lay.spec.store.dtype not in ("bf16", "fp8_e4m3") or lay.page_size % READER_WG_TILE_KEYS:
        return False
    return not lay.blocks_per_token or (lay.scale_stride == 4 and lay.scale_region_offset % 16 == 0)


def reader_wg_tma(lay: Layout, tune: dict[str, int] | None = None) -> bool:
    """Does the reader rendered with `tune` run the TMA variant where the arch has wgmma? Its ring must be
    whole rounds of the consumer warpgroups (at most 32 stages, one bit each in the producer's mask): a
    warpgroup waits for stage s's next tile only after it read the stage's previous tile itself, so the
    stage's barrier is never two phases behind the phase it waits for (an mbarrier tells only the current
    phase from the one before)."""
    merged = {**_tuning(lay.spec), **(tune or {})}
    consumers, stages = int(merged["kReaderWgConsumers"]), int(merged["kReaderWgTmaStages"])
    return (bool(merged["kReaderWgTma"]) and reader_wg_enabled(lay, tune) and reader_wg_tma_layout(lay)
            and 1 <= consumers <= READER_WG_TMA_MAX_CONSUMERS and stages % consumers == 0
            and 2 <= stages <= READER_WG_TMA_MAX_STAGES and reader_wg_tokens_per_cta(lay, stages, tma=True) >= 1)


def reader_wg_consumers(lay: Layout, tune: dict[str, int] | None = None) -> int:
    """The TMA variant's consumer warpgroups per CTA (the tuning's)."""
    return int({**_tuning(lay.spec), **(tune or {})}["kReaderWgConsumers"])


def reader_wg_tma_threads(consumers: int) -> int:
    """Threads of a TMA-variant CTA: its consumer warpgroups and the producer warp."""
    return consumers * 4 * WARP + READER_WG_TMA_PRODUCER_THREADS


def reader_wg_threads(lay: Layout, tune: dict[str, int] | None = None) -> int:
    """Threads of a wgmma-path CTA (one warpgroup; the TMA variant's consumers and producer)."""
    return reader_wg_tma_threads(reader_wg_consumers(lay, tune)) if reader_wg_tma(lay, tune) else reader_threads()


def _tuning(spec: Spec) -> dict[str, int]:
    return READER_TUNING_DEFAULTS.get(spec.store.dtype, READER_TUNING_DEFAULTS["bf16"])


def reader_constants(lay: Layout, tune: dict[str, int] | None = None) -> dict[str, object]:
    """What the reader's config adds to the writer's constants (kgen.render substitutes them);
    `tune` overrides READER_TUNING_DEFAULTS[store dtype]."""
    spec = lay.spec
    key_bits = VALUE_BITS[spec.store.dtype]
    chunk_elems = READER_CHUNK_BYTES * 8 // key_bits
    groups = lay.quant_bytes // READER_GROUP_BYTES
    stages = reader_wg_stages(lay, tune)
    wg = reader_wg_enabled(lay, tune)
    tma = reader_wg_tma(lay, tune)
    consumers = reader_wg_consumers(lay, tune)
    return {
        "kReaderHeads": READER_HEADS,
        "kReaderWarps": READER_WARPS,
        "kReaderWarpKeys": READER_WARP_KEYS,
        "kReaderMmaK": READER_MMA_K,
        "kReaderChunkElems": chunk_elems,
        "kReaderStepElems": READER_STEP_ELEMS,
        "kReaderStepsPerChunk": chunk_elems // READER_STEP_ELEMS,
        "kReaderGroups": groups,
        "kReaderSteps": groups * (chunk_elems // READER_STEP_ELEMS),
        "kReaderGroupsInFlight": min(groups, READER_MAX_GROUPS_IN_FLIGHT),
        "kReaderKeyVectorBytes": reader_key_vector_bytes(lay),
        "kReaderQTokenBytes": reader_q_token_bytes(spec),
        "kReaderTokensPerCta": reader_tokens_per_cta(spec),
        "kReaderWgTileKeys": READER_WG_TILE_KEYS,
        "kReaderWgChunkBytes": READER_WG_CHUNK_BYTES,
        "kReaderWgChunks": reader_wg_chunks(lay) if wg else 0,
        "kReaderWgAlign": READER_WG_ALIGN,
        "kReaderWgTokensPerCta": reader_wg_tokens_per_cta(lay, stages, tma) if wg else 0,
        "kReaderWgMinBlocks": reader_wg_ctas_per_sm(lay, 1, stages, tma, consumers) if wg else 0,
        "kReaderWgTmaBarrierBytes": READER_WG_TMA_BARRIER_BYTES,
        "kReaderWgTmaProducerThreads": READER_WG_TMA_PRODUCER_THREADS,
        **_tuning(spec),
        **(tune or {}),
        "kReaderWgmma": int(wg),  # the tuning's wish, where the path reads the layout
        "kReaderWgTma": int(tma),  # likewise
        "kReaderWgStages": stages,  # the ring of the variant that runs
    }


def reader_threads() -> int:
    return READER_WARPS * WARP


def reader_keys_per_cta(batch: int, token_groups: int, max_seq_len: int, sm_count: int) -> int:
    """Keys one CTA scores: the whole problem in about 16 CTAs per SM (several waves of 2-4 resident
    CTAs: a short tail; B = 1 short contexts still spread over the GPU), a power-of-two multiple of
    the keys a CTA scores per iteration, at most 8192."""
    step = READER_WARPS * READER_WARP_KEYS
    work = max(1, batch * token_groups) * max(1, max_seq_len)
    want = -(-work // max(1, 16 * sm_count))
    per = step
    while per < want and per < 8192:
        per *= 2
    return per


def reader_launch(spec: Spec, batch: int, next_n: int, max_seq_len: int, sm_count: int, *, wgmma: bool = False,
                  tune: dict[str, int] | None = None, lay: Layout | None = None
                  ) -> tuple[tuple[int, int, int], int, int, int]:
    """((grid x, y, z), threads, dynamic shared bytes, keys per CTA) of an indexer_logits launch:
    x splits the context, y is the sequence, z the groups of query tokens. `wgmma`: the cubin runs the
    sm_90a path (kgen.indexer.runs_wgmma); `tune`: the tuning it was rendered with; `lay`: compute(spec)
    when the caller has it."""
    if wgmma:
        return reader_wg_launch(spec, batch, next_n, max_seq_len, sm_count, tune, lay)
    tpc = reader_tokens_per_cta(spec)
    groups = -(-next_n // tpc)
    per = reader_keys_per_cta(batch, groups, max_seq_len, sm_count)
    grid = (max(1, -(-max_seq_len // per)), batch, groups)
    return grid, reader_threads(), min(tpc, next_n) * reader_q_token_bytes(spec), per


def reader_wg_launch(spec: Spec, batch: int, next_n: int, max_seq_len: int, sm_count: int,
                     tune: dict[str, int] | None = None, lay: Layout | None = None
                     ) -> tuple[tuple[int, int, int], int, int, int]:
    """The wgmma path's launch: one wave of a 1-D grid, the CTAs an SM holds at once times the SMs (no
    more than the tiles the longest rows could have: B x token groups x ceil(max_seq_len / 64)). Each CTA
    derives its share of the work from seq_lens in the kernel (kgen::detail::wg::Work): an even split of
    the tiles the sequences really have, then of the -inf columns past them, so ragged batches keep every SM
    busy and nothing here depends on the lengths (a captured CUDA graph replays for any). A DRAM-bound
    kernel gains nothing from a second wave but a tail. The fourth value: the keys one CTA scores where every
    sequence has max_seq_len of them."""
    lay = lay or compute(spec)
    stages = reader_wg_stages(lay, tune)
    tma = reader_wg_tma(lay, tune)
    consumers = reader_wg_consumers(lay, tune)
    tpc = reader_wg_tokens_per_cta(lay, stages, tma)
    ntok = min(tpc, next_n)
    groups = -(-next_n // tpc)
    slots = max(1, sm_count) * reader_wg_ctas_per_sm(lay, ntok, stages, tma, consumers)
    tiles = max(1, batch * groups * -(-max_seq_len // READER_WG_TILE_KEYS))
    ctas = max(1, min(slots, tiles))
    per = -(-tiles // ctas) * READER_WG_TILE_KEYS
    return (ctas, 1, 1), reader_wg_threads(lay, tune), reader_wg_smem_bytes(lay, ntok, stages, tma), per
