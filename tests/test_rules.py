"""Every variant rule of kgen/rules.py: a spec that breaks only that rule, located at the offending
key (file:line:col computed independently from the YAML we write), with the numbers in the message;
and specs that pass."""

from __future__ import annotations

import os

import pytest

from kgen.rules import RULES
from strategies import SHIPPED, SPECS, base_spec, clone, fp4_spec, fp8_spec, packed_latent_spec


def _set(path: str, value):
    def mutate(d):
        node = d
        *head, last = path.split(".")
        for k in head:
            node = node.setdefault(k, {})
        node[last] = value
    return mutate


def _del(path: str):
    def mutate(d):
        node = d
        *head, last = path.split(".")
        for k in head:
            node = node[k]
        del node[last]
    return mutate


def _all(*fns):
    def mutate(d):
        for f in fns:
            f(d)
    return mutate


# (id, base, mutation, rule, loc of the problem, key whose position it must point at, message parts)
# The position key differs from `loc` only where `loc` names a key the file does not contain.
CASES = [
    # -- name
    ("name-case", base_spec, _set("name", "Bad-Name"), "name", "name", None, ["'Bad-Name'", "[a-z][a-z0-9_]*"]),
    ("name-dotdot", base_spec, _set("name", "../escape"), "name", "name", None, ["'../escape'"]),
    ("name-long", base_spec, _set("name", "a" * 65), "name", "name", None, ["at most 64"]),
    ("name-cxx-keyword", base_spec, _set("name", "class"), "name", "name", None, ["'class'", "C++ keyword"]),
    # -- targets
    ("targets-empty", base_spec, _set("targets", []), "targets", "targets", None, ["no targets"]),
    ("targets-not-arch", base_spec, _set("targets", ["sm_90a", "compute_90"]), "targets", "targets.1", None,
     ["'compute_90'", "sm_90a"]),
    ("targets-a-suffix", base_spec, _set("targets", ["sm_75a"]), "targets", "targets.0", None, ["9.0"]),
    ("targets-old", base_spec, _set("targets", ["sm_75"]), "targets", "targets.0", None, ["sm_80"]),
    ("targets-unknown", base_spec, _set("targets", ["sm_90a", "sm_999"]), "targets", "targets.1", None,
     ["sm_999", "90"]),
    ("targets-duplicate", base_spec, _set("targets", ["sm_90a", "sm_90a"]), "targets", "targets.1", None,
     ["listed twice"]),
    # -- dims and lanes
    ("head-dim-range", base_spec, _set("head_dim", 2048), "head-dim", "head_dim", None, ["2048", "64 per lane",
                                                                                          "[32, 1024]"]),
    ("head-dim-lanes", base_spec, _all(_set("head_dim", 96), _set("hadamard", False)), "head-dim", "head_dim", None,
     ["96 / 32 = 3 per lane"]),
    ("head-dim-small", base_spec, _all(_set("head_dim", 16), _set("rope.dim", 0)), "head-dim", "head_dim", None,
     ["16 / 32 = 0.5"]),
    ("rope-dim-odd", base_spec, _set("rope.dim", 63), "rope-dim", "rope.dim", None, ["63", "head_dim = 128"]),
    ("rope-dim-big", base_spec, _set("rope.dim", 256), "rope-dim", "rope.dim", None, ["256", "head_dim = 128"]),
    ("rope-dim-negative", base_spec, _set("rope.dim", -2), "rope-dim", "rope.dim", None, ["-2"]),
    ("rope-lanes-partial", base_spec, _set("rope.dim", 66), "rope-lanes", "rope.dim", None,
     ["66 dims / 4 per lane = 16.5 lanes", "multiple of head_dim/32 = 4"]),
    ("rope-lanes-neox", base_spec, _all(_set("rope.dim", 4), _set("rope.style", "neox")), "rope-lanes", "rope.dim",
     None, ["(i, i + 2)", "2 dims / 4 per lane = 0.5 lanes", "multiple of 8"]),
    ("rope-lanes-interleaved", base_spec, _all(_set("head_dim", 32), _set("rope.dim", 2)), "rope-lanes",
     "rope.style", None, ["1 value(s)", "head_dim 32"]),
    ("norm-eps-zero", base_spec, _set("norm.eps", 0.0), "norm-eps", "norm.eps", None, ["got 0.0"]),
    ("norm-eps-negative", base_spec, _set("norm.eps", -1e-6), "norm-eps", "norm.eps", None, ["-1e-06"]),
    ("norm-eps-inf", base_spec, _set("norm.eps", float("inf")), "norm-eps", "norm.eps", None, ["inf"]),
    ("norm-eps-nan", base_spec, _set("norm.eps", float("nan")), "norm-eps", "norm.eps", None, ["nan"]),
    ("norm-eps-fp32-inf", base_spec, _set("norm.eps", 1e300), "norm-eps", "norm.eps", None,
     ["1e+300", "not a finite fp32"]),
    ("norm-eps-fp32-inf-unused", base_spec, _set("norm", {"kind": "none", "eps": 1e39}), "norm-eps", "norm.eps",
     None, ["1e+39", "overflows"]),
    ("norm-eps-fp32-zero", base_spec, _set("norm.eps", 1e-50), "norm-eps", "norm.eps", None,
     ["1e-50", "rounds to 0 as fp32"]),
    # -- store
    ("store-scale-bf16", base_spec, _set("store.scale", "fp32"), "store-scale", "store.scale", None,
     ["bf16 takes scale none (got fp32)"]),
    ("store-scale-fp4-kind", fp4_spec, _set("store.scale", "fp32"), "store-scale", "store.scale", None,
     ["fp4_e2m1 takes scale ue8m0 (got fp32)"]),
    ("store-scale-fp4-block", fp4_spec, _set("store.block", 64), "store-scale", "store.block", None,
     ["block 32", "block 64"]),
    ("store-scale-fp4-default-block", fp4_spec, _del("store.block"), "store-scale", "store", "store",
     ["block 32", "(128)"]),
    ("store-block-divide", fp8_spec, _set("store.block", 48), "store-block", "store.block", None,
     ["block 48", "128 dims", "128 / 48 = 2.66667"]),
    ("store-block-lanes", fp8_spec, _set("store.block", 2), "store-block", "store.block", None,
     ["block 2 is not whole lanes", "2 dims / 4 per lane = 0.5 lanes"]),
    ("store-block-zero-unscaled", base_spec, _set("store.block", 0), "store-block", "store.block", None,
     ["block must be positive (got 0)"]),
    ("store-block-negative", fp8_spec, _set("store.block", -128), "store-block", "store.block", None,
     ["got -128"]),
    ("store-block-pow2", packed_latent_spec, _set("store.block", 112), "store-block", "store.block", None,
     ["spans 7 lanes", "112 / 16 per lane"]),
    ("store-rope-dtype-unquantized", base_spec, _set("store.rope_dtype", "bf16"), "store-rope-dtype",
     "store.rope_dtype", None, ["(bf16) is not quantized"]),
    ("store-rope-dtype-no-rope", packed_latent_spec, _set("rope.dim", 0), "store-rope-dtype", "store.rope_dtype",
     None, ["rope.dim is 0"]),
    ("store-rope-dtype-all-rope", fp8_spec, _all(_set("rope.dim", 128), _set("store.rope_dtype", "bf16"),
                                                 _set("store.block", 64)),
     "store-rope-dtype", "store.rope_dtype", None, ["rope.dim 128 = head_dim"]),
    ("store-amax-floor-zero", fp8_spec, _set("store.amax_floor", 0.0), "store-amax-floor", "store.amax_floor", None,
     ["got 0.0"]),
    ("store-amax-floor-fp32-inf", fp8_spec, _set("store.amax_floor", 1e39), "store-amax-floor",
     "store.amax_floor", None, ["1e+39", "not a finite fp32"]),
    ("store-amax-floor-fp32-zero", fp8_spec, _set("store.amax_floor", 1e-46), "store-amax-floor",
     "store.amax_floor", None, ["rounds to 0 as fp32"]),
    ("store-amax-floor-nan", fp8_spec, _set("store.amax_floor", float("nan")), "store-amax-floor",
     "store.amax_floor", None, ["nan"]),
    # -- page layout
    ("page-size-not-pow2", base_spec, _set("layout.page_size", 48), "page-size", "layout.page_size", None,
     ["page_size 48", "[1, 65536]", "use 32"]),
    ("page-size-zero", base_spec, _set("layout.page_size", 0), "page-size", "layout.page_size", None,
     ["page_size 0"]),
    ("page-size-huge", base_spec, _set("layout.page_size", 131072), "page-size", "layout.page_size", None,
     ["page_size 131072", "use 65536"]),
    ("page-align-zero", base_spec, _set("layout.page_align", 0), "page-align", "layout.page_align", None,
     ["got 0"]),
    ("page-align-2^31", base_spec, _set("layout.page_align", 2**31), "page-align", "layout.page_align", None,
     ["[1, 2^31)", "got 2147483648"]),
    ("scale-stride-small", fp8_spec, _set("layout.scale_stride", 2), "scale-stride", "layout.scale_stride", None,
     ["scale_stride 2 B", "1 x 4 B = 4 B", "set scale_stride: 4"]),
    ("scale-stride-unaligned", fp8_spec, _set("layout.scale_stride", 6), "scale-stride", "layout.scale_stride", None,
     ["scale_stride 6 B", "4-B scale", "use 8"]),
    ("scale-stride-negative", fp8_spec, _set("layout.scale_stride", -4), "scale-stride", "layout.scale_stride",
     None, ["-4"]),
    ("layout-align-page", fp8_spec, _set("layout.page_align", 5), "layout-align", "layout.page_align", None,
     ["page_bytes 8450", "multiple of 4 B", "64 tokens x 132 B = 8448 B", "multiple of 5: 8450 B"]),
    ("layout-align-half-byte", fp4_spec, _all(_set("head_dim", 32), _set("rope.dim", 0)), "layout-align",
     "store.dtype", None, ["1 value(s) x 4 bit = 4 bit", "head_dim >= 64"]),
    ("layout-align-kept", fp8_spec, _all(_set("store.scale", "ue8m0"), _set("store.block", 4),
                                         _set("store.rope_dtype", "bf16"), _set("rope.dim", 4)),
     "layout-align", "store.rope_dtype", None,
     ["RoPE part offset = 124 B", "row_bytes = 132 B", "8-B vector store", "= 163 B/token"]),
    ("layout-align-scales", base_spec, _all(
        _set("head_dim", 32), _set("rope", {"dim": 2, "style": "neox"}),
        _set("store", {"dtype": "fp8_e4m3", "scale": "fp32", "block": 2, "rope_dtype": "bf16"}),
        _set("layout", {"page_size": 1, "page_align": 4})),
     "layout-align", "layout.page_size", None, ["starts at 34", "1 tokens x 34 B", "4-B scale"]),
    ("page-bytes-limit", base_spec, _set("layout", {"page_size": 65536, "scale_stride": 40000}), "page-bytes-limit",
     "layout.page_size", None, ["2638217216 B", "65536 tokens x 40256 B", "2147483648"]),
    # -- host and launch
    ("host-bytes-per-token", base_spec, _set("host", {"bytes_per_token": 132}), "host", "host.bytes_per_token",
     None, ["132 B/token", "256 B/token", "128 x 16 bit = 256 B row"]),
    ("host-page-bytes", base_spec, _set("host", {"page_bytes": 8448}), "host", "host.page_bytes", None,
     ["pages of 8448 B", "expects 16384 B", "64 tokens x 256 B = 16384 B"]),
    # docs/layouts.md §1: a bf16-sized host page met the fp8 kernel's 8448-B stride
    ("host-story", fp8_spec, _set("host", {"bytes_per_token": 132, "page_bytes": 16384}), "host", "host.page_bytes",
     None, ["16384 B", "expects 8448 B", "64 tokens x 132 B = 8448 B"]),
    ("launch-warps", base_spec, _set("launch", {"warps_per_block": 33}), "launch", "launch.warps_per_block", None,
     ["33 warps x 32 = 1056 threads", "1024"]),
    ("launch-warps-zero", base_spec, _set("launch", {"warps_per_block": 0}), "launch", "launch.warps_per_block",
     None, ["0 threads"]),
    ("launch-tokens", base_spec, _set("launch", {"tokens_per_warp": 9}), "launch", "launch.tokens_per_warp", None,
     ["tokens_per_warp 9", "[1, 8]"]),
    ("launch-stage", base_spec, _set("launch", {"stage_tokens": 9}), "launch", "launch.stage_tokens", None,
     ["stage_tokens 9", "[0, 8]"]),
    ("launch-stage-negative", base_spec, _set("launch", {"stage_tokens": -1}), "launch", "launch.stage_tokens", None,
     ["stage_tokens -1"]),
    ("launch-min-blocks", base_spec, _set("launch", {"warps_per_block": 8, "min_blocks_per_sm": 9}), "launch",
     "launch.min_blocks_per_sm", None, ["9 x 8 warps = 72 resident warps", "at most 64"]),
    ("launch-large-tokens", base_spec, _set("launch", {"large_min_tokens": 65536, "large_tokens_per_warp": 9}),
     "launch-large", "launch.large_tokens_per_warp", None, ["large_tokens_per_warp 9", "[1, 8]"]),
    ("launch-large-tokens-zero", base_spec, _set("launch", {"large_tokens_per_warp": 0}), "launch-large",
     "launch.large_tokens_per_warp", None, ["large_tokens_per_warp 0"]),
    ("launch-large-min", base_spec, _set("launch", {"large_min_tokens": 2**31}), "launch-large",
     "launch.large_min_tokens", None, ["large_min_tokens 2147483648", "int32"]),
    ("launch-large-negative", base_spec, _set("launch", {"large_min_tokens": -1}), "launch-large",
     "launch.large_min_tokens", None, ["large_min_tokens -1"]),
    ("launch-large-same", base_spec, _set("launch", {"large_min_tokens": 4096, "large_tokens_per_warp": 2}),
     "launch-large", "launch.large_tokens_per_warp", None, ["equals tokens_per_warp", "warning"]),
    ("numerics-fast-pow2", fp8_spec, _all(_set("numerics", "fast"), _set("store.scale", "ue8m0")), "numerics",
     "numerics", None, ["numerics fast with scale ue8m0", "binade"]),
    ("numerics-fast-bf16", base_spec, _set("numerics", "fast"), "numerics", "numerics", None,
     ["numerics fast with store.dtype bf16", "cancellation"]),
    ("numerics-fast-kept", packed_latent_spec, _set("numerics", "fast"), "numerics", "numerics", None,
     ["kept RoPE dims in bf16"]),
    # -- positions (SGLang's DecodePlan in place of the positions array)
    ("positions-plan-no-rope", base_spec,
     lambda d: (_set("positions", {"source": "decode_plan"})(d), _set("rope.dim", 0)(d)),
     "positions", "positions.source", None, ["rope.dim is 0"]),
    ("positions-ratio", base_spec, _set("positions", {"source": "decode_plan", "compress_ratio": 0}), "positions",
     "positions.compress_ratio", None, ["compress_ratio 0", "[1, 65536]"]),
    # (SGLang's prefill CompressPlan: the same rule)
    ("positions-cplan-no-rope", base_spec,
     lambda d: (_set("positions", {"source": "compress_plan"})(d), _set("rope.dim", 0)(d)),
     "positions", "positions.source", None, ["compress plan stands in", "rope.dim is 0"]),
    ("positions-cplan-ratio", base_spec, _set("positions", {"source": "compress_plan", "compress_ratio": 1 << 17}),
     "positions", "positions.compress_ratio", None, ["compress_ratio 131072", "[1, 65536]"]),
    ("launch-occupancy-blocks", base_spec, _set("launch", {"warps_per_block": 1, "min_blocks_per_sm": 33}),
     "launch-occupancy", "launch.min_blocks_per_sm", None, ["sm_90a holds at most 32 blocks", "use at most 32"]),
    ("launch-occupancy-warps", base_spec, _all(_set("launch", {"warps_per_block": 8, "min_blocks_per_sm": 8}),
                                               _set("targets", ["sm_90a", "sm_120a"])),
     "launch-occupancy", "launch.min_blocks_per_sm", None, ["sm_120a", "48 warps", "use at most 6"]),
    # -- integers the generated C++ cannot hold (a block is ignored without a scale, yet rendered)
    ("int-range-block", base_spec, _set("store.block", 2**64), "int-range", "store.block", None,
     [f"store.block = {2**64}", "64-bit"]),
    # -- schema
    ("schema-unknown-top", base_spec, _set("colour", "blue"), "schema-unknown-key", "colour", None, ["'colour'"]),
    ("schema-unknown-nested", base_spec, _set("store.scael", "none"), "schema-unknown-key", "store.scael", None,
     ["'scael'"]),
    ("schema-missing-top", base_spec, _del("head_dim"), "schema-missing", "head_dim", (), ["'head_dim'"]),
    ("schema-missing-nested", base_spec, _del("store.dtype"), "schema-missing", "store.dtype", "store", ["'dtype'"]),
    ("schema-type-str-int", base_spec, _set("head_dim", "128"), "schema-type", "head_dim", None,
     ["valid integer", "'128'"]),
    ("schema-type-bool-int", base_spec, _set("head_dim", True), "schema-type", "head_dim", None,
     ["valid integer", "True"]),
    ("schema-type-int-bool", base_spec, _set("hadamard", 1), "schema-type", "hadamard", None, ["boolean"]),
    ("schema-type-float-int", base_spec, _set("layout.page_size", 64.0), "schema-type", "layout.page_size", None,
     ["integer"]),
    ("schema-type-inf-int", base_spec, _set("head_dim", float("inf")), "schema-type", "head_dim", None,
     ["integer", "inf"]),
    ("schema-type-enum", base_spec, _set("store.dtype", "int8"), "schema-type", "store.dtype", None,
     ["'bf16'", "'int8'"]),
    ("schema-type-version", base_spec, _set("kgen", 2), "schema-type", "kgen", None, ["1", "2"]),
    ("schema-type-host", base_spec, _set("host", "lots"), "schema-type", "host", None, ["'lots'"]),
]


