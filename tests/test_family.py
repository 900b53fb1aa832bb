"""kgen/family.py and family loading: includes (missing, escaping, cycles, twice), names, the
dispatch key and its require entries, each breaking alone and located in the file that holds it."""

from __future__ import annotations

import pytest

from kgen.family import _key_eq, format_key, key_field_ok, variant_key
from kgen.spec import Spec
from strategies import base_spec

KEY = "[store.dtype, layout.page_size]"


def _spec(name: str, page_size: int = 64, dtype: str = "bf16") -> dict:
    s = base_spec()
    s["name"] = name
    s["layout"]["page_size"] = page_size
    s["store"]["dtype"] = dtype
    return s


def _family(variants: list[str], require: list[tuple[str, int]] | None = None, key: str = KEY,
            name: str = "fam") -> str:
    """Family text: line 3 is `variants:`, item i on line 4 + i (col 5); `dispatch:` follows."""
    lines = ["kgen: 1", f"family: {name}", "variants:"]
    lines += [f"  - {v}" for v in variants]
    lines += ["dispatch:", f"  key: {key}"]
    if require is None:
        require = [("bf16", 64 * 2**i) for i in range(len(variants))]
    if require:
        lines.append("  require:")
        lines += [f"    - {{store.dtype: {d}, layout.page_size: {p}}}" for d, p in require]
    return "\n".join(lines) + "\n"


@pytest.fixture
def fam(write):
    """fam(n) writes n distinct valid specs v0..v(n-1) (page_size 64, 128, ...) next to f.yaml."""

    def make(n: int = 2, **kw):
        for i in range(n):
            write(f"v{i}.yaml", _spec(f"v{i}", 64 * 2**i))
        return write("f.yaml", _family([f"v{i}.yaml" for i in range(n)], **kw))[0]

    return make


def _rules(r):
    return sorted((p.rule, p.severity, str(p.file.name), p.line, p.col) for p in r.problems)


def test_family_passes(fam, validate):
    r = validate(fam(3))
    assert r.valid and not r.problems, [p.format() for p in r.problems]
    assert [(c.spec.name, c.layout.page_bytes) for c in r.variants] == [
        ("v0", 16384), ("v1", 32768), ("v2", 65536)]


def test_shipped_family(validate):
    from strategies import SPECS

    r = validate(SPECS / "dsv4.yaml")
    assert r.valid
    # three variants are available but not required: warnings, by design (specs/dsv4.yaml says so)
    assert {(p.rule, p.severity) for p in r.problems} == {("dispatch-unused", "warning")}
    assert sorted(p.file.name for p in r.problems) == ["indexer_fp4.yaml", "latent_bf16.yaml",
                                                       "latent_fp8_uniform.yaml"]


# -- family-include ------------------------------------------------------------------------------

def _outside(write, tmp_path):
    write("outside.yaml", _spec("v1", 128))
    write("fam/v0.yaml", _spec("v0"))
    return "fam/f.yaml", ["v0.yaml", "../outside.yaml"]


def _symlink(write, tmp_path):
    write("outside/v0.yaml", _spec("v0"))
    (tmp_path / "fam").mkdir()
    (tmp_path / "fam" / "link.yaml").symlink_to(tmp_path / "outside" / "v0.yaml")
    return "fam/f.yaml", ["link.yaml"]


def _absolute(write, tmp_path):
    write("v0.yaml", _spec("v0"))
    return "f.yaml", [str(tmp_path / "v0.yaml")]


def _directory(write, tmp_path):
    (tmp_path / "d.yaml").mkdir()
    return "f.yaml", ["d.yaml"]


def _itself(write, tmp_path):
    return "f.yaml", ["f.yaml"]


def _v0_and(*includes):
    def setup(write, tmp_path):
        write("v0.yaml", _spec("v0"))
        return "f.yaml", ["v0.yaml", *includes]
    return setup


# (id, setup(write, tmp_path) -> (family file, its includes), the bad include's line, message)
INCLUDE_ERRORS = [
    ("missing", _v0_and("nope.yaml"), 5, "'nope.yaml' does not exist"),
    ("dotdot-leaves", _outside, 5, "leaves the family's directory"),
    ("absolute", _absolute, 4, "absolute path"),
    ("symlink-escaping", _symlink, 4, "leaves the family's directory"),
    ("directory", _directory, 4, "is a directory"),
    ("self", _itself, 4, "include cycle: f.yaml -> f.yaml"),
    ("twice", _v0_and("./v0.yaml"), 5, "included twice"),  # one fault, one problem: no echo of the copy
]


@pytest.mark.parametrize("setup, line, message", [c[1:] for c in INCLUDE_ERRORS], ids=[c[0] for c in INCLUDE_ERRORS])
def test_a_bad_include_is_one_located_problem(setup, line, message, write, validate, tmp_path):
    """Each bad include is one family-include error at its own list item (col 5); the family's other
    variants are still checked."""
    name, includes = setup(write, tmp_path)
    require = [("bf16", 64)] if "v0.yaml" in includes else []
    path, _ = write(name, _family(includes, require=require))
    r = validate(path)
    assert _rules(r) == [("family-include", "error", "f.yaml", line, 5)], [p.format() for p in r.problems]
    assert message in r.problems[0].message
    assert [c.spec.name for c in r.variants] == (["v0"] if "v0.yaml" in includes else [])


