"""kgen/layout.py: the byte math of every shipped variant equals docs/layouts.md §3, offsets
of the indexer and packed-latent pages, and hypothesis properties over every spec the validator
accepts (in bounds, no overlaps, alignment) and over the whole field space (never an exception)."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from kgen import layout as L
from kgen.rules import check_variant
from kgen.spec import Spec
from strategies import SHIPPED, SPECS, packed_latent_spec, spec_dicts, to_yaml, valid_specs


def _layouts(validate, path) -> dict[str, L.Layout]:
    r = validate(path)
    assert r.valid, [p.format() for p in r.problems]
    return {c.spec.name: c.layout for c in r.variants}


# -- docs/layouts.md §3, exactly --------------------------------------------------------------------------

@pytest.mark.parametrize("rel", sorted(SHIPPED))
def test_shipped_byte_math(rel, validate):
    name, bpt, page = SHIPPED[rel]
    [lay] = _layouts(validate, SPECS / rel).values()
    assert (lay.spec.name, lay.bytes_per_token, lay.page_bytes) == (name, bpt, page)
    assert lay.page_bytes == -(-lay.page_size * bpt // lay.spec.layout.page_align) * lay.spec.layout.page_align


def test_family_byte_math(validate):
    lays = _layouts(validate, SPECS / "dsv4.yaml")
    want = {name: (bpt, page) for rel, (name, bpt, page) in SHIPPED.items() if rel != "dsv32_indexer.yaml"}
    assert {n: (x.bytes_per_token, x.page_bytes) for n, x in lays.items()} == want
    # bytes per token of the six store formats: 132 / 68 / 256 / 584 / 1024 / 512
    assert sorted({x.bytes_per_token for x in lays.values()}) == [68, 132, 256, 512, 584, 1024]


@pytest.mark.parametrize("P, page", [(64, 37440), (2, 1728), (1, 1152), (4, 2880)])
def test_packed_latent_page_bytes(P, page):
    """ceil(584 P / 576) x 576: 37440 at P=64, 1728 at P=2, 1152 at P=1."""
    spec = packed_latent_spec()
    spec["layout"]["page_size"] = P
    lay = L.compute(Spec.model_validate(spec))
    assert lay.page_bytes == page == -(-584 * P // 576) * 576


def test_indexer_fp8_offsets(validate):
    lay = _layouts(validate, SPECS / "dsv4/indexer_fp8.yaml")["dsv4_indexer_fp8"]
    assert (lay.row_bytes, lay.scale_stride, lay.blocks_per_token, lay.scale_unit) == (128, 4, 1, 4)
    for t in range(64):
        assert lay.value_offset(t) == t * 128
        assert lay.scale_offset(t) == 8192 + 4 * t  # 128 x P + 4 t: DeepGEMM's [64, 1, 132] view
    assert [(r.name, r.offset, r.size) for r in lay.regions()] == [("rows", 0, 8192), ("scales", 8192, 256)]
    with pytest.raises(IndexError):
        lay.value_offset(64)
    with pytest.raises(IndexError):
        lay.scale_offset(0, 1)
    assert lay.slot(130) == (2, 2)


def test_indexer_fp4_offsets(validate):
    lay = _layouts(validate, SPECS / "dsv4/indexer_fp4.yaml")["dsv4_indexer_fp4"]
    assert (lay.row_bytes, lay.blocks_per_token, lay.scale_stride) == (64, 4, 4)
    for t in range(64):
        assert lay.value_offset(t) == 64 * t
        for g in range(4):
            assert lay.scale_offset(t, g) == 64 * 64 + 4 * t + g
    with pytest.raises(IndexError):
        lay.scale_offset(0, 4)


def test_latent_packed_offsets(validate):
    lay = _layouts(validate, SPECS / "dsv4/latent_fp8_p64.yaml")["dsv4_latent_fp8_p64"]
    assert lay.row_bytes == 576
    assert [(r.name, r.offset, r.size) for r in lay.row_parts()] == [("values", 0, 448), ("rope", 448, 128)]
    assert (lay.quant_row_offset, lay.kept_row_offset) == (0, 448)
    assert (lay.quant_span, lay.kept_span) == (L.Span(0, 448), L.Span(448, 64))
    assert (lay.blocks_per_token, lay.scale_bytes, lay.scale_stride) == (7, 7, 8)
    for t in range(64):
        assert lay.value_offset(t) == 576 * t
        for g in range(7):
            assert lay.scale_offset(t, g) == 36864 + 8 * t + g
    assert [(r.name, r.offset, r.size) for r in lay.regions()] == [
        ("rows", 0, 36864), ("scales", 36864, 512), ("padding", 37376, 64)]


def test_rope_first_keeps_rope_at_row_start():
    spec = packed_latent_spec()
    spec["rope"]["placement"] = "first"
    lay = L.compute(Spec.model_validate(spec))
    assert [(r.name, r.offset, r.size) for r in lay.row_parts()] == [("rope", 0, 128), ("values", 128, 448)]
    assert (lay.kept_span, lay.quant_span) == (L.Span(0, 64), L.Span(64, 448))


def test_formulas_carry_the_numbers():
    lay = L.compute(Spec.model_validate(packed_latent_spec()))
    assert lay.bytes_per_token_formula() == ("448 x 8 bit + 64 x 16 bit bf16 = 576 B row + 8 B scales "
                                             "(7 x 1 B, stride 8) = 584 B/token")
    assert lay.page_bytes_formula() == "64 tokens x 584 B = 37376 B, rounded up to a multiple of 576: 37440 B"


def test_compute_refuses_what_cannot_be_bytes():
    spec = packed_latent_spec()
    for path, value in ((("head_dim",), 0), (("layout", "page_size"), 0), (("layout", "page_align"), 0),
                        (("store", "block"), 0), (("layout", "scale_stride"), -1), (("rope", "dim"), 1024),
                        (("rope", "dim"), -64)):
        s = packed_latent_spec()
        node = s
        for k in path[:-1]:
            node = node[k]
        node[path[-1]] = value
        with pytest.raises(ValueError):
            L.compute(Spec.model_validate(s))
    assert L.compute(Spec.model_validate(spec)).page_bytes == 37440


# -- properties over accepted specs -----------------------------------------------------------------

def _intervals(lay: L.Layout) -> list[tuple[int, int, str]]:
    out = []
    for t in range(lay.page_size):
        out.append((lay.value_offset(t), lay.value_offset(t) + lay.row_bytes, f"row {t}"))
        if lay.scale_unit:
            start = lay.scale_offset(t, 0)
            out.append((start, start + lay.scale_bytes, f"scales {t}"))
    return out


@given(valid_specs())
def test_accepted_layouts_are_sound(data):
    spec = Spec.model_validate(data)
    lay, problems = check_variant(spec)
    assert lay is not None and not [p for p in problems if p.severity == "error"]
    P, page, align = lay.page_size, lay.page_bytes, spec.layout.page_align
    # the page holds every token, is aligned, and pads by less than one alignment unit
    assert page >= P * lay.bytes_per_token and page % align == 0 and page - P * lay.bytes_per_token < align
    assert lay.bytes_per_token == lay.row_bytes + lay.scale_stride
    assert lay.scale_bytes == lay.blocks_per_token * lay.scale_unit <= lay.scale_stride
    assert page < 2**31
    # regions: contiguous from 0 to page_bytes, none empty
    regions = lay.regions()
    assert regions[0].offset == 0 and regions[-1].end == page
    assert all(a.end == b.offset for a, b in zip(regions, regions[1:])) and all(r.size > 0 for r in regions)
    # row parts: inside the row, disjoint, covering it
    parts = lay.row_parts()
    assert parts[0].offset == 0 and parts[-1].end == lay.row_bytes
    assert all(a.end == b.offset for a, b in zip(parts, parts[1:]))
    # no two tokens' rows or scale slots overlap; everything inside the page
    iv = sorted(_intervals(lay))
    assert iv[0][0] >= 0 and iv[-1][1] <= page
    for (s0, e0, n0), (s1, e1, n1) in zip(iv, iv[1:]):
        assert e0 <= s1, f"{n0} [{s0}, {e0}) overlaps {n1} [{s1}, {e1})"
    # every scale byte of every token inside its own slot and the page
    for t in (0, P - 1):
        for g in range(lay.blocks_per_token):
            off = lay.scale_offset(t, g)
            assert lay.scale_offset(t, 0) <= off and off + lay.scale_unit <= lay.scale_offset(t, 0) + lay.scale_stride
            assert off + lay.scale_unit <= page and off % max(lay.scale_unit, 1) == 0
    # the kernel's vector stores stay aligned in every page of a contiguous cache
    vec = L.store_vector_bytes(lay)
    assert vec >= 1 and lay.row_bytes % vec == 0 and page % vec == 0 and lay.quant_row_offset % vec == 0
    kvec = L.kept_vector_bytes(lay)
    if kvec:
        assert lay.kept_row_offset % kvec == 0 and page % kvec == 0
    # spans: the quantized and kept spans partition head_dim; scale blocks cover the quantized span
    assert lay.quant_span.size + lay.kept_span.size == spec.head_dim
    assert lay.quant_bytes * 8 == lay.quant_span.size * L.VALUE_BITS[spec.store.dtype]
    if lay.scale_unit:
        assert lay.blocks_per_token * lay.block == lay.quant_span.size
    # slot arithmetic
    assert lay.slot(5 * P + P - 1) == (5, P - 1)


@settings(max_examples=60)
@given(valid_specs(max_page_size=64))
def test_byte_ownership(data):
    """Layout.owned: each token owns exactly its written bytes, disjoint from every other token's,
    and the rest of the page (scale-slot and page padding) belongs to nobody."""
    lay = L.compute(Spec.model_validate(data))
    owned = lay.owned()
    per_token = [sum(o.size for o in owned if o.token == t) for t in range(lay.page_size)]
    assert per_token == [lay.written_bytes_per_token] * lay.page_size
    cols = sorted(c for o in owned for c in range(o.offset, o.offset + o.size))
    assert len(cols) == len(set(cols)) and cols[-1] < lay.page_bytes
    roles, start = lay.byte_owners()
    assert sum(r is not None for r in roles) == len(cols)
    for o in owned:  # an element starts inside its own range, at a multiple of its width
        assert all(roles[c] == o.role for c in range(o.offset, o.offset + o.size))
        assert all(o.offset <= start[c] <= c and (start[c] - o.offset) % o.element_bytes == 0
                   for c in range(o.offset, o.offset + o.size))
    assert {o.role for o in owned} == ({"values"} | ({"rope"} if lay.kept_bytes else set())
                                       | ({"scale"} if lay.scale_unit else set()))


def _validate_as_file(data: dict, name: str = "s.yaml"):
    """(path, kgen.validate's result) of `data` written as a YAML file; the result is None when the run
    ended early, which only a file-level YAML problem may do (asserted)."""
    from kgen.diagnostics import KgenError
    from kgen.validate import validate_path

    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / name
        path.write_text(to_yaml(data)[0])
        try:
            return path, validate_path(path)
        except KgenError as e:
            assert all(p.rule.startswith(("yaml-", "file-")) for p in e.problems), [p.format() for p in e.problems]
            return path, None


@settings(max_examples=60)
@given(valid_specs(max_page_size=64))
def test_accepted_specs_round_trip_through_yaml(data):
    """What valid_specs() draws stays valid when written as a file (what compile/GPU tests do)."""
    _, r = _validate_as_file(data)
    assert r is not None and r.valid, r and [p.format() for p in r.problems]
    assert r.variants[0].spec == Spec.model_validate(data)


@settings(max_examples=60)
@given(valid_specs(max_page_size=256))
def test_host_section_agrees_with_layout(data):
    """Writing kgen's own numbers into `host` keeps the spec valid; one byte off is the host rule."""
    lay = L.compute(Spec.model_validate(data))
    good = dict(data, host={"bytes_per_token": lay.bytes_per_token, "page_bytes": lay.page_bytes})
    _, problems = check_variant(Spec.model_validate(good))
    assert not problems or all(p.severity == "warning" for p in problems)
    bad = dict(data, host={"page_bytes": lay.page_bytes + 1})
    _, problems = check_variant(Spec.model_validate(bad))
    assert [(p.rule, p.loc) for p in problems if p.severity == "error"] == [("host", ("host", "page_bytes"))]


# -- the whole field space: problems, never an exception --------------------------------------------

@given(spec_dicts())
def test_any_spec_dict_validates_or_yields_problems(data):
    try:
        spec = Spec.model_validate(data)
    except ValidationError:
        return  # schema problems: covered by the file-level property below
    lay, problems = check_variant(spec)
    for p in problems:
        assert p.rule and p.message and p.fix and p.loc
    if lay is not None:
        assert lay.page_bytes >= 0 or problems


@settings(max_examples=150)
@given(spec_dicts())
def test_any_spec_file_validates_or_yields_located_problems(data):
    path, r = _validate_as_file(data)
    if r is None:
        return
    assert r.valid == (not r.errors)
    for p in r.problems:
        assert p.file == path and p.line >= 1 and p.col >= 1 and p.message
    for c in r.variants:
        if c.layout is not None:
            assert isinstance(c.layout.page_bytes, int)


_key_fields = st.lists(st.sampled_from(["input_dtype", "head_dim", "store.dtype", "store.scale", "layout.page_size",
                                        "name", "targets", "store", "nope", 5]), max_size=4)


@st.composite
def family_dicts(draw):
    variants = draw(st.lists(st.one_of(spec_dicts(), st.sampled_from(["missing.yaml", "../x.yaml", "/abs.yaml", 3])),
                             max_size=3))
    key = draw(_key_fields)
    require = draw(st.lists(st.dictionaries(st.sampled_from(["head_dim", "store.dtype", "name", "x"]),
                                            st.one_of(st.integers(0, 256), st.sampled_from(["bf16", "fp8_e4m3"]),
                                                      st.booleans()), max_size=3), max_size=3))
    fam = {"kgen": 1, "family": draw(st.sampled_from(["fam", "Bad-Fam"])), "variants": variants,
           "dispatch": {"key": key, "require": require}}
    if draw(st.booleans()):
        del fam["dispatch"]["require"]
    return fam


@settings(max_examples=100)
@given(family_dicts())
def test_any_family_validates_or_yields_located_problems(data):
    _, r = _validate_as_file(data, "f.yaml")
    if r is None:
        return
    for p in r.problems:
        assert p.file is not None and p.line >= 1 and p.col >= 1 and p.message


def test_valid_specs_cover_every_store_kind():
    """The strategy others reuse reaches each store format (300 generated examples, no shrinking)."""
    from hypothesis import Phase

    seen = set()

    @settings(max_examples=300, phases=[Phase.generate], database=None)
    @given(valid_specs(max_page_size=64))
    def collect(d):
        seen.add((d["store"]["dtype"], d["store"]["scale"], "rope_dtype" in d["store"]))

    collect()
    assert {("bf16", "none", False), ("fp16", "none", False), ("fp8_e4m3", "fp32", False),
            ("fp8_e4m3", "fp32_pow2", False), ("fp8_e4m3", "ue8m0", False), ("fp8_e4m3", "none", False),
            ("fp4_e2m1", "ue8m0", False), ("fp8_e4m3", "ue8m0", True)} <= seen, seen


def test_pdl_only_where_the_kernel_waits():
    """The launch attribute and the kernel's griddepcontrol.wait (kPdl, compiled for sm_90+) agree."""
    from kgen.layout import compute, constants, uses_pdl

    def kpdl(spec):
        return {c.cxx: c.value for c in constants(compute(spec)) if c.kernel}["kPdl"]

    s = Spec.model_validate({"kgen": 1, "name": "p", "input_dtype": "fp32", "head_dim": 128,
                             "store": {"dtype": "bf16"}, "layout": {"page_size": 64}, "targets": ["sm_90a"]})
    assert uses_pdl(s, (9, 0)) and uses_pdl(s, (12, 0)) and not uses_pdl(s, (8, 9))
    off = s.model_copy(update={"launch": s.launch.model_copy(update={"pdl": False})})
    assert not uses_pdl(off, (9, 0))
    assert kpdl(s) == 1 and kpdl(off) == 0


def test_launch_shape_by_token_count():
    """The grid follows launch.large_min_tokens exactly where the kernel switches paths (kLargeMinTokens,
    num_tokens >= it); the block never changes, so a prepared launch keeps its block size at every N."""
    from kgen.layout import compute, constants, launch_shape, tokens_per_warp

    base = Spec.model_validate({"kgen": 1, "name": "p", "input_dtype": "fp32", "head_dim": 128,
                                "store": {"dtype": "bf16"}, "layout": {"page_size": 64}, "targets": ["sm_90a"],
                                "launch": {"warps_per_block": 4, "tokens_per_warp": 1}})
    big = base.model_copy(update={"launch": base.launch.model_copy(
        update={"large_min_tokens": 1000, "large_tokens_per_warp": 4})})
    for n in (1, 64, 999, 1000, 1001, 1 << 20):
        assert launch_shape(base, n) == (-(-n // 4), 128)
    assert [tokens_per_warp(big, n) for n in (1, 999, 1000, 1 << 20)] == [1, 1, 4, 4]
    assert launch_shape(big, 999) == (250, 128)  # 999 tokens, 4 per block
    assert launch_shape(big, 1000) == (63, 128)  # 1000 tokens, 16 per block: 62.5 -> 63
    assert launch_shape(big, 0) == (1, 128)
    k = {c.cxx: c.value for c in constants(compute(big))}
    assert (k["kLargeMinTokens"], k["kLargeTokensPerWarp"], k["kTokensPerWarp"]) == (1000, 4, 1)
    assert {c.name for c in constants(compute(big)) if c.host} >= {"LARGE_MIN_TOKENS", "LARGE_TOKENS_PER_WARP"}
