"""The spec model: one kernel variant, and a family of variants plus the dispatch it must cover.

This module is the one place where fields and their defaults are defined (docs/spec.md is
generated from it by `kgen schema`, kgen/schema_doc.py). A loaded file's models and their locations
are kgen/document.py's. The models check *types and shapes* only; everything about
values — ranges, byte math, compatibility — is a rule in `kgen.rules`, so that all problems of a
file are reported together, each with its own location and fix.
"""

from __future__ import annotations

from typing import Annotated, Literal, Union

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

InputDtype = Literal["fp32", "bf16", "fp16"]
NormKind = Literal["rmsnorm", "layernorm", "none"]
RopeStyle = Literal["interleaved", "neox"]
RopePlacement = Literal["first", "last"]
StoreDtype = Literal["bf16", "fp16", "fp8_e4m3", "fp4_e2m1"]
ScaleKind = Literal["none", "fp32", "fp32_pow2", "ue8m0"]
HalfDtype = Literal["bf16", "fp16"]
ScaleMath = Literal["divide", "reciprocal"]
PositionSource = Literal["array", "decode_plan", "compress_plan"]
Numerics = Literal["exact", "fast"]


class _Model(BaseModel):
    # strict: "128" is not an int, 1 is not a bool; extra: unknown keys are errors.
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class Norm(_Model):
    kind: NormKind = Field("rmsnorm", description="rmsnorm: x*rsqrt(mean(x^2)+eps)*w; layernorm: "
                           "(x-mean)*rsqrt(var+eps)*w+b; none: no norm, no weight")
    eps: float = Field(1e-6, description="added to the mean square / variance; finite and > 0")


class Rope(_Model):
    dim: int = Field(0, description="number of rotated dims (even); 0 = no RoPE")
    style: RopeStyle = Field("interleaved", description="interleaved: pairs (2i, 2i+1) (GPT-J); "
                             "neox: pairs (i, i + dim/2)")
    placement: RopePlacement = Field("last", description="rotate the first or the last `dim` dims")


class Positions(_Model):
    """Where a token's RoPE position comes from (kgen extension for engine plans)."""

    source: PositionSource = Field("array", description="array: `positions` int64 [N]; decode_plan: "
                                   "`positions` is SGLang's per-token 16-byte DecodePlan, uint8 [N, 16] = "
                                   "{uint32 seq_len, int32 write_loc, int32 read_page_0, int32 read_page_1}: "
                                   "position = seq_len - compress_ratio, and the token is written only where "
                                   "seq_len % compress_ratio == 0, seq_len >= compress_ratio, write_loc >= 0 "
                                   "and read_page_0 >= 0 (the compressor emits one key per compress_ratio "
                                   "tokens; -1 marks a padded entry); compress_plan: `positions` is SGLang's "
                                   "prefill CompressPlan, uint8 [N, 16] = {uint32 seq_len, uint16 ragged_id, "
                                   "uint16 buffer_len, int32 read_page_0, int32 read_page_1}, one row per "
                                   "compressed key (x row i is key i): position = seq_len - compress_ratio, "
                                   "the slot is out_loc[ragged_id] (out_loc is per query token), and a row is "
                                   "skipped where seq_len is 0xFFFFFFFF (padding), seq_len < compress_ratio or "
                                   "ragged_id >= N")
    compress_ratio: int = Field(4, description="tokens per compressed key (DeepSeek-V4's C4 indexer: 4); "
                                "only with source decode_plan or compress_plan")


class Store(_Model):
    dtype: StoreDtype = Field(description="what the cache holds per value")
    scale: ScaleKind = Field("none", description="per-block scale: none (bf16/fp16, or fp8 at a "
                             "uniform scale of 1.0), fp32, fp32_pow2 (power-of-two fp32), ue8m0 "
                             "(one biased-exponent byte)")
    block: int | None = Field(None, description="elements per scale; default: the whole quantized span")
    amax_floor: float = Field(1e-4, description="amax is clamped to at least this before the scale "
                              "is derived (avoids a zero scale)")
    bf16_roundtrip: bool = Field(False, description="round values to bf16 before quantizing")
    rope_dtype: HalfDtype | None = Field(None, description="keep the RoPE dims unquantized in this "
                                         "dtype (packed latent); only with a quantized store")
    scale_math: ScaleMath = Field("divide", description="how amax becomes a scale: divide "
                                  "(amax / fmax, IEEE) or reciprocal (amax * fp32(1/fmax), "
                                  "DeepSeek's tilelang); for fp32 scales about half of all amax get "
                                  "scales one ulp apart, power-of-two scales agree")


class PageLayout(_Model):
    page_size: int = Field(description="tokens per page (a power of two)")
    scale_stride: int | None = Field(None, description="bytes per token in the scale region; "
                                     "default: exactly what the scales need")
    page_align: int = Field(1, description="page bytes are rounded up to a multiple of this")


class Host(_Model):
    bytes_per_token: int | None = Field(None, description="what the engine's allocator assumes")
    page_bytes: int | None = Field(None, description="what the engine's allocator assumes")


