"""`kgen validate` and `kgen layout` through the real CLI: bad input gives compiler-style located
lines and exit 1 (2 for a missing file), never a traceback; --json per the contract; no torch or
cuda-python import on the validate path."""

from __future__ import annotations

import json
import re
import subprocess
import time

import pytest
from conftest import KGEN, PYTHON
from typer.testing import CliRunner

from kgen.cli import app
from strategies import ROOT, SPECS, base_spec, fp8_spec, to_yaml

# Bad input must never make kgen work without bound (a hang, an alias bomb); a generous bound, so a
# loaded 2-core CI machine cannot fail it. Start-up speed is a benchmark: bench/cli_speed.py.
HANG_GUARD_S = 15.0

runner = CliRunner()


def kgen(*args, cwd=None):
    """Run the real CLI in-process (typer's runner)."""
    return runner.invoke(app, [str(a) for a in args], catch_exceptions=False)


def _line(path, line, col, rule) -> str:
    return f"{path}:{line}:{col}: error[{rule}]: "


def _spec_text(**changes) -> str:
    s = base_spec()
    s.update(changes)
    return to_yaml(s)[0]


GOOD = _spec_text()
HEAD_LINE = GOOD.splitlines().index("head_dim: 128") + 1
BOMB = "a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 9)}]\n" for i in range(8))


def _fam(*variants) -> str:
    return ("kgen: 1\nfamily: f\nvariants:\n" + "".join(f"  - {v}\n" for v in variants)
            + "dispatch:\n  key: [name]\n")


# (id, files {name: content}, file to validate, (file with the error, line, col, rule), exit code)
BAD = [
    ("malformed", {"s.yaml": "kgen: 1\nname: [x\nhead_dim: 1\n"}, "s.yaml", ("s.yaml", 3, 9, "yaml-syntax"), 1),
    ("tabs", {"s.yaml": "kgen: 1\nstore:\n\tdtype: bf16\n"}, "s.yaml", ("s.yaml", 3, 1, "yaml-tab"), 1),
    ("empty", {"s.yaml": ""}, "s.yaml", ("s.yaml", 1, 1, "yaml-empty"), 1),
    ("directory", {"d/x.yaml": GOOD}, "d", ("d", 1, 1, "file-kind"), 1),
    ("non-utf8", {"s.yaml": b"kgen: 1\nname: \xff\n"}, "s.yaml", ("s.yaml", 2, 7, "file-encoding"), 1),
    ("string-int", {"s.yaml": GOOD.replace("head_dim: 128", 'head_dim: "128"')}, "s.yaml",
     ("s.yaml", HEAD_LINE, 1, "schema-type"), 1),
    ("bool-int", {"s.yaml": GOOD.replace("head_dim: 128", "head_dim: true")}, "s.yaml",
     ("s.yaml", HEAD_LINE, 1, "schema-type"), 1),
    ("1e400", {"s.yaml": GOOD.replace("head_dim: 128", "head_dim: 1e400")}, "s.yaml",
     ("s.yaml", HEAD_LINE, 1, "schema-type"), 1),
    ("10**30", {"s.yaml": GOOD.replace("head_dim: 128", f"head_dim: {10**30}").replace("hadamard: true",
                                                                                       "hadamard: false")},
     "s.yaml", ("s.yaml", HEAD_LINE, 1, "head-dim"), 1),
    ("huge-digits", {"s.yaml": GOOD.replace("head_dim: 128", "head_dim: " + "7" * 4400)}, "s.yaml",
     ("s.yaml", HEAD_LINE, 11, "yaml-type"), 1),
    ("alias-bomb", {"s.yaml": BOMB}, "s.yaml", ("s.yaml", 2, 8, "yaml-alias"), 1),
    ("dotdot-name", {"s.yaml": GOOD.replace('"t_spec"', '"../../etc/passwd"')}, "s.yaml", ("s.yaml", 2, 1, "name"), 1),
    ("dotdot-include", {"fam/f.yaml": _fam("../s.yaml"), "s.yaml": GOOD}, "fam/f.yaml",
     ("fam/f.yaml", 4, 5, "family-include"), 1),
    ("cycle-a", {"a.yaml": _fam("b.yaml"), "b.yaml": _fam("a.yaml")}, "a.yaml", ("b.yaml", 4, 5, "family-include"), 1),
    ("cycle-b", {"a.yaml": _fam("b.yaml"), "b.yaml": _fam("a.yaml")}, "b.yaml", ("a.yaml", 4, 5, "family-include"), 1),
    ("missing-include", {"f.yaml": _fam("nope.yaml")}, "f.yaml", ("f.yaml", 4, 5, "family-include"), 1),
    ("missing-file", {}, "nope.yaml", ("nope.yaml", 1, 1, "file-missing"), 2),
    ("unknown-key", {"s.yaml": GOOD + "colour: red\n"}, "s.yaml",
     ("s.yaml", len(GOOD.splitlines()) + 1, 1, "schema-unknown-key"), 1),
    ("duplicate-key", {"s.yaml": GOOD + "head_dim: 64\n"}, "s.yaml",
     ("s.yaml", len(GOOD.splitlines()) + 1, 1, "yaml-duplicate-key"), 1),
    ("top-level-list", {"s.yaml": "- kgen: 1\n"}, "s.yaml", ("s.yaml", 1, 1, "yaml-shape"), 1),
    ("error-in-include", {"f.yaml": _fam("sub/s.yaml"), "sub/s.yaml": GOOD.replace("head_dim: 128", "head_dim: 96")},
     "f.yaml", ("sub/s.yaml", HEAD_LINE, 1, "head-dim"), 1),
]


