"""`kgen compile` on the shipped specs: every variant, every target, no spills, cached, contract JSON."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kgen.build import compile_command  # noqa: E402
from kgen.compile import CompiledKernel, compile_variant  # noqa: E402
from kgen.load import load_document  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
SPECS = sorted((ROOT / "specs").glob("*.yaml"))
ARCHS = ["sm_90a", "sm_100a", "sm_120a"]
KEYS = {"variant", "kernel", "tune", "arch", "ok", "cached", "seconds", "registers", "spill_bytes", "log"}


@pytest.fixture(scope="session")
def kgen_cache(tmp_path_factory) -> Path:
    """One cache per test session, shared by every compile test file (same basetemp path)."""
    return tmp_path_factory.getbasetemp() / "kgen-cache"


@pytest.fixture(autouse=True)
def _cache_env(kgen_cache, monkeypatch):
    monkeypatch.setenv("KGEN_CACHE_DIR", str(kgen_cache))


def shipped_variants() -> set[str]:
    names = set()
    for p in SPECS:
        names |= {v.spec.name for v in load_document(p).variants if v.spec is not None}
    return names


def shipped_kernels() -> set[tuple[str, str, str]]:
    """(variant, kernel, tuning) of every kernel `kgen compile` builds for the shipped specs: the registry's
    kernels each variant has (the reader where it reads the layout), every tuning a launch may load."""
    from kgen.abi import tune_key
    from kgen.build import kernels_of

    out = set()
    for p in SPECS:
        for v in load_document(p).variants:
            if v.spec is not None:
                out |= {(v.spec.name, k.kernel, tune_key(t)) for k, t in kernels_of(v.spec)}
    return out


def run_json(capsys, paths, archs=None, validate=True) -> tuple[int, dict, str]:
    code = compile_command([Path(p) for p in paths], archs, validate=validate, as_json=True)
    out, err = capsys.readouterr()
    return code, json.loads(out), err


def test_shipped_specs_compile_for_every_arch_without_spills(capsys):
    code, doc, err = run_json(capsys, SPECS, ARCHS)
    assert code == 0, err
    rows = doc["results"]
    kernels = shipped_kernels()
    got = {(r["variant"], r["kernel"], r["tune"], r["arch"]) for r in rows}
    assert got == {(*k, a) for k in kernels for a in ARCHS}
    assert len(rows) == len(kernels) * len(ARCHS)  # a variant reached twice compiles once
    # every readable variant's reader is built, with its per-shape tunings (the registry drives the command)
    assert {v for v, k, _ in kernels if k == "indexer_logits"} == {"dsv32_indexer_fp8", "dsv4_indexer_bf16",
                                                                  "dsv4_indexer_fp4", "dsv4_indexer_fp8",
                                                                  "vllm_dsv4_indexer_bf16", "vllm_dsv4_indexer_fp8"}
    assert any(t for _, k, t in kernels if k == "indexer_logits")
    for r in rows:
        assert set(r) == KEYS
        assert r["ok"] is True
        assert r["spill_bytes"] == 0, f"{r['variant']} {r['arch']} spills: {r['log']}"
        assert isinstance(r["registers"], int) and 0 < r["registers"] <= 255
        assert "Used" in r["log"]


def test_second_run_is_cached_and_quiet(capsys):
    run_json(capsys, SPECS, ARCHS)
    code, doc, err = run_json(capsys, SPECS, ARCHS)
    assert code == 0
    assert all(r["cached"] for r in doc["results"])
    assert "compiling" not in err
    assert all(r["seconds"] < 0.1 for r in doc["results"])


def test_targets_come_from_the_spec_unless_arch(capsys, kgen_cache):
    spec = ROOT / "specs" / "indexer_bf16.yaml"
    targets = load_document(spec).variants[0].spec.targets
    code, doc, _ = run_json(capsys, [spec])
    assert code == 0 and [r["arch"] for r in doc["results"] if r["kernel"] == "norm_rope_store"] == targets
    assert {r["arch"] for r in doc["results"]} == set(targets)  # the reader's cubins: the same targets
    code, doc, _ = run_json(capsys, [spec], ["sm_90a"])
    assert code == 0 and {r["arch"] for r in doc["results"]} == {"sm_90a"}


def test_table_output(capsys):
    code = compile_command([ROOT / "specs" / "indexer_bf16.yaml"], ["sm_90a"], as_json=False)
    out = capsys.readouterr().out
    assert code == 0
    for word in ("variant", "arch", "cached", "seconds", "registers", "spills", "dsv4_indexer_bf16", "sm_90a"):
        assert word in out


def test_compile_variant_api():
    spec = load_document(ROOT / "specs" / "indexer_bf16.yaml").variants[0].spec
    k = compile_variant(spec, "sm_90a")
    assert isinstance(k, CompiledKernel) and k.uri == spec.name and k.arch == "sm_90a"
    assert k.cubin[:4] == b"\x7fELF" and k.symbol.startswith("_Z") and k.name_expression
    assert (k.cache_dir / "kernel.cubin").read_bytes() == k.cubin
    obj = k.object_code()
    assert obj.symbol_mapping == {k.name_expression: k.symbol.encode()}
    again = compile_variant(spec, "sm_90a")
    assert again.cached and again.cubin == k.cubin


def test_bad_arch_is_a_usage_error(capsys):
    from kgen.diagnostics import KgenError

    with pytest.raises(KgenError) as ei:
        compile_command([ROOT / "specs" / "indexer_bf16.yaml"], ["sm_9x"], validate=True, as_json=False)
    assert ei.value.exit_code == 2 and "sm_9x" in ei.value.problems[0].message


def test_invalid_spec_is_reported_not_compiled(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text((ROOT / "specs" / "indexer_bf16.yaml").read_text().replace("head_dim: 128", "head_dim: 96"))
    code, doc, err = run_json(capsys, [bad], ["sm_90a"])
    assert code == 1 and doc["results"] == [] and "head-dim" in {e["rule"] for e in doc["errors"]}
    assert f"{bad}:" in err and "error[head-dim]" in err and "compiling" not in err


def test_schema_errors_stop_even_without_validation(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text((ROOT / "specs" / "indexer_bf16.yaml").read_text().replace("head_dim: 128", 'head_dim: "128"'))
    code, doc, err = run_json(capsys, [bad], ["sm_90a"], validate=False)
    assert code == 1 and doc["results"] == [] and "schema-type" in err


def _cli(*args, env_cache: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "KGEN_CACHE_DIR": str(env_cache)}
    return subprocess.run([sys.executable, "-m", "kgen.cli", "compile", *args], capture_output=True, text=True,
                          env=env, cwd=ROOT)


def broken_page_size(tmp_path) -> Path:
    """indexer_bf16 with page_size 48: breaks only the page-size rule (and the host check)."""
    bad = tmp_path / "bad.yaml"
    bad.write_text((ROOT / "specs" / "indexer_bf16.yaml").read_text().replace("page_size: 64", "page_size: 48"))
    return bad


def test_cli_compile_failure_shows_first_error_rendered_path_and_spec(tmp_path, kgen_cache):
    bad = broken_page_size(tmp_path)
    r = _cli(str(bad), "--arch", "sm_90a", "--no-validate", env_cache=kgen_cache)
    assert r.returncode == 1, r.stderr
    assert "Traceback" not in r.stderr + r.stdout
    assert "error[page-size]" in r.stderr and "[page-size]" in r.stderr and "error:" in r.stderr
    assert f"{bad}:15:" in r.stderr  # located in the spec (the key the twin guards)
    src = [ln.split("rendered source: ", 1)[1].strip() for ln in r.stderr.splitlines() if "rendered source: " in ln]
    assert src and Path(src[0]).is_file() and Path(src[0]).read_text().strip()
    assert "FAILED" in r.stdout


def test_cli_json_failure_row(tmp_path, kgen_cache):
    bad = broken_page_size(tmp_path)
    r = _cli(str(bad), "--arch", "sm_90a", "--no-validate", "--json", env_cache=kgen_cache)
    assert r.returncode == 1
    (row,) = [r for r in json.loads(r.stdout)["results"] if r["kernel"] == "norm_rope_store"]
    assert set(row) == KEYS and row["ok"] is False and "[page-size]" in row["log"]


def test_warm_run_skips_yaml_validation_and_render(capsys, monkeypatch, kgen_cache):
    run_json(capsys, SPECS, ARCHS)
    import kgen.build as K

    def boom(*a, **k):
        raise AssertionError("a warm run must not load, validate or render")

    monkeypatch.setattr(K, "load_variants", boom)
    monkeypatch.setattr(K, "_build", boom)
    code, doc, err = run_json(capsys, SPECS, ARCHS)
    assert code == 0 and all(r["cached"] for r in doc["results"]) and err == ""
    assert len(doc["results"]) == len(shipped_kernels()) * len(ARCHS)


def test_warm_shortcut_notices_a_changed_included_file(tmp_path, capsys, monkeypatch):
    fam_dir = tmp_path / "fam"
    (fam_dir / "v").mkdir(parents=True)
    (fam_dir / "v" / "a.yaml").write_text((ROOT / "specs" / "indexer_bf16.yaml").read_text())
    fam = fam_dir / "fam.yaml"
    fam.write_text("kgen: 1\nfamily: fam_t\nvariants: [v/a.yaml]\ndispatch:\n  key: [store.dtype]\n")
    code, doc, _ = run_json(capsys, [fam], ["sm_90a"])
    assert code == 0
    # only the included file changes (the family file, which the shortcut's key reads, does not)
    (fam_dir / "v" / "a.yaml").write_text((ROOT / "specs" / "indexer_bf16.yaml").read_text()
                                          .replace("eps: 1.0e-6", "eps: 1.0e-5"))
    code, doc, err = run_json(capsys, [fam], ["sm_90a"])
    assert code == 0 and doc["results"][0]["cached"] is False and "compiling dsv4_indexer_bf16" in err
    # a broken include is reported, not masked by the shortcut
    (fam_dir / "v" / "a.yaml").write_text((ROOT / "specs" / "indexer_bf16.yaml").read_text()
                                          .replace("page_size: 64", "page_size: 48"))
    code, doc, err = run_json(capsys, [fam], ["sm_90a"])
    assert code == 1 and "error[page-size]" in err


def test_warm_shortcut_sees_a_retargeted_symlinked_include(capsys, tmp_path, kgen_cache):
    """Issue 23, class 13: a family includes cur/v.yaml with cur -> a; retargeting cur -> b (an invalid
    spec) must not be answered from the run memo ("cached yes", exit 0) while validate exits 1."""
    good = (ROOT / "specs" / "indexer_bf16.yaml").read_text()
    for name, text in (("a", good), ("b", good.replace("page_size: 64", "page_size: 0"))):
        (tmp_path / name).mkdir()
        (tmp_path / name / "v.yaml").write_text(text)
    (tmp_path / "cur").symlink_to("a")
    fam = tmp_path / "fam.yaml"
    fam.write_text("kgen: 1\nfamily: fam_t\nvariants: [cur/v.yaml]\ndispatch:\n  key: [store.dtype]\n")
    code, _, _ = run_json(capsys, [fam], ["sm_90a"])
    code2, doc, _ = run_json(capsys, [fam], ["sm_90a"])
    assert code == code2 == 0 and all(r["cached"] for r in doc["results"])  # the memo answers
    (tmp_path / "cur").unlink()
    (tmp_path / "cur").symlink_to("b")
    code, doc, err = run_json(capsys, [fam], ["sm_90a"])
    assert code == 1 and doc["results"] == [] and "page" in err
