"""Layout math: the single source of truth for every byte offset and every lane assignment.

The validator's rules, the templates (through `kernel_constants`), the Torch reference, the runtime
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


def kernel_constants(lay: Layout) -> dict[str, object]:
    """Every number the rendered config header defines, by its C++ name."""
    s, spec = lay.spec.store, lay.spec
    V = lay.values_per_lane
    import numpy as np

    had_scale = float(np.float32(1.0) / np.sqrt(np.float32(spec.head_dim))) if spec.head_dim > 0 else 1.0
    return {
        "kHeadDim": spec.head_dim,
        "kValuesPerLane": int(V) if V.denominator == 1 else 0,
        "kRopeDim": spec.rope.dim,
        "kRopeStart": lay.rope_span.start,
        "kQuantStart": lay.quant_span.start,
        "kQuantDim": lay.quant_span.size,
        "kKeptStart": lay.kept_span.start,
        "kKeptDim": lay.kept_span.size,
        "kBlock": lay.block,
        "kBlocksPerToken": lay.blocks_per_token,
        "kPageSize": lay.page_size,
        "kRowBytes": lay.row_bytes,
        "kQuantRowOffset": lay.quant_row_offset,
        "kKeptRowOffset": lay.kept_row_offset,
        "kScaleRegionOffset": lay.scale_region_offset,
        "kScaleStride": lay.scale_stride,
        "kScaleUnit": lay.scale_unit,
        "kPageBytes": lay.page_bytes,
        "kStoreVectorBytes": store_vector_bytes(lay),
        "kKeptVectorBytes": kept_vector_bytes(lay),
        "kEps": float_hex(spec.norm.eps) if math.isfinite(spec.norm.eps) else "0.0f",
        "kAmaxFloor": float_hex(s.amax_floor) if math.isfinite(s.amax_floor) else "0.0f",
        "kQuantMax": float_hex(QUANT_MAX.get(s.dtype, 1.0)),
        "kInvQuantMax": float_hex(1.0 / QUANT_MAX.get(s.dtype, 1.0)),
        "kHadamardScale": float_hex(had_scale),
        "kWarpsPerBlock": spec.launch.warps_per_block,
        "kTokensPerWarp": spec.launch.tokens_per_warp,
        "kMinBlocksPerSm": spec.launch.min_blocks_per_sm,
    }


def threads_per_block(spec: Spec) -> int:
    return spec.launch.warps_per_block * WARP


def tokens_per_block(spec: Spec) -> int:
    """One warp per token at a time, each warp owning `tokens_per_warp` consecutive tokens."""
    return spec.launch.warps_per_block * spec.launch.tokens_per_warp


def launch_shape(spec: Spec, num_tokens: int) -> tuple[int, int]:
    """(blocks, threads per block) of a launch over `num_tokens`."""
    return max(1, -(-num_tokens // tokens_per_block(spec))), threads_per_block(spec)


# ---------------------------------------------------------------------------------------------
# What the rendered kernel config needs beyond `kernel_constants` (kgen.render substitutes these;
# the header `templates/include/kgen/norm_rope_store.cuh` only multiplies a lane index by them).

INT64_MAX = (1 << 63) - 1


def _q(n, d) -> int:
    """n / d when it is a whole number, else 0 (the kernel's static_asserts say why)."""
    if d == 0 or n % d:
        return 0
    return int(n // d)


def lane_constants(lay: Layout) -> dict[str, object]:
    """Lane mapping of the spans, per-lane byte counts, the slot split: what the kernel's lanes index
    with. Zeros where the mapping does not exist (the kernel's twins reject such a spec)."""
    spec = lay.spec
    V = lay.values_per_lane
    Vi = int(V) if V.denominator == 1 else 0
    bits = VALUE_BITS[spec.store.dtype]
    r = spec.rope.dim
    neox = spec.rope.style == "neox"
    P = lay.page_size
    return {
        "kRopeLane0": _q(lay.rope_span.start, Vi),
        "kRopeLanes": _q(lay.rope_span.size, Vi),
        "kRopeHalfLanes": _q(r // 2, Vi) if r > 0 else 0,  # lanes between NeoX partners
        "kQuantLane0": _q(lay.quant_span.start, Vi),
        "kQuantLanes": _q(lay.quant_span.size, Vi),
        "kKeptLane0": _q(lay.kept_span.start, Vi),
        "kKeptLanes": _q(lay.kept_span.size, Vi),
        "kBlockLanes": _q(lay.block, Vi),
        "kInLaneBytes": Vi * INPUT_BYTES[spec.input_dtype],  # bytes of x (and weight, bias) per lane
        "kFreqsLaneFloats": (2 * Vi if neox else Vi) if r > 0 else 0,  # freqs floats per rope lane
        "kQuantLaneBits": Vi * bits,  # bits of quantized values per lane (4 = two lanes share a byte)
        "kQuantLaneBytes": lane_bytes(lay, bits),
        "kKeptLaneBytes": lane_bytes(lay, 16) if lay.kept_bytes else 0,
        "kPageShift": P.bit_length() - 1 if is_pow2(P) else 0,  # slot -> (page, token): shift and mask
        "kScaleBytes": lay.scale_bytes,
        "kBytesPerToken": lay.bytes_per_token,
    }


def null_layout(spec: Spec) -> Layout:
    """A layout of zeros, for rendering a spec whose byte math cannot be computed (`--no-validate`):
    the kernel's static_asserts then say which rule it breaks."""
    z = Span(0, 0)
    return Layout(spec=spec, values_per_lane=Fraction(0), rope_span=z, quant_span=z, kept_span=z,
                  block=0, blocks_per_token=0, quant_bytes=0, kept_bytes=0, row_bytes=0, scale_unit=0,
                  scale_bytes=0, scale_stride=0, bytes_per_token=0, page_bytes=0)


def host_constants(lay: Layout) -> dict[str, object]:
    """The byte math an engine's allocator needs, by name (rendered as C++ and Python constants)."""
    spec = lay.spec
    return {
        "PAGE_SIZE": lay.page_size,
        "BYTES_PER_TOKEN": lay.bytes_per_token,
        "PAGE_BYTES": lay.page_bytes,
        "ROW_BYTES": lay.row_bytes,
        "ROWS_BYTES": lay.rows_bytes,
        "QUANT_ROW_OFFSET": lay.quant_row_offset,
        "QUANT_BYTES": lay.quant_bytes,
        "KEPT_ROW_OFFSET": lay.kept_row_offset,
        "KEPT_BYTES": lay.kept_bytes,
        "SCALE_REGION_OFFSET": lay.scale_region_offset,
        "SCALE_REGION_BYTES": lay.scale_region_bytes,
        "SCALE_STRIDE": lay.scale_stride,
        "SCALE_UNIT": lay.scale_unit,
        "SCALE_BYTES": lay.scale_bytes,
        "BLOCKS_PER_TOKEN": lay.blocks_per_token,
        "BLOCK": lay.block,
        "PADDING_BYTES": lay.padding_bytes,
        "HEAD_DIM": spec.head_dim,
        "ROPE_DIM": spec.rope.dim,
        "WARPS_PER_BLOCK": spec.launch.warps_per_block,
        "TOKENS_PER_WARP": spec.launch.tokens_per_warp,
        "THREADS_PER_BLOCK": threads_per_block(spec),
        "TOKENS_PER_BLOCK": tokens_per_block(spec),
    }