def _materialize(tmp_path, files):
    for name, content in files.items():
        p = tmp_path / name
        p.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            p.write_bytes(content)
        else:
            p.write_text(content)


@pytest.mark.parametrize("case", BAD, ids=[c[0] for c in BAD])
def test_bad_input_is_a_located_line(case, tmp_path, monkeypatch):
    name, files, target, (efile, line, col, rule), code = case
    _materialize(tmp_path, files)
    monkeypatch.chdir(tmp_path)  # paths print as the user typed them
    t = time.perf_counter()
    r = kgen("validate", target)
    elapsed = time.perf_counter() - t
    assert r.exit_code == code, r.output
    assert "Traceback" not in r.output
    assert _line(efile, line, col, rule) in r.output, r.output
    assert re.search(rf"^{re.escape(efile)}:\d+:\d+: error\[[a-z0-9-]+\]: .+ \(fix: .+\)$", r.output, re.M)
    assert elapsed < HANG_GUARD_S, f"{name}: {elapsed:.2f} s"  # no unbounded work; not a speed goal


@pytest.mark.parametrize("args, code, line", [
    (["validate", "missing.yaml"], 2, "missing.yaml:1:1: error[file-missing]: no such file"),
    (["validate", "bomb.yaml"], 1, "bomb.yaml:2:8: error[yaml-alias]"),
    (["validate", "latin1.yaml"], 1, "latin1.yaml:2:7: error[file-encoding]: byte 0xff is not UTF-8"),
    (["validate", "cyc.yaml"], 1, "cyc.yaml:4:5: error[family-include]: include cycle: cyc.yaml -> cyc.yaml"),
    (["layout", "missing.yaml"], 2, "missing.yaml:1:1: error[file-missing]"),
])
def test_real_subprocess(tmp_path, args, code, line):
    """The installed `kgen` script: exit code, located line on stderr, no traceback, no hang."""
    (tmp_path / "bomb.yaml").write_text(BOMB)
    (tmp_path / "latin1.yaml").write_bytes(b"kgen: 1\nname: \xff\n")
    (tmp_path / "cyc.yaml").write_text(_fam("cyc.yaml"))
    t = time.perf_counter()
    p = subprocess.run([str(KGEN), *args], cwd=tmp_path, capture_output=True, text=True, timeout=30)
    elapsed = time.perf_counter() - t
    assert p.returncode == code, p.stderr
    assert line in p.stderr
    assert "Traceback" not in p.stdout + p.stderr
    assert elapsed < HANG_GUARD_S, elapsed  # no hang; start-up speed is bench/cli_speed.py's


def test_usage_error_is_exit_2():
    r = kgen("validate")
    assert r.exit_code == 2 and "Traceback" not in r.output


def test_valid_shipped_specs():
    r = kgen("validate", *sorted(SPECS.glob("*.yaml")))
    assert r.exit_code == 0, r.output
    assert "dsv4_indexer_bf16 256 B/token, 16384 B/page" in r.output
    assert "dsv4_latent_fp8_p64 584 B/token, 37440 B/page" in r.output
    assert "warning[dispatch-unused]" in r.output  # warnings print, exit stays 0
    assert "error[" not in r.output


def test_many_paths_worst_exit_wins(tmp_path):
    (tmp_path / "bad.yaml").write_text(GOOD.replace("head_dim: 128", "head_dim: 96"))
    r = kgen("validate", SPECS / "indexer_bf16.yaml", tmp_path / "bad.yaml")
    assert r.exit_code == 1
    r = kgen("validate", SPECS / "indexer_bf16.yaml", tmp_path / "bad.yaml", tmp_path / "missing.yaml")
    assert r.exit_code == 2
    assert "bad.yaml" in r.output and "missing.yaml" in r.output  # every path is still reported


