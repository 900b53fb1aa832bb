"""kgen/source.py: hostile and malformed YAML is refused with one located problem, fast."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from kgen.diagnostics import KgenError
from kgen.source import MAX_DEPTH, MAX_EVENTS, MAX_FILE_BYTES, load_yaml
from strategies import SPECS, base_spec, to_yaml

GOOD, _ = to_yaml(base_spec())


def _replace(old: str, new: str) -> str:
    assert old in GOOD
    return GOOD.replace(old, new, 1)


BILLION_LAUGHS = "a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 9)}]\n" for i in range(8))

# (id, content, rule, line, col, message part, exit code)
BAD = [
    ("malformed", "kgen: 1\nname: [unclosed\nhead_dim: 128\n", "yaml-syntax", 3, 9, "flow sequence", 1),
    ("bad-indent", "kgen: 1\n  name: x\n", "yaml-syntax", 2, 7, "mapping values are not allowed", 1),
    ("tab", _replace('  dtype: "bf16"', '\tdtype: "bf16"'), "yaml-tab", GOOD.splitlines().index('  dtype: "bf16"') + 1,
     1, "tab in indentation", 1),
    ("tab-after-spaces", "kgen: 1\nstore:\n  \tdtype: bf16\n", "yaml-tab", 3, 3, "tab", 1),
    ("empty", "", "yaml-empty", 1, 1, "empty", 1),
    ("blank", "  \n\n   \n", "yaml-empty", 1, 1, "empty", 1),
    ("comments-only", "# nothing here\n", "yaml-shape", 1, 1, "empty document", 1),
    ("list", "- kgen: 1\n- name: x\n", "yaml-shape", 1, 1, "a list", 1),
    ("scalar", "just words\n", "yaml-shape", 1, 1, "a scalar", 1),
    ("non-utf8", b"kgen: 1\nname: caf\xe9\n", "file-encoding", 2, 10, "0xe9", 1),
    ("nul", "kgen: 1\nname: a\x00b\n", "yaml-syntax", 2, 8, "U+0000", 1),
    ("alias", "kgen: 1\nstore: &s {dtype: bf16}\nlayout: *s\n", "yaml-alias", 3, 9, "aliases", 1),
    ("billion-laughs", BILLION_LAUGHS, "yaml-alias", 2, 8, "aliases", 1),
    ("merge-key", "base: &b {dtype: bf16}\nstore:\n  <<: *b\n", "yaml-alias", 3, 7, "aliases", 1),
    ("duplicate-key", _replace("head_dim: 128", "head_dim: 128\nhead_dim: 64"), "yaml-duplicate-key",
     GOOD.splitlines().index("head_dim: 128") + 2, 1, '"head_dim"', 1),
    ("duplicate-nested", "kgen: 1\nstore:\n  dtype: bf16\n  dtype: fp16\n", "yaml-duplicate-key", 4, 3, "dtype", 1),
    ("int-key", "kgen: 1\n7: x\n", "yaml-syntax", 2, 1, "key 7 is not a string", 1),
    ("date", _replace('"t_spec"', "2024-01-01"), "yaml-type", 2, 1, "date", 1),
    ("custom-tag", _replace('"t_spec"', "!evil x"), "yaml-type", 2, 7, "!evil", 1),
    ("python-tag", "kgen: 1\nname: !!python/object/apply:os.system [ls]\n", "yaml-type", 2, 7, "python/object", 1),
    ("binary", "kgen: 1\nname: !!binary aGVsbG8=\n", "yaml-type", 2, 7, "binary", 1),
    ("set", "kgen: 1\nname: !!set {a, b}\n", "yaml-type", 2, 7, "set", 1),
    ("str-tag", "kgen: 1\nname: !!str 64\n", "yaml-type", 2, 7, "tag:yaml.org,2002:str", 1),
    ("tagged-map", "kgen: 1\nstore: !thing {dtype: bf16}\n", "yaml-type", 2, 8, "!thing", 1),
    ("long-int", _replace("head_dim: 128", "head_dim: " + "9" * 5000), "yaml-type",
     GOOD.splitlines().index("head_dim: 128") + 1, 11, "5000 characters", 1),
    ("long-float", "kgen: 1\nnorm: {eps: 0." + "1" * 500 + "}\n", "yaml-type", 2, 13, "502 characters", 1),
    ("deep-flow", "a: " + "[" * 20000 + "]" * 20000 + "\n", "yaml-syntax", 1, 3 + MAX_DEPTH + 1, "nesting", 1),
    ("deep-flow-map", "a: " + "{b: " * 40 + "1" + "}" * 40 + "\n", "yaml-syntax", 1, 3 + 4 * MAX_DEPTH + 1,
     "nesting", 1),
    ("deep-block", "".join(" " * i + f"k{i}:\n" for i in range(40)) + " " * 40 + "x: 1\n", "yaml-syntax",
     MAX_DEPTH + 1, MAX_DEPTH + 1, "nesting", 1),
    ("deep-block-list", "a:\n" + "".join("  " * (i + 1) + "-\n" for i in range(30)) + "  " * 31 + "- 1\n",
     "yaml-syntax", MAX_DEPTH + 1, 2 * MAX_DEPTH + 1, "nesting", 1),
    ("too-many-nodes", "a: [" + ", ".join(["1"] * (MAX_EVENTS + 10)) + "]\n", "file-size", 1, None, "YAML nodes", 1),
    ("too-big", "# " + "x" * MAX_FILE_BYTES + "\n", "file-size", 1, 1, f"at most {MAX_FILE_BYTES} bytes", 1),
]

HANG_GUARD_S = 15.0


@pytest.mark.parametrize("case", BAD, ids=[c[0] for c in BAD])
def test_bad_yaml_is_one_located_problem(case, write, validate):
    name, content, rule, line, col, part, code = case
    path, _ = write("bad.yaml", content)
    t = time.perf_counter()
    e = validate(path)
    elapsed = time.perf_counter() - t
    assert isinstance(e, KgenError), e
    assert e.exit_code == code
    assert len(e.problems) == 1, [p.format() for p in e.problems]
    p = e.problems[0]
    assert p.rule == rule, p.format()
    assert p.file == path
    assert p.line == line, p.format()
    if col is not None:
        assert p.col == col, p.format()
    assert part in p.message, p.format()
    assert p.fix
    # A guard against unbounded work (an alias bomb or a quadratic parse runs for minutes), not a speed
    # goal: typically < 0.2 s, and a loaded 2-core CI machine must never make it fail.
    assert elapsed < HANG_GUARD_S, f"{name} took {elapsed:.2f} s"


def test_quoted_brackets_are_not_nesting(write, validate):
    """The fast nesting pre-check skips quoted scalars and comments."""
    spec = base_spec()
    spec["description"] = "[" * 40 + "{" * 40
    text, _ = to_yaml(spec)
    text = text.replace("kgen: 1", "kgen: 1  # " + "[" * 40) + "# {{{{{{{{{{{{{{{{{{{{{{{{{{{{\n"
    text += "note_free: 'it''s [[[[[[[[[[[[[[[[[[[[[[['\n".replace("note_free", "x_note") if False else ""
    path, _ = write("q.yaml", text)
    r = validate(path)
    assert r.valid, [p.format() for p in r.problems]
    assert r.variants[0].spec.description == "[" * 40 + "{" * 40


def test_single_quoted_escape(write, validate):
    spec = base_spec()
    path, _ = write("q.yaml", to_yaml(spec)[0].replace('"t_spec"', "'t_spec'") +
                    "description: 'it''s [[[[[[[[[[[[[[[[[[[[[[['\n")
    r = validate(path)
    assert r.valid, [p.format() for p in r.problems]


def test_missing_file_is_exit_2(tmp_path, validate):
    e = validate(tmp_path / "nope.yaml")
    assert isinstance(e, KgenError) and e.exit_code == 2
    assert e.problems[0].rule == "file-missing"
    assert e.problems[0].format().startswith(f"{tmp_path / 'nope.yaml'}:1:1: error[file-missing]")


def test_directory_is_an_error(tmp_path, validate):
    e = validate(tmp_path)
    assert isinstance(e, KgenError) and e.exit_code == 1
    assert e.problems[0].rule == "file-kind"


def test_byte_order_mark_is_accepted(write, validate):
    path, _ = write("bom.yaml", b"\xef\xbb\xbf" + GOOD.encode())
    assert validate(path).valid


def test_crlf_line_endings(write, validate):
    path, _ = write("crlf.yaml", GOOD.replace("\n", "\r\n").encode())
    r = validate(path)
    assert r.valid


def test_unreadable_file(write, validate, tmp_path):
    import os

    if os.geteuid() == 0:
        pytest.skip("root reads everything")
    path, _ = write("locked.yaml", GOOD)
    path.chmod(0)
    e = validate(path)
    assert isinstance(e, KgenError) and e.problems[0].rule == "file-read"


def test_positions_of_keys_and_items(write):
    text = "kgen: 1\nstore:\n  dtype: bf16\n  scale: none\ntargets: [sm_90a, sm_100a]\nlist:\n  - a: 1\n    b: 2\n"
    path, _ = write("p.yaml", text)
    src = load_yaml(path)
    assert src.position(("kgen",)) == (1, 1)
    assert src.position(("store", "scale")) == (4, 3)
    assert src.position(("targets", 1)) == (5, 19)
    assert src.position(("list", 0, "b")) == (8, 5)
    assert src.position(("list", 0)) == (7, 5)
    # a missing key resolves to the deepest key that exists
    assert src.position(("store", "block")) == (2, 1)
    assert src.position(("nothing",)) == (1, 1)
    assert src.position(("targets", 7)) == (5, 1)
    # positions relative to a base (inline family variants)
    assert src.position(("b",), base=("list", 0)) == (8, 5)


def test_plain_data_has_builtin_types(write):
    path, _ = write("p.yaml", "a: 1\nb: 1.5\nc: true\nd: null\ne: [x, 2]\nf: {g: h}\n")
    data = load_yaml(path).data
    assert data == {"a": 1, "b": 1.5, "c": True, "d": None, "e": ["x", 2], "f": {"g": "h"}}
    assert type(data) is dict and type(data["e"]) is list and type(data["f"]) is dict
    assert type(data["a"]) is int and type(data["b"]) is float and type(data["e"][0]) is str


def test_yaml_1_2_semantics(write):
    """YAML 1.2: `yes`/`on` are strings (not booleans), 1e-6 is a float, 0o17 octal."""
    path, _ = write("p.yaml", "a: yes\nb: on\nc: 1e-6\nd: 0o17\ne: 1_000\nf: '64'\n")
    data = load_yaml(path).data
    assert data["f"] == "64"
    assert data["a"] == "yes" and data["b"] == "on"
    assert data["c"] == 1e-6 and data["d"] == 15


def test_shipped_files_load(validate):
    for path in sorted(SPECS.rglob("*.yaml")):
        src = load_yaml(path)
        assert isinstance(src.data, dict), path


def test_1e400_is_a_float_infinity(write, validate):
    path, pos = write("inf.yaml", _replace("head_dim: 128", "head_dim: 1e400"))
    r = validate(path)
    assert [(p.rule, p.loc_str) for p in r.problems] == [("schema-type", "head_dim")]
    assert "inf" in r.problems[0].message


def test_path_is_kept_as_given(write, validate, monkeypatch, tmp_path):
    path, _ = write("sub/rel.yaml", _replace("head_dim: 128", "head_dim: 96"))
    monkeypatch.chdir(tmp_path)
    r = validate(Path("sub/rel.yaml"))
    assert r.problems[0].format().startswith("sub/rel.yaml:")


@pytest.mark.parametrize("text", ["a[[[[[[[[[[[[[[[[[", "it's [[[[[[[[[[[[[[[[[[[[ {{{{{{{{{{{{{{{{{{ fine",
                                  "x: y: [[[[[[[[[[[[[[[[[[[["])
def test_brackets_inside_a_plain_string_are_text(tmp_path, text):
    """A plain (unquoted) YAML string may hold any number of brackets after its first character."""
    from kgen.reference import load_spec

    body = GOOD.replace("kgen: 1\n", f"kgen: 1\ndescription: {text}\n", 1) if "x: y" not in text else \
        GOOD.replace("kgen: 1\n", f"kgen: 1\ndescription: '{text}'\n", 1)
    p = tmp_path / "s.yaml"
    p.write_text(body)
    assert load_spec(p).description == text


@pytest.mark.parametrize("value", ["true", "false", "1.0", "'1'"])
def test_the_schema_version_is_the_integer_1(tmp_path, value):
    from kgen.validate import validate_path

    p = tmp_path / "s.yaml"
    p.write_text(GOOD.replace("kgen: 1\n", f"kgen: {value}\n", 1))
    r = validate_path(p)
    assert not r.valid and r.errors[0].line == 1, [e.format() for e in r.errors]