class Launch(_Model):
    """Kernel launch shape (kgen extension; the defaults are what the H200 benchmark chose on production-like
    inputs, bench/results/h200-2026-11-30: 4-warp blocks beat 8 and 16 at every head_dim and token count
    measured)."""

    warps_per_block: int = Field(4, description="warps per thread block (one token per warp at a time)")
    tokens_per_warp: int = Field(2, description="tokens a warp loads before it computes (memory "
                                 "parallelism); the grid shrinks accordingly (below `large_min_tokens`, if set). 2 "
                                 "is faster than the peer at every N; 4 moves more bytes at 1M tokens (head_dim 128: "
                                 "0.81 of copy against 0.77) but adds latency at small N (CUDA graph, 1 token: 1.5 us "
                                 "against 1.2): the shipped indexers take 8 (loaded in stages of 2, `stage_tokens`) "
                                 "from 16384 tokens on")
    min_blocks_per_sm: int = Field(0, description="__launch_bounds__ minimum resident blocks per SM; "
                                   "caps registers at 65536 / (threads x this) for occupancy (0: no hint)")
    pdl: bool = Field(True, description="programmatic dependent launch on sm_90+: the kernel waits for the "
                      "previous kernel in the stream (griddepcontrol.wait) only after its prologue, and the "
                      "launch lets it start early; no effect on older GPUs or on the bytes")
    large_min_tokens: int = Field(0, description="from this many tokens on, a launch gives each warp "
                                  "`large_tokens_per_warp` tokens instead of `tokens_per_warp` (same warps per "
                                  "block, same kernel: it takes the path its num_tokens selects, the host sizes the "
                                  "grid by the same rule, kgen.layout.launch_shape); 0: one shape for every N. More "
                                  "tokens per warp keep more DRAM reads in flight at large N but lengthen each "
                                  "warp's serial work at small N (CUDA-graph latency)")
    large_tokens_per_warp: int = Field(4, description="tokens per warp from `large_min_tokens` tokens on; "
                                       "no byte depends on it")
    stage_tokens: int = Field(0, description="0: a warp issues the loads of all its tokens before it computes "
                              "any. k >= 1: it loads all its tokens' slots and positions first, then their x and "
                              "freqs rows in groups of k, each group's loads issued before the previous group "
                              "computes (a software pipeline: the next group's DRAM round trip overlaps this "
                              "group's math; two groups' rows in registers). Takes effect in a launch shape whose "
                              "tokens per warp exceed k; no byte depends on it")


def _version(value: object) -> object:
    """`kgen: true` and `kgen: 1.0` equal 1 to Python (and to a Literal check): a version is an integer."""
    if isinstance(value, bool) or not isinstance(value, int):
        shown = str(value).lower() if isinstance(value, bool) else repr(value)
        raise ValueError(f"the schema version is the integer 1, not {shown}")
    return value


SchemaVersion = Annotated[Literal[1], BeforeValidator(_version)]


class Spec(_Model):
    kgen: SchemaVersion = Field(description="schema version")
    name: str = Field(description="[a-z][a-z0-9_]*, at most 64 chars; becomes file and symbol names")
    description: str = Field("", description="free text")
    input_dtype: InputDtype = Field(description="dtype of the input rows and of the norm weight/bias")
    head_dim: int = Field(description="values per token: 32 lanes x a power of two (32, 64, 128, 256, "
                          "512 or 1024)")
    norm: Norm = Field(default_factory=Norm)
    rope: Rope = Field(default_factory=Rope)
    hadamard: bool = Field(False, description="Walsh-Hadamard over head_dim, scaled 1/sqrt(head_dim), "
                           "after RoPE")
    positions: Positions = Field(default_factory=Positions)
    store: Store
    layout: PageLayout
    host: Host | None = Field(None, description="what the engine allocates; checked against kgen's math")
    numerics: Numerics = Field("exact", description="exact: the arithmetic of docs/numerics.md, the Torch "
                               "reference's bytes. fast: fused multiply-adds (sum of squares, RoPE, layernorm), the "
                               "norm's 1/sqrt as one approximate rsqrt, the Hadamard scale folded into the fp32 "
                               "scale's multiplier; fewer instructions and registers, bytes within a stated "
                               "tolerance of the reference (kgen test checks it: every differing value one code "
                               "away, counted; fp32 scales within 16 ulps); fp8_e4m3 stores with scale none or fp32 "
                               "and no rope_dtype only (rule numerics)")
    launch: Launch = Field(default_factory=Launch)
    targets: list[str] = Field(description="NVRTC architectures, e.g. sm_90a")


DispatchValue = Union[str, int, bool]  # noqa: UP007 (pydantic strict unions)


class Dispatch(_Model):
    key: list[str] = Field(description="dotted spec fields that select a variant, e.g. store.dtype")
    require: list[dict[str, DispatchValue]] = Field(default_factory=list,
                                                    description="key values that some variant must serve")


class Family(_Model):
    kgen: SchemaVersion
    family: str = Field(description="[a-z][a-z0-9_]*; names the dispatch table")
    description: str = ""
    variants: list[Annotated[str, Field()] | dict] = Field(description="paths relative to this file, "
                                                           "or inline specs")
    dispatch: Dispatch