def _pos_key(pos: dict, key) -> tuple:
    return tuple(int(p) if p.isdigit() else p for p in key.split(".")) if key else ()


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_rule_breaks_alone_and_is_located(case, write, validate):
    _, base, mutate, rule, loc, at, parts = case
    spec = base()
    mutate(spec)
    path, pos = write("spec.yaml", spec)
    r = validate(path)
    problems = r.problems
    assert {p.rule for p in problems} == {rule}, [p.format() for p in problems]
    assert len(problems) == 1, [p.format() for p in problems]
    p = problems[0]
    assert p.loc_str == loc
    assert p.file == path
    key = _pos_key(pos, loc if at is None else at)
    assert (p.line, p.col) == (pos[key] if key else (1, 1)), p.format()
    for part in parts:
        assert part in p.format(), (part, p.format())
    assert p.fix, "every problem says how to fix it"
    assert p.format().startswith(f"{path}:{p.line}:{p.col}: {p.severity}[{rule}]: ")
    if p.severity == "error":
        assert not r.valid


def test_every_rule_has_a_case():
    covered = {c[3] for c in CASES} | {"hadamard"}  # hadamard: test_hadamard_is_tied_to_head_dim
    assert set(RULES) <= covered, set(RULES) - covered


def test_hadamard_is_tied_to_head_dim(write, validate):
    """Tie: hadamard needs a power-of-two head_dim, and every power of two head-dim accepts is one,
    so a head_dim that breaks `hadamard` always breaks `head-dim` too (96 = 32 x 3 per lane)."""
    spec = base_spec()
    spec["head_dim"] = 96
    path, pos = write("spec.yaml", spec)
    r = validate(path)
    assert {p.rule for p in r.problems} == {"head-dim", "hadamard"}
    had = next(p for p in r.problems if p.rule == "hadamard")
    assert (had.line, had.col) == pos[("hadamard",)]
    assert "got 96" in had.message


