"""Spec builders and hypothesis strategies shared by the test suite.

* `to_yaml(data)` writes a spec dict as block YAML and returns the text plus the 1-based (line, col)
  of every key and list item it wrote, computed here independently of ruamel, so tests can check
  that kgen's locations point at the right key.
* `base_spec()` / `SHIPPED`: known-good starting points for mutation tests.
* `valid_specs()`: spec dicts the validator ACCEPTS (reuse it to render, compile and GPU-test
  accepted specs: `@given(valid_specs())`). `spec_dicts()`: the whole field space, valid or not,
  including wrong types, missing and unknown keys, huge and negative numbers.
"""

from __future__ import annotations

import copy
import json
import math
import os
from pathlib import Path

from hypothesis import strategies as st

from kgen import sample

ROOT = Path(__file__).resolve().parent.parent
SPECS = ROOT / "specs"


def subprocess_pythonpath() -> str:
    """PYTHONPATH for a subprocess that runs this checkout's kgen: the checkout first, then the caller's
    entries (the GPU machine carries pydantic and the other wheels kgen needs there)."""
    return os.pathsep.join([str(ROOT), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))])

# Every shipped variant and the byte math docs/layouts.md §3 gives for it.
SHIPPED = {
    # file: (variant name, bytes_per_token, page_bytes)
    "dsv4/indexer_fp8.yaml": ("dsv4_indexer_fp8", 132, 8448),
    "dsv4/indexer_fp4.yaml": ("dsv4_indexer_fp4", 68, 4352),
    "indexer_bf16.yaml": ("dsv4_indexer_bf16", 256, 16384),
    "dsv4/latent_fp8_p64.yaml": ("dsv4_latent_fp8_p64", 584, 37440),
    "dsv4/latent_fp8_p2.yaml": ("dsv4_latent_fp8_p2", 584, 1728),
    "dsv4/latent_bf16.yaml": ("dsv4_latent_bf16", 1024, 65536),
    "dsv4/latent_fp8_uniform.yaml": ("dsv4_latent_fp8_uniform", 512, 32768),
    "dsv32_indexer.yaml": ("dsv32_indexer_fp8", 132, 8448),
}


def base_spec() -> dict:
    """A valid bf16 indexer spec without a host section (so that no host check is involved)."""
    return {
        "kgen": 1,
        "name": "t_spec",
        "input_dtype": "fp32",
        "head_dim": 128,
        "norm": {"kind": "rmsnorm", "eps": 1e-6},
        "rope": {"dim": 64, "style": "interleaved", "placement": "last"},
        "hadamard": True,
        "store": {"dtype": "bf16", "scale": "none"},
        "layout": {"page_size": 64},
        "targets": ["sm_90a"],
    }


def fp8_spec() -> dict:
    s = base_spec()
    s["store"] = {"dtype": "fp8_e4m3", "scale": "fp32", "block": 128, "amax_floor": 1e-4}
    return s


def packed_latent_spec() -> dict:
    s = base_spec()
    s.update(head_dim=512, hadamard=False)
    s["store"] = {"dtype": "fp8_e4m3", "scale": "ue8m0", "block": 64, "bf16_roundtrip": True, "rope_dtype": "bf16"}
    s["layout"] = {"page_size": 64, "scale_stride": 8, "page_align": 576}
    return s


def fp4_spec() -> dict:
    s = base_spec()
    s["store"] = {"dtype": "fp4_e2m1", "scale": "ue8m0", "block": 32}
    return s


def clone(d: dict) -> dict:
    return copy.deepcopy(d)


# ---------------------------------------------------------------------------------------------
# YAML writing with known positions


def scalar(v) -> str:
    if v is None:
        return "null"
    if v is True:
        return "true"
    if v is False:
        return "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if math.isnan(v):
            return ".nan"
        if math.isinf(v):
            return ".inf" if v > 0 else "-.inf"
        text = repr(v)
        return text if any(c in text for c in ".en") else text + ".0"
    if isinstance(v, str):
        return json.dumps(v)  # a JSON string is a valid YAML double-quoted scalar
    raise TypeError(type(v))


