"""kgen/spec.py and kgen/load.py: schema problems (one per fault, located), single specs, families
with inline and included variants, and where every problem points."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from kgen.document import schema_problems
from kgen.load import load_document
from kgen.spec import Family, Spec
from strategies import SPECS, base_spec, to_yaml


def _problems(model, data):
    try:
        model.model_validate(data)
    except ValidationError as e:
        return [(p.rule, p.loc_str, p.message) for p in schema_problems(e, data)]
    return []


def test_union_errors_merge_into_one():
    """`variants: [5]` fails both members of `str | dict`: one problem, not one per member."""
    fam = {"kgen": 1, "family": "f", "variants": [5], "dispatch": {"key": ["head_dim"]}}
    assert _problems(Family, fam) == [
        ("schema-type", "variants.0", "Input should be a valid string or a valid dictionary (got 5)")]


def test_dispatch_value_union_merges():
    fam = {"kgen": 1, "family": "f", "variants": ["a.yaml"],
           "dispatch": {"key": ["head_dim"], "require": [{"head_dim": 1.5}]}}
    [(rule, loc, msg)] = _problems(Family, fam)
    assert (rule, loc) == ("schema-type", "dispatch.require.0.head_dim")
    assert "string" in msg and "integer" in msg and "boolean" in msg and "1.5" in msg


def test_a_key_named_like_a_union_tag_is_kept():
    fam = {"kgen": 1, "family": "f", "variants": ["a.yaml"],
           "dispatch": {"key": ["str"], "require": [{"str": [1]}]}}
    [(rule, loc, _)] = _problems(Family, fam)
    assert loc == "dispatch.require.0.str"


def test_schema_problem_kinds():
    spec = base_spec()
    spec["head_dim"] = "128"
    spec["store"]["colour"] = "red"
    del spec["layout"]["page_size"]
    got = sorted(_problems(Spec, spec))
    assert got == [
        ("schema-missing", "layout.page_size", "required key 'page_size' is missing"),
        ("schema-type", "head_dim", "Input should be a valid integer (got '128')"),
        ("schema-unknown-key", "store.colour", "unknown key 'colour'"),
    ]


def test_long_inputs_are_shortened_in_messages():
    spec = base_spec()
    spec["norm"]["eps"] = 10**400
    [(rule, loc, msg)] = _problems(Spec, spec)
    assert (rule, loc) == ("schema-type", "norm.eps") and len(msg) < 120


def test_defaults_live_in_the_model():
    s = Spec.model_validate({"kgen": 1, "name": "x", "input_dtype": "fp32", "head_dim": 128,
                             "store": {"dtype": "bf16"}, "layout": {"page_size": 64}, "targets": ["sm_90a"]})
    assert (s.norm.kind, s.norm.eps, s.rope.dim, s.hadamard) == ("rmsnorm", 1e-6, 0, False)
    assert (s.store.scale, s.store.block, s.store.amax_floor, s.store.rope_dtype) == ("none", None, 1e-4, None)
    assert (s.layout.scale_stride, s.layout.page_align, s.host) == (None, 1, None)
    assert (s.launch.warps_per_block, s.launch.tokens_per_warp, s.launch.pdl) == (4, 2, True)
    assert (s.positions.source, s.positions.compress_ratio) == ("array", 4)


def test_single_spec_document(tmp_path):
    text, _ = to_yaml(base_spec())
    (tmp_path / "s.yaml").write_text(text)
    doc = load_document(tmp_path / "s.yaml")
    assert not doc.is_family and doc.family is None and not doc.problems
    assert [v.name for v in doc.variants] == ["t_spec"]
    assert doc.includes == [(tmp_path / "s.yaml").resolve()]


def test_shipped_family_document():
    doc = load_document(SPECS / "dsv4.yaml")
    assert doc.is_family and doc.family.family == "dsv4_fused_norm_rope"
    assert len(doc.variants) == 7 and not doc.problems
    assert len(doc.includes) == 8  # the family file and its seven variants
    assert doc.variants[0].source.path == Path(SPECS / "dsv4/indexer_fp8.yaml")


def test_inline_variant_problems_point_into_the_family(tmp_path):
    bad = base_spec()
    bad["head_dim"] = "wide"
    fam = {"kgen": 1, "family": "inline_fam", "variants": [base_spec(), bad],
           "dispatch": {"key": ["name"]}}
    fam["variants"][1]["name"] = "second"
    text, pos = to_yaml(fam)
    (tmp_path / "f.yaml").write_text(text)
    doc = load_document(tmp_path / "f.yaml")
    [p] = doc.problems
    assert (p.rule, p.loc_str) == ("schema-type", "head_dim")
    assert (p.file, p.line, p.col) == (tmp_path / "f.yaml", *pos[("variants", 1, "head_dim")])
    assert [v.name for v in doc.variants] == ["t_spec", "second"]
    assert doc.variants[1].spec is None


def test_inline_variant_that_is_not_a_mapping(tmp_path):
    (tmp_path / "f.yaml").write_text("kgen: 1\nfamily: f\nvariants:\n  - [1, 2]\ndispatch: {key: [name]}\n")
    doc = load_document(tmp_path / "f.yaml")
    assert [(p.rule, p.loc_str, p.line, p.col) for p in doc.problems] == [("schema-type", "variants.0", 4, 5)]


def test_missing_key_of_inline_variant_points_at_the_item(tmp_path):
    inline = base_spec()
    del inline["targets"]
    fam = {"kgen": 1, "family": "f", "variants": [inline], "dispatch": {"key": ["name"]}}
    text, pos = to_yaml(fam)
    (tmp_path / "f.yaml").write_text(text)
    doc = load_document(tmp_path / "f.yaml")
    [p] = doc.problems
    assert (p.rule, p.loc_str, p.line, p.col) == ("schema-missing", "targets", *pos[("variants", 0)])


@pytest.mark.parametrize("text, rule, loc", [
    ("kgen: 1\nfamily: f\nvariants: nope\ndispatch: {key: [name]}\n", "schema-type", "variants"),
    ("kgen: 1\nfamily: f\nvariants: []\n", "schema-missing", "dispatch"),
    ("kgen: 1\nfamily: f\nvariants: []\ndispatch: {key: [name], extra: 1}\n", "schema-unknown-key", "dispatch.extra"),
])
def test_family_schema_problems(tmp_path, text, rule, loc):
    (tmp_path / "f.yaml").write_text(text)
    doc = load_document(tmp_path / "f.yaml")
    assert [(p.rule, p.loc_str) for p in doc.problems] == [(rule, loc)]
    assert doc.family is None