PASSING = [
    ("base", base_spec, lambda d: None),
    ("fp8", fp8_spec, lambda d: None),
    ("fp4", fp4_spec, lambda d: None),
    ("packed", packed_latent_spec, lambda d: None),
    ("eps-ignored-without-norm", base_spec, _set("norm", {"kind": "none", "eps": 0.0})),
    ("amax-floor-ignored-unscaled", base_spec, _set("store.amax_floor", 0.0)),
    ("fp4-head-64", fp4_spec, _set("head_dim", 64)),
    ("neox-first", base_spec, _set("rope", {"dim": 64, "style": "neox", "placement": "first"})),
    ("no-rope", base_spec, _set("rope", {"dim": 0})),
    ("defaults", base_spec, _all(_del("norm"), _del("rope"), _del("hadamard"), _del("store.scale"))),
    ("head-32", base_spec, _all(_set("head_dim", 32), _set("rope", {"dim": 2, "style": "neox"}))),
    ("head-1024", fp8_spec, _all(_set("head_dim", 1024), _set("store.block", 1024))),
    ("page-1", packed_latent_spec, _set("layout.page_size", 1)),
    ("page-65536", base_spec, _set("layout.page_size", 65536)),
    ("align-2^30", base_spec, _set("layout", {"page_size": 1, "page_align": 2**30})),
    ("host-matches", fp8_spec, _set("host", {"bytes_per_token": 132, "page_bytes": 8448})),
    ("launch-edges", base_spec, _set("launch", {"warps_per_block": 32, "tokens_per_warp": 8})),
    ("launch-stage-edges", base_spec, _set("launch", {"tokens_per_warp": 8, "stage_tokens": 8})),
    ("launch-min-blocks-edge", base_spec, _set("launch", {"warps_per_block": 8, "min_blocks_per_sm": 8})),
    ("launch-large-edges", base_spec, _set("launch", {"tokens_per_warp": 1, "large_min_tokens": 2**31 - 1,
                                                      "large_tokens_per_warp": 8})),
    ("numerics-fast-fp32", fp8_spec, _set("numerics", "fast")),
    ("numerics-fast-fp8-none", fp8_spec, _all(_set("numerics", "fast"), _set("store.scale", "none"),
                                               _del("store.block"))),
    ("launch-large-off-any-tokens", base_spec, _set("launch", {"large_min_tokens": 0, "large_tokens_per_warp": 2})),
    ("all-targets", base_spec, _set("targets", ["sm_80", "sm_90a", "sm_100a", "sm_120a"])),
]