@pytest.mark.parametrize("command", [["layout"], ["render", "-o", "{out}"], ["compile", "--arch", "sm_90a"],
                                     ["test"], ["bench"], ["recall"]])
def test_every_command_reads_paths_alike(command, tmp_path):
    """Every command that takes spec paths (kgen.validate.validate_paths) reports every bad path and
    exits with the worst code, before it renders, compiles or looks for a GPU."""
    (tmp_path / "bad.yaml").write_text(GOOD.replace("head_dim: 128", "head_dim: 96"))
    args = [a.format(out=tmp_path / "out") for a in command]
    r = kgen(*args, SPECS / "indexer_bf16.yaml", tmp_path / "bad.yaml")
    assert r.exit_code == 1 and f"{tmp_path / 'bad.yaml'}:{HEAD_LINE}:" in r.output
    r = kgen(*args, tmp_path / "bad.yaml", tmp_path / "missing.yaml", SPECS / "indexer_bf16.yaml")
    assert r.exit_code == 2
    assert "error[head-dim]" in r.output and "missing.yaml" in r.output  # both paths reported
    assert "no-gpu" not in r.output and "Traceback" not in r.output
    assert not (tmp_path / "out").exists()  # render wrote nothing


# -- --json --------------------------------------------------------------------------------------

def _json(*args):
    r = kgen("validate", "--json", *args)
    return r.exit_code, json.loads(r.stdout)


def test_json_shape(tmp_path):
    spec = fp8_spec()
    spec["name"] = "Bad"
    spec["host"] = {"page_bytes": 16384}
    text, pos = to_yaml(spec)
    (tmp_path / "x.yaml").write_text(text)
    code, out = _json(tmp_path / "x.yaml", SPECS / "indexer_bf16.yaml")
    assert code == 1
    assert set(out) == {"results"}
    bad, good = out["results"]
    assert set(bad) >= {"path", "valid", "errors", "variants"}
    assert bad["path"] == str(tmp_path / "x.yaml") and bad["valid"] is False
    assert sorted(e["rule"] for e in bad["errors"]) == ["host", "name"]
    host = next(e for e in bad["errors"] if e["rule"] == "host")
    assert set(host) >= {"rule", "loc", "line", "col", "message"}
    assert (host["loc"], host["line"], host["col"]) == ("host.page_bytes", *pos[("host", "page_bytes")])
    assert "8448" in host["message"]
    # the byte math is listed although the file has errors
    assert bad["variants"] == [{"name": "Bad", "bytes_per_token": 132, "page_bytes": 8448}]
    assert good == {"path": str(SPECS / "indexer_bf16.yaml"), "valid": True, "errors": [], "warnings": [],
                    "variants": [{"name": "dsv4_indexer_bf16", "bytes_per_token": 256, "page_bytes": 16384}]}


def test_json_family_and_warnings():
    code, out = _json(SPECS / "dsv4.yaml")
    assert code == 0
    [res] = out["results"]
    assert res["valid"] and res["errors"] == []
    assert {w["rule"] for w in res["warnings"]} == {"dispatch-unused"}
    assert [(v["name"], v["bytes_per_token"], v["page_bytes"]) for v in res["variants"]] == [
        ("dsv4_indexer_fp8", 132, 8448), ("dsv4_indexer_fp4", 68, 4352), ("dsv4_indexer_bf16", 256, 16384),
        ("dsv4_latent_fp8_p64", 584, 37440), ("dsv4_latent_fp8_p2", 584, 1728),
        ("dsv4_latent_bf16", 1024, 65536), ("dsv4_latent_fp8_uniform", 512, 32768)]


def test_json_unreadable_file(tmp_path):
    (tmp_path / "t.yaml").write_text("a:\n\tb: 1\n")
    code, out = _json(tmp_path / "missing.yaml", tmp_path / "t.yaml")
    assert code == 2
    missing, tab = out["results"]
    assert missing["valid"] is False and missing["errors"][0]["rule"] == "file-missing" and missing["variants"] == []
    assert (tab["errors"][0]["rule"], tab["errors"][0]["line"], tab["errors"][0]["col"]) == ("yaml-tab", 2, 1)