def test_include_dotdot_that_stays_inside_is_fine(write, validate):
    write("sub/v0.yaml", _spec("v0"))
    path, _ = write("f.yaml", _family(["sub/../sub/v0.yaml"], require=[("bf16", 64)]))
    assert validate(path).valid


def test_include_cycle_between_two_families(write, validate, tmp_path):
    """a.yaml includes b.yaml includes a.yaml: reported at the include that closes the cycle, in b."""
    write("v0.yaml", _spec("v0"))
    write("a.yaml", _family(["b.yaml", "v0.yaml"], require=[("bf16", 64)], name="a"))
    write("b.yaml", _family(["a.yaml"], require=[], name="b"))
    for top, other in (("a.yaml", "b.yaml"), ("b.yaml", "a.yaml")):
        r = validate(tmp_path / top)
        errors = [x[:3] for x in _rules(r) if x[1] == "error"]  # (b's require is empty: v0 unused, a warning)
        assert errors == [("family-include", "error", other)], [p.format() for p in r.problems]
        assert f"include cycle: {top} -> {other} -> {top}" in r.problems[0].message


def test_nested_family(write, validate):
    write("sub/v1.yaml", _spec("v1", 128))
    write("sub/inner.yaml", _family(["v1.yaml"], require=[], name="inner"))
    write("v0.yaml", _spec("v0"))
    path, _ = write("f.yaml", _family(["v0.yaml", "sub/inner.yaml"]))
    r = validate(path)
    assert r.valid and not r.problems, [p.format() for p in r.problems]
    assert [c.spec.name for c in r.variants] == ["v0", "v1"]
    assert len(r.document.includes) == 4


def test_errors_in_an_included_file_point_into_it(write, validate):
    write("v0.yaml", _spec("v0"))
    bad = _spec("v1", 128)
    bad["store"]["scale"] = "fp32"
    _, pos = write("sub/v1.yaml", bad)
    path, _ = write("f.yaml", _family(["v0.yaml", "sub/v1.yaml"]))
    r = validate(path)
    [p] = r.problems
    assert (p.rule, p.file.name, p.line, p.col) == ("store-scale", "v1.yaml", *pos[("store", "scale")])
    assert str(p.file) == str(path.parent / "sub" / "v1.yaml")


def test_schema_error_in_included_file(write, validate):
    write("v0.yaml", _spec("v0"))
    bad = _spec("v1", 128)
    bad["head_dim"] = "128"
    _, pos = write("v1.yaml", bad)
    path, _ = write("f.yaml", _family(["v0.yaml", "v1.yaml"], require=[("bf16", 64)]))
    r = validate(path)
    assert [(p.rule, p.file.name, p.line, p.col) for p in r.problems] == [
        ("schema-type", "v1.yaml", *pos[("head_dim",)])]


def test_yaml_error_in_included_file(write, validate):
    write("v0.yaml", _spec("v0"))
    write("v1.yaml", "kgen: 1\nname: [broken\n")
    path, _ = write("f.yaml", _family(["v0.yaml", "v1.yaml"], require=[("bf16", 64)]))
    r = validate(path)
    assert [(p.rule, p.file.name) for p in r.problems] == [("yaml-syntax", "v1.yaml")]


def test_included_family_schema_error_points_into_it(write, validate):
    write("inner.yaml", "kgen: 1\nfamily: inner\nvariants: []\ndispatch: {key: [name]}\ncolour: red\n")
    path, _ = write("f.yaml", _family(["inner.yaml"], require=[]))
    r = validate(path)
    assert [(p.rule, p.file.name, p.line, p.col) for p in r.problems] == [
        ("schema-unknown-key", "inner.yaml", 5, 1)]


# -- names and dispatch ----------------------------------------------------------------------------

def test_family_names(write, validate):
    write("v0.yaml", _spec("same", 64))
    _, pos = write("v1.yaml", _spec("same", 128))
    path, _ = write("f.yaml", _family(["v0.yaml", "v1.yaml"]))
    r = validate(path)
    assert _rules(r) == [("family-names", "error", "v1.yaml", *pos[("name",)])]
    assert "'same'" in r.problems[0].message


def test_family_name_is_an_identifier(validate, write):
    write("v0.yaml", _spec("v0"))
    path, _ = write("f.yaml", _family(["v0.yaml"], name="Bad-Family"))
    r = validate(path)
    assert _rules(r) == [("name", "error", "f.yaml", 2, 1)]
    assert "family 'Bad-Family'" in r.problems[0].message