@pytest.mark.parametrize("case", PASSING, ids=[c[0] for c in PASSING])
def test_spec_passes(case, write, validate):
    _, base, mutate = case
    spec = base()
    mutate(spec)
    path, _ = write("spec.yaml", spec)
    r = validate(path)
    assert r.valid and not r.problems, [p.format() for p in r.problems]
    assert len(r.variants) == 1 and r.variants[0].layout is not None


@pytest.mark.parametrize("rel", sorted(SHIPPED))
def test_shipped_specs_are_clean(rel, validate):
    r = validate(SPECS / rel)
    assert r.valid and not r.problems, [p.format() for p in r.problems]


def test_all_problems_at_once(write, validate):
    """One file, three faults in three rules: three located errors, in one run."""
    spec = fp8_spec()
    spec["name"] = "Bad"
    spec["layout"]["page_size"] = 48
    spec["host"] = {"page_bytes": 16384}
    path, pos = write("spec.yaml", spec)
    r = validate(path)
    got = sorted((p.rule, p.line, p.col) for p in r.problems)
    assert got == sorted([("name", *pos[("name",)]), ("page-size", *pos[("layout", "page_size")]),
                          ("host", *pos[("host", "page_bytes")])])
    # the byte math still comes out for the variant (48 x 132 = 6336)
    assert [(c.layout.bytes_per_token, c.layout.page_bytes) for c in r.variants] == [(132, 6336)]