def test_json_error_in_included_file(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "s.yaml").write_text(GOOD.replace("head_dim: 128", "head_dim: 96").replace(
        "hadamard: true", "hadamard: false"))
    (tmp_path / "f.yaml").write_text(_fam("sub/s.yaml"))
    code, out = _json(tmp_path / "f.yaml")
    [err] = out["results"][0]["errors"]
    assert (err["file"], err["line"], err["rule"]) == (str(tmp_path / "sub" / "s.yaml"), HEAD_LINE, "head-dim")
    assert out["results"][0]["variants"] == [{"name": "t_spec", "bytes_per_token": 192, "page_bytes": 12288}]


# -- layout ----------------------------------------------------------------------------------------

def test_layout_text_latent_packed():
    r = kgen("layout", SPECS / "dsv4/latent_fp8_p64.yaml")
    assert r.exit_code == 0, r.output
    out = r.output
    assert "448 x 8 bit + 64 x 16 bit bf16 = 576 B row + 8 B scales (7 x 1 B, stride 8) = 584 B/token" in out
    assert "64 tokens x 584 B = 37376 B, rounded up to a multiple of 576: 37440 B" in out
    assert re.search(r"rows\s+0\s+36864\s+36864", out)
    assert re.search(r"scales\s+36864\s+37376\s+512", out)
    assert re.search(r"padding\s+37376\s+37440\s+64", out)
    assert "values @0 +448" in out and "rope @448 +128" in out
    assert "scales of token t at 36864 + t * 8 + g * 1 (g < 7)" in out
    assert "token 63: row @36288, scale @37368" in out


def test_layout_json_latent_packed():
    r = kgen("layout", "--json", SPECS / "dsv4/latent_fp8_p64.yaml")
    assert r.exit_code == 0
    [lay] = json.loads(r.stdout)["layouts"]
    assert (lay["name"], lay["page_size"], lay["row_bytes"], lay["scale_stride"], lay["bytes_per_token"],
            lay["page_bytes"]) == ("dsv4_latent_fp8_p64", 64, 576, 8, 584, 37440)
    assert [(x["name"], x["offset"], x["size"]) for x in lay["regions"]] == [
        ("rows", 0, 36864), ("scales", 36864, 512), ("padding", 37376, 64)]
    assert [(x["name"], x["offset"], x["size"]) for x in lay["row"]] == [("values", 0, 448), ("rope", 448, 128)]
    assert lay["token_offsets"] == {"value": "t * 576", "scale": "36864 + t * 8 + g * 1"}


def test_layout_json_family_and_unscaled():
    r = kgen("layout", "--json", SPECS / "dsv4.yaml")
    assert r.exit_code == 0
    lays = {x["name"]: x for x in json.loads(r.stdout)["layouts"]}
    assert len(lays) == 7
    bf16 = lays["dsv4_indexer_bf16"]
    assert bf16["regions"] == [{"name": "rows", "offset": 0, "size": 16384, "note": "64 x 256 B"}]
    assert bf16["token_offsets"] == {"value": "t * 256", "scale": None}
    fp8 = lays["dsv4_indexer_fp8"]
    assert fp8["token_offsets"]["scale"] == "8192 + t * 4"


def test_layout_of_invalid_spec(tmp_path):
    (tmp_path / "s.yaml").write_text(GOOD.replace("head_dim: 128", "head_dim: 96"))
    r = kgen("layout", tmp_path / "s.yaml")
    assert r.exit_code == 1
    assert _line(tmp_path / "s.yaml", HEAD_LINE, 1, "head-dim") in r.output


def test_layout_of_every_shipped_spec():
    for path in sorted(SPECS.rglob("*.yaml")):
        r = kgen("layout", path)
        assert r.exit_code == 0 and "Traceback" not in r.output, (path, r.output)


# -- imports ---------------------------------------------------------------------------------------

HEAVY = ("torch", "cuda", "jinja2", "libcst", "numpy")


@pytest.mark.parametrize("argv", [["--help"], ["validate", *map(str, sorted(SPECS.glob("*.yaml")))],
                                  ["validate", "--json", str(SPECS / "dsv4.yaml")],
                                  ["layout", str(SPECS / "dsv4/latent_fp8_p64.yaml")]])
def test_no_heavy_imports(argv):
    """--help, validate and layout never import torch or cuda-python (cuda.core, cuda.bindings,
    cuda.pathfinder); the ctypes load of libnvrtc is not a Python import."""
    code = ("import sys, contextlib, io\n"
            "from kgen.cli import main\n"
            f"sys.argv = ['kgen', *{argv!r}]\n"
            "with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):\n"
            "    try:\n        main()\n    except SystemExit as e:\n        rc = e.code\n"
            f"bad = sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r})\n"
            "print(rc, bad)\n")
    p = subprocess.run([str(PYTHON), "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "0 []", p.stdout + p.stderr