@pytest.mark.parametrize("key, line, col, part", [
    ("[store.dtype, targets]", 6, 22, "'targets'"),
    ("[store.dtype, store]", 6, 22, "'store'"),
    ("[store.dtype, store.colour]", 6, 22, "'store.colour'"),
    ("[store.dtype, nothing]", 6, 22, "'nothing'"),
    ("[store.dtype, store.dtype]", 6, 3, "listed twice"),
    ("[]", 6, 3, "empty"),
])
def test_dispatch_key(write, validate, key, line, col, part):
    write("v0.yaml", _spec("v0"))
    path, _ = write("f.yaml", _family(["v0.yaml"], key=key, require=[]))
    r = validate(path)
    assert _rules(r) == [("dispatch-key", "error", "f.yaml", line, col)], [p.format() for p in r.problems]
    assert part in r.problems[0].message


def test_dispatch_require_unserved(fam, validate):
    path = fam(2, require=[("bf16", 64), ("bf16", 128), ("fp8_e4m3", 64)])
    r = validate(path)
    assert _rules(r) == [("dispatch-require", "error", "f.yaml", 11, 7)]
    msg = r.problems[0].message
    assert "no variant serves {store.dtype: fp8_e4m3, layout.page_size: 64}" in msg
    assert "{store.dtype: bf16, layout.page_size: 128}" in msg  # what it does serve


def test_dispatch_require_must_spell_the_key(write, validate):
    write("v0.yaml", _spec("v0"))
    text = _family(["v0.yaml"], require=[]) + "  require:\n    - {store.dtype: bf16, head_dim: 128}\n"
    path, _ = write("f.yaml", text)
    r = validate(path)
    # a malformed entry may have meant any variant: no dispatch-unused guess on top of the error
    assert _rules(r) == [("dispatch-require", "error", "f.yaml", 8, 7)], [p.format() for p in r.problems]
    assert "missing layout.page_size" in r.problems[0].message
    assert "not in the key: head_dim" in r.problems[0].message


def test_dispatch_require_is_strictly_typed(write, validate):
    """"64" (a string) does not serve layout.page_size 64."""
    write("v0.yaml", _spec("v0"))
    text = _family(["v0.yaml"], require=[]) + "  require:\n    - {store.dtype: bf16, layout.page_size: '64'}\n"
    path, _ = write("f.yaml", text)
    r = validate(path)
    # the well-formed entry serves nothing, so v0 is also (rightly) reported unused, as a warning
    assert {(p.rule, p.severity) for p in r.problems} == {("dispatch-require", "error"),
                                                          ("dispatch-unused", "warning")}


def test_dispatch_unique(write, validate):
    write("v0.yaml", _spec("v0", 64))
    _, pos = write("v1.yaml", _spec("v1", 64))
    path, _ = write("f.yaml", _family(["v0.yaml", "v1.yaml"], require=[("bf16", 64)]))
    r = validate(path)
    assert _rules(r) == [("dispatch-unique", "error", "v1.yaml", *pos[("name",)])]
    assert "'v0' and 'v1'" in r.problems[0].message
    assert "{store.dtype: bf16, layout.page_size: 64}" in r.problems[0].message


def test_dispatch_unused_is_a_warning(fam, validate, tmp_path):
    path = fam(2, require=[("bf16", 64)])
    r = validate(path)
    assert _rules(r) == [("dispatch-unused", "warning", "v1.yaml", 2, 1)]
    assert r.valid  # warnings do not fail validation


def test_inline_variants_are_located_in_the_family(write, validate):
    from strategies import to_yaml

    a, b = _spec("a", 64), _spec("b", 64)
    doc = {"kgen": 1, "family": "inl", "variants": [a, b],
           "dispatch": {"key": ["store.dtype", "layout.page_size"],
                        "require": [{"store.dtype": "bf16", "layout.page_size": 64}]}}
    text, pos = to_yaml(doc)
    path, _ = write("f.yaml", text)
    r = validate(path)
    assert _rules(r) == [("dispatch-unique", "error", "f.yaml", *pos[("variants", 1, "name")])]


# -- helpers ---------------------------------------------------------------------------------------

def test_key_field_ok():
    for ok in ("input_dtype", "head_dim", "store.dtype", "store.scale", "layout.page_size", "host.page_bytes",
               "launch.warps_per_block", "rope.dim", "hadamard", "store.block"):
        assert key_field_ok(ok), ok
    for bad in ("targets", "store", "host", "store.dtype.x", "nothing", "", "layout.nope"):
        assert not key_field_ok(bad), bad


def test_variant_key_and_strict_equality():
    s = Spec.model_validate(base_spec())
    k = variant_key(s, ["head_dim", "store.dtype", "host.page_bytes", "hadamard"])
    assert k == (128, "bf16", None, True)
    assert format_key(["a", "b"], (1, "x")) == "{a: 1, b: x}"
    assert _key_eq((64, True), (64, True))
    assert not _key_eq((64,), ("64",)) and not _key_eq((True,), (1,)) and not _key_eq((1,), (True,))