def test_schema_and_rule_problems_together(write, validate):
    """Schema errors stop the rules for that variant (no model), but all schema errors come at once."""
    spec = base_spec()
    spec["head_dim"] = "128"
    spec["colour"] = 1
    del spec["targets"]
    path, pos = write("spec.yaml", spec)
    r = validate(path)
    assert sorted(p.rule for p in r.problems) == ["schema-missing", "schema-type", "schema-unknown-key"]
    assert r.variants == []


def test_huge_numbers_do_not_crash(write, validate):
    """10**30 and friends reach the rules as ints; messages stay exact instead of overflowing a float."""
    spec = base_spec()
    spec["head_dim"] = 10**30
    spec["hadamard"] = False
    spec["rope"]["dim"] = 10**30 + 1
    spec["layout"]["page_size"] = 10**30
    spec["launch"] = {"warps_per_block": 10**30}
    path, pos = write("spec.yaml", spec)
    r = validate(path)
    # a 10**30-token page is also past 2^31 bytes: page-bytes-limit speaks too, with its own numbers
    assert {p.rule for p in r.problems} == {"head-dim", "rope-dim", "page-size", "launch", "page-bytes-limit"}
    hd = next(p for p in r.problems if p.rule == "head-dim")
    assert str(10**30) in hd.message


