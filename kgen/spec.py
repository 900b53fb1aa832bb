"""The spec model: one kernel variant, and a family of variants plus the dispatch it must cover.

This module is the one place where fields and their defaults are defined (docs/spec.md is
generated from it by `kgen schema`). The models check *types and shapes* only; everything about
values — ranges, byte math, compatibility — is a rule in `kgen.rules`, so that all problems of a
file are reported together, each with its own location and fix.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .diagnostics import Loc, Problem

InputDtype = Literal["fp32", "bf16", "fp16"]
NormKind = Literal["rmsnorm", "layernorm", "none"]
RopeStyle = Literal["interleaved", "neox"]
RopePlacement = Literal["first", "last"]
StoreDtype = Literal["bf16", "fp16", "fp8_e4m3", "fp4_e2m1"]
ScaleKind = Literal["none", "fp32", "fp32_pow2", "ue8m0"]
HalfDtype = Literal["bf16", "fp16"]
ScaleMath = Literal["divide", "reciprocal"]


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
    """Kernel launch shape (kgen extension; the defaults are what the benchmark chose)."""

    warps_per_block: int = Field(8, description="warps per thread block (one token per warp at a time)")
    tokens_per_warp: int = Field(2, description="tokens a warp loads before it computes (memory "
                                 "parallelism); the grid shrinks accordingly")
    min_blocks_per_sm: int = Field(0, description="__launch_bounds__ minimum resident blocks per SM; "
                                   "caps registers at 65536 / (threads x this) for occupancy (0: no hint)")


class Spec(_Model):
    kgen: Literal[1] = Field(description="schema version")
    name: str = Field(description="[a-z][a-z0-9_]*, at most 64 chars; becomes file and symbol names")
    description: str = Field("", description="free text")
    input_dtype: InputDtype = Field(description="dtype of the input rows and of the norm weight/bias")
    head_dim: int = Field(description="values per token: a multiple of 32 in [32, 1024]")
    norm: Norm = Field(default_factory=Norm)
    rope: Rope = Field(default_factory=Rope)
    hadamard: bool = Field(False, description="Walsh-Hadamard over head_dim, scaled 1/sqrt(head_dim), "
                           "after RoPE")
    store: Store
    layout: PageLayout
    host: Host | None = Field(None, description="what the engine allocates; checked against kgen's math")
    launch: Launch = Field(default_factory=Launch)
    targets: list[str] = Field(description="NVRTC architectures, e.g. sm_90a")


DispatchValue = Union[str, int, bool]  # noqa: UP007 (pydantic strict unions)


class Dispatch(_Model):
    key: list[str] = Field(description="dotted spec fields that select a variant, e.g. store.dtype")
    require: list[dict[str, DispatchValue]] = Field(default_factory=list,
                                                    description="key values that some variant must serve")


class Family(_Model):
    kgen: Literal[1]
    family: str = Field(description="[a-z][a-z0-9_]*; names the dispatch table")
    description: str = ""
    variants: list[Annotated[str, Field()] | dict] = Field(description="paths relative to this file, "
                                                           "or inline specs")
    dispatch: Dispatch


# ---------------------------------------------------------------------------------------------
# Loading


@dataclass
class Variant:
    """One variant as loaded: the model (None when its schema is broken) and where it came from."""

    source: "SourceFile"  # noqa: F821
    base: Loc = ()  # path of the spec mapping inside `source` (inline family entries)
    spec: Spec | None = None
    problems: list[Problem] = field(default_factory=list)

    @property
    def name(self) -> str | None:
        if self.spec is not None:
            return self.spec.name
        data = self.data
        return data.get("name") if isinstance(data, dict) and isinstance(data.get("name"), str) else None

    @property
    def data(self):
        node = self.source.data
        for part in self.base:
            node = node[part]
        return node

    def locate(self, problem: Problem) -> Problem:
        return self.source.locate(problem, self.base)


@dataclass
class Document:
    """What one path on the command line holds: a single variant or a family of them."""

    path: Path
    source: "SourceFile"  # noqa: F821
    family: Family | None = None
    variants: list[Variant] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)  # located; file-level and schema problems
    includes: list[Path] = field(default_factory=list)  # every file read, for cache keys

    @property
    def is_family(self) -> bool:
        return "family" in self.source.data or "variants" in self.source.data


def _real_loc(loc: tuple, data, keep_last: bool) -> tuple:
    """`loc` without pydantic's union tags ('str', 'int', 'dict[any,any]'...): keep the parts that
    exist in the data (and the last one of a missing/unknown-key error, which names the key)."""
    out, node = [], data
    for i, part in enumerate(loc):
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
            node = node[part]
        elif data is None and not (isinstance(part, str) and "[" in part):
            pass  # no data to compare with: keep all but the obvious tags
        elif keep_last and i == len(loc) - 1:
            pass
        else:
            continue
        out.append(part)
    return tuple(out)


def _got(value) -> str:
    if isinstance(value, (dict, list)):
        return type(value).__name__
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def schema_problems(error: ValidationError, data=None) -> list[Problem]:
    """pydantic errors as (unlocated) problems, one per offending field.

    A value that fails every member of a union (e.g. `variants: [5]`) gives pydantic one error per
    member; they are merged into one problem ("a valid string or a valid dictionary")."""
    out: list[Problem] = []
    merged: dict[tuple, int] = {}
    for e in error.errors(include_url=False):
        kind = e["type"]
        loc = _real_loc(tuple(e["loc"]), data, keep_last=kind in ("missing", "extra_forbidden"))
        if kind == "extra_forbidden":
            rule, msg, fix = "schema-unknown-key", f"unknown key '{loc[-1]}'", "remove it or fix its spelling"
        elif kind == "missing":
            rule, msg, fix = "schema-missing", f"required key '{loc[-1]}' is missing", f"add '{loc[-1]}:'"
        else:
            rule, fix = "schema-type", "see docs/spec.md (kgen schema) for the field"
            want = e["msg"]
            if (rule, loc) in merged:  # another member of the same union
                i = merged[(rule, loc)]
                prev = out[i]
                head, _, tail = prev.message.rpartition(" (got ")
                want = want.removeprefix("Input should be ")
                if want not in head:
                    out[i] = Problem(rule, f"{head} or {want} (got {tail}", loc=loc, fix=fix)
                continue
            msg = f"{want} (got {_got(e.get('input'))})"
            merged[(rule, loc)] = len(out)
        out.append(Problem(rule, msg, loc=loc, fix=fix))
    return out


def parse_variant(source, base: Loc = ()) -> Variant:
    v = Variant(source=source, base=base)
    data = v.data
    if not isinstance(data, dict):
        v.problems.append(v.locate(Problem("schema-type", "a variant must be a mapping", fix="write `key: value` lines")))
        return v
    try:
        v.spec = Spec.model_validate(data)
    except ValidationError as e:
        v.problems.extend(v.locate(p) for p in schema_problems(e, data))
    return v


# ---------------------------------------------------------------------------------------------
# Field reference (docs/spec.md is exactly this; a test keeps them equal)


def _type_name(ann) -> str:
    import typing

    args = typing.get_args(ann)
    if typing.get_origin(ann) is Literal:
        return " \\| ".join(str(a) for a in args)
    if typing.get_origin(ann) is list:
        return f"list of {_type_name(args[0])}"
    if args:
        return " \\| ".join(_type_name(a) for a in args if a is not type(None)) + (
            " \\| null" if type(None) in args else "")
    return {"int": "int", "float": "float", "str": "str", "bool": "bool"}.get(getattr(ann, "__name__", ""), str(ann))


def _yaml_value(v) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    return repr(v) if isinstance(v, str) and not v else str(v)


def field_reference() -> str:
    """Markdown table of every spec field: dotted name, type, default (or required), meaning."""
    lines = ["# kgen spec fields", "",
             "Generated from `kgen/spec.py` by `kgen schema` (the one place defaults live). Unknown keys "
             "are errors; values are checked by the rules (`kgen validate`).", "",
             "| field | type | default | meaning |", "|---|---|---|---|"]

    def walk(model: type[BaseModel], prefix: str) -> None:
        for name, f in model.model_fields.items():
            ann = f.annotation
            nested = [a for a in (ann, *getattr(ann, "__args__", ())) if isinstance(a, type) and issubclass(a, BaseModel)]
            if nested:
                walk(nested[0], f"{prefix}{name}.")
                continue
            default = "**required**" if f.is_required() else f"`{_yaml_value(f.get_default(call_default_factory=True))}`"
            lines.append(f"| `{prefix}{name}` | {_type_name(ann)} | {default} | {f.description or ''} |")

    walk(Spec, "")
    return "\n".join(lines) + "\n"