def to_yaml(data: dict) -> tuple[str, dict[tuple, tuple[int, int]]]:
    """Block YAML for `data` and {loc: (line, col)} of every key / item written (1-based)."""
    lines: list[str] = []
    pos: dict[tuple, tuple[int, int]] = {}

    def is_flat_list(v) -> bool:
        return isinstance(v, list) and all(not isinstance(x, (dict, list)) for x in v)

    def emit_map(d: dict, indent: int, loc: tuple, first_prefix: str | None = None) -> None:
        for i, (k, v) in enumerate(d.items()):
            prefix = first_prefix if (i == 0 and first_prefix is not None) else " " * indent
            col = len(prefix) + 1
            pos[(*loc, k)] = (len(lines) + 1, col)
            if isinstance(v, dict) and v:
                lines.append(f"{prefix}{k}:")
                emit_map(v, indent + 2, (*loc, k))
            elif isinstance(v, dict):
                lines.append(f"{prefix}{k}: {{}}")
            elif is_flat_list(v):
                head = f"{prefix}{k}: ["
                items, c = [], len(head) + 1
                for j, x in enumerate(v):
                    pos[(*loc, k, j)] = (len(lines) + 1, c)
                    items.append(scalar(x))
                    c += len(items[-1]) + 2
                lines.append(head + ", ".join(items) + "]")
            elif isinstance(v, list):
                lines.append(f"{prefix}{k}:")
                emit_list(v, indent + 2, (*loc, k))
            else:
                lines.append(f"{prefix}{k}: {scalar(v)}")

    def emit_list(items: list, indent: int, loc: tuple) -> None:
        for j, x in enumerate(items):
            prefix = " " * indent + "- "
            pos[(*loc, j)] = (len(lines) + 1, len(prefix) + 1)
            if isinstance(x, dict) and x:
                emit_map(x, indent + 2, (*loc, j), first_prefix=prefix)
            elif isinstance(x, list):
                lines.append(f"{prefix}[{', '.join(scalar(y) for y in x)}]" if is_flat_list(x) else f"{prefix}[]")
            elif isinstance(x, dict):
                lines.append(f"{prefix}{{}}")
            else:
                lines.append(f"{prefix}{scalar(x)}")

    emit_map(data, 0, ())
    return "\n".join(lines) + "\n", pos


def write_yaml(path: Path, data: dict) -> dict[tuple, tuple[int, int]]:
    text, pos = to_yaml(data)
    path.write_text(text)
    return pos


# ---------------------------------------------------------------------------------------------
# hypothesis strategies

HEAD_DIMS = list(sample.HEAD_DIMS)
TARGETS = ["sm_90a", "sm_100a", "sm_120a", "sm_80", "sm_89"]
accepted = sample.accepted


class _Draw:
    """kgen.sample's Chooser over hypothesis' draw (so hypothesis shrinks a failing spec)."""

    def __init__(self, draw):
        self.draw = draw

    def choice(self, options):
        return self.draw(st.sampled_from(list(options)))


@st.composite
def _spec_candidates(draw, max_page_size: int = 1024) -> dict:
    targets = draw(st.lists(st.sampled_from(["sm_90a", "sm_100a", "sm_120a"]), min_size=1, max_size=3, unique=True))
    return sample.spec_candidate(_Draw(draw), name=draw(st.from_regex(r"[a-z][a-z0-9_]{0,20}", fullmatch=True)),
                                 max_page_size=max_page_size, targets=targets)


def valid_specs(max_page_size: int = 1024) -> st.SearchStrategy[dict]:
    """Spec dicts the validator accepts: every store kind (bf16, fp16, fp8 with each scale kind,
    fp4, packed fp8 + kept RoPE), head_dim 32..1024, both RoPE styles and placements, scale
    strides, page alignment, page_size up to `max_page_size` (a power of two)."""
    return _spec_candidates(max_page_size).filter(accepted)


# -- the whole field space, valid or not ---------------------------------------------------------