def test_rules_are_exact_for_numbers_beyond_float():
    """Python-side: a spec built in memory with a 400-digit head_dim still gets messages, not OverflowError."""
    from kgen.rules import check_variant
    from kgen.spec import Spec

    spec = base_spec()
    spec["head_dim"] = 10**400
    spec["store"] = {"dtype": "fp8_e4m3", "scale": "fp32", "block": 10**400 + 1}
    _, problems = check_variant(Spec.model_validate(spec))
    rules = {p.rule for p in problems}
    assert "head-dim" in rules and "store-block" in rules
    assert any(str(10**400) in p.message for p in problems)


def test_rule_ids_are_stable():
    assert set(RULES) == {
        "name", "targets", "head-dim", "rope-dim", "rope-lanes", "hadamard", "norm-eps", "store-scale",
        "store-block", "store-rope-dtype", "store-amax-floor", "page-size", "page-align", "scale-stride",
        "layout-align", "page-bytes-limit", "host", "launch", "launch-large", "positions", "numerics",
        "launch-occupancy", "int-range"}
    twins = {r.id for r in RULES.values() if r.twin}
    assert "host" not in twins and "name" not in twins and "head-dim" in twins


def test_clone_is_deep():
    a = base_spec()
    b = clone(a)
    b["store"]["dtype"] = "fp16"
    assert a["store"]["dtype"] == "bf16"


def test_toolchain_probe_is_recorded(tmp_path, monkeypatch):
    """The targets rule asks libnvrtc once per library file; later runs read the record, which lives
    in the kgen cache dir (KGEN_CACHE_DIR), never in ~/.cache behind its back."""
    from kgen import toolchain

    lib = toolchain.nvrtc_library()
    if lib is None:
        pytest.skip("no libnvrtc wheel")
    monkeypatch.setenv("KGEN_CACHE_DIR", str(tmp_path / "kgen"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv("KGEN_NO_PROBE_CACHE", raising=False)
    toolchain.supported_archs.cache_clear()
    first = toolchain.supported_archs()
    assert not (tmp_path / "xdg").exists()
    record = tmp_path / "kgen" / "nvrtc_archs.json"
    assert record.exists() and 90 in first[0] and first[1].startswith("NVRTC")
    toolchain.supported_archs.cache_clear()
    monkeypatch.setattr(toolchain, "_probe", lambda lib: pytest.fail("probed again"))
    assert toolchain.supported_archs() == first
    # a record of another library (or garbage) is ignored
    record.write_text("{not json")
    toolchain.supported_archs.cache_clear()
    monkeypatch.setattr(toolchain, "_probe", lambda lib: (frozenset({90}), "NVRTC test"))
    assert toolchain.supported_archs() == (frozenset({90}), "NVRTC test")
    toolchain.supported_archs.cache_clear()


def test_toolchain_probe_key_is_not_an_mtime(tmp_path):
    """The record's key names what is installed (path, size, wheel version), so touching the library
    (a copy, a restore from backup) neither invalidates it nor can a replaced file of the same mtime
    pass for the old one."""
    from kgen import toolchain

    if "nvidia_cuda_nvrtc" not in toolchain.dist_versions():
        pytest.skip("no nvidia-cuda-nvrtc wheel")
    lib = tmp_path / "libnvrtc.so.13"
    lib.write_bytes(b"x" * 100)
    key = toolchain.probe_key(lib)
    os.utime(lib, (1, 1))
    assert toolchain.probe_key(lib) == key
    lib.write_bytes(b"x" * 101)
    os.utime(lib, (1, 1))
    assert toolchain.probe_key(lib) != key
    assert f"=={toolchain.dist_versions()['nvidia_cuda_nvrtc']}" in key