_junk = st.one_of(
    st.none(), st.booleans(), st.integers(-(10**30), 10**30), st.floats(allow_nan=True, allow_infinity=True),
    st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=0x2FF), max_size=12),
    st.lists(st.integers(-3, 3), max_size=3),
    st.dictionaries(st.sampled_from(["a", "dim", "x"]), st.integers(), max_size=2),
)


def _field(valid: st.SearchStrategy) -> st.SearchStrategy:
    """Mostly a valid value, sometimes junk of any type."""
    return st.one_of(valid, valid, valid, _junk)


_ints = st.one_of(st.integers(-70000, 70000), st.sampled_from([0, 1, 2, 3, 31, 32, 63, 64, 576, 2**31, 10**30, -1]))


@st.composite
def spec_dicts(draw) -> dict:
    """Any spec dict, valid or not: values from the whole field space, wrong types, huge and negative
    numbers, missing required keys and unknown keys."""
    d = {
        "kgen": draw(_field(st.sampled_from([1, 1, 2]))),
        "name": draw(_field(st.sampled_from(["ok_name", "Bad-Name", "../x", "", "a" * 70]))),
        "input_dtype": draw(_field(st.sampled_from(["fp32", "bf16", "fp16", "fp64"]))),
        "head_dim": draw(_field(st.one_of(st.sampled_from(HEAD_DIMS), _ints))),
        "norm": draw(_field(st.fixed_dictionaries({}, optional={
            "kind": _field(st.sampled_from(["rmsnorm", "layernorm", "none", "batchnorm"])),
            "eps": _field(st.floats(allow_nan=True, allow_infinity=True))}))),
        "rope": draw(_field(st.fixed_dictionaries({}, optional={
            "dim": _field(st.one_of(st.sampled_from([0, 2, 4, 8, 32, 64, 66, 128, 512]), _ints)),
            "style": _field(st.sampled_from(["interleaved", "neox", "other"])),
            "placement": _field(st.sampled_from(["first", "last", "middle"]))}))),
        "hadamard": draw(_field(st.booleans())),
        "store": draw(_field(st.fixed_dictionaries(
            {"dtype": _field(st.sampled_from(["bf16", "fp16", "fp8_e4m3", "fp4_e2m1", "int8"]))}, optional={
                "scale": _field(st.sampled_from(["none", "fp32", "fp32_pow2", "ue8m0", "int"])),
                "block": _field(st.one_of(st.none(), st.sampled_from([1, 4, 16, 32, 64, 128, 448, 512]), _ints)),
                "amax_floor": _field(st.floats(allow_nan=True, allow_infinity=True)),
                "bf16_roundtrip": _field(st.booleans()),
                "rope_dtype": _field(st.sampled_from([None, "bf16", "fp16", "fp8_e4m3"])),
                "scale_math": _field(st.sampled_from(["divide", "reciprocal", "guess"]))}))),
        "layout": draw(_field(st.fixed_dictionaries(
            {"page_size": _field(st.one_of(st.sampled_from([1, 2, 64, 65536, 131072]), _ints))}, optional={
                "scale_stride": _field(st.one_of(st.none(), _ints)),
                "page_align": _field(st.one_of(st.sampled_from([1, 576, 2**31 - 1]), _ints))}))),
        "host": draw(st.one_of(st.none(), _field(st.fixed_dictionaries({}, optional={
            "bytes_per_token": _field(_ints), "page_bytes": _field(_ints)})))),
        "launch": draw(_field(st.fixed_dictionaries({}, optional={
            "warps_per_block": _field(_ints), "tokens_per_warp": _field(_ints),
            "large_min_tokens": _field(_ints), "large_tokens_per_warp": _field(_ints),
            "stage_tokens": _field(_ints)}))),
        "targets": draw(_field(st.lists(st.sampled_from(TARGETS + ["sm_1000", "compute_90", "sm_90x"]),
                                        max_size=4))),
    }
    for k in draw(st.sets(st.sampled_from(sorted(d)), max_size=3)):
        del d[k]  # missing keys (required or not)
    if draw(st.integers(0, 9)) == 0:
        d[draw(st.sampled_from(["colour", "head_dims", "storee"]))] = 1  # unknown key
    return d
