"""kgen is a real package: `import kgen` is cheap and exposes the public API, `python -m kgen` is the
CLI, and a wheel installed outside the repository renders and compiles a shipped spec (the
templates and kernel headers are package data)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile

import pytest

import kgen
from strategies import ROOT

SPEC = ROOT / "specs" / "indexer_bf16.yaml"


def _env(**extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(extra)
    return env


def test_import_is_cheap_and_the_api_resolves():
    r = subprocess.run([sys.executable, "-c", "import sys, kgen; print(sorted(m for m in ('pydantic', 'jinja2', "
                        "'torch', 'typer', 'cuda') if m in sys.modules)); print(kgen.__version__)"],
                       cwd=ROOT, capture_output=True, text=True, env=_env(PYTHONPATH=str(ROOT)))
    assert r.returncode == 0, r.stderr
    loaded, version = r.stdout.splitlines()
    assert loaded == "[]" and version == kgen.__version__
    for name in kgen.__all__:
        assert getattr(kgen, name) is not None, name
    assert kgen.compute(kgen.load_document(SPEC).variants[0].spec).page_bytes == 16384
    with pytest.raises(AttributeError):
        kgen.no_such_thing  # noqa: B018


def test_version_is_the_packages():
    import tomllib

    conf = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "version" not in conf["project"] and "version" in conf["project"]["dynamic"]
    assert conf["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "kgen.__version__"}


def test_python_m_kgen_is_the_cli():
    r = subprocess.run([sys.executable, "-m", "kgen", "validate", str(SPEC)], cwd=ROOT, capture_output=True,
                       text=True, env=_env(PYTHONPATH=str(ROOT)))
    assert r.returncode == 0 and "dsv4_indexer_bf16" in r.stdout, r.stderr
    r = subprocess.run([sys.executable, "-m", "kgen", "validate", str(ROOT / "specs" / "missing.yaml")], cwd=ROOT,
                       capture_output=True, text=True, env=_env(PYTHONPATH=str(ROOT)))
    assert r.returncode == 2 and "missing.yaml" in r.stderr


def test_wheel_works_outside_the_repo(tmp_path):
    """pip wheel . -> install into a bare directory -> from a directory outside the repo, with only
    that directory on the path: render and NVRTC-compile specs/indexer_bf16.yaml."""
    pytest.importorskip("setuptools")
    # build from a copy: setuptools leaves build/ and *.egg-info beside the sources, and a stale
    # build/lib would put deleted modules into the wheel
    src = tmp_path / "src"
    for name in ("kgen", "templates"):
        shutil.copytree(ROOT / name, src / name, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    wheels = tmp_path / "wheels"
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w",
                        str(wheels), str(src)], capture_output=True, text=True, env=_env())
    assert r.returncode == 0, r.stderr[-3000:]
    (wheel,) = wheels.glob("kgen-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    tree = {p.relative_to(ROOT).as_posix() for p in (ROOT / "kgen").rglob("*.py")}
    assert tree <= names, f"modules missing from the wheel: {sorted(tree - names)}"
    headers = {"kgen/templates/" + p.relative_to(ROOT / "templates").as_posix()
               for p in (ROOT / "templates").rglob("*") if p.is_file()}
    assert headers <= names, f"templates missing from the wheel: {sorted(headers - names)}"
    assert "kgen/fastop.cpp" in names  # the op's native kernel is built from it on first use (kgen.native)

    site = tmp_path / "site"
    r = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--target",
                        str(site), str(wheel)], capture_output=True, text=True, env=_env())
    assert r.returncode == 0, r.stderr[-3000:]
    work = tmp_path / "elsewhere"
    work.mkdir()
    shutil.copy(SPEC, work / "spec.yaml")
    env = _env(PYTHONPATH=str(site), KGEN_CACHE_DIR=str(tmp_path / "cache"))
    r = subprocess.run([sys.executable, "-c", "import kgen; print(kgen.__file__)"], cwd=work, capture_output=True,
                       text=True, env=env)
    assert r.returncode == 0 and r.stdout.startswith(str(site)), (r.stdout, r.stderr)
    r = subprocess.run([sys.executable, "-m", "kgen", "render", "spec.yaml", "-o", "out"], cwd=work,
                       capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    assert (work / "out" / "dsv4_indexer_bf16" / "kernel.cu").is_file()
    assert (work / "out" / "include" / "kgen" / "norm_rope_store.cuh").read_text() == \
        (ROOT / "templates" / "include" / "kgen" / "norm_rope_store.cuh").read_text()
    r = subprocess.run([sys.executable, "-m", "kgen", "compile", "spec.yaml", "--arch", "sm_90a", "--json"],
                       cwd=work, capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    rows = json.loads(r.stdout)["results"]
    (row,) = [x for x in rows if x["kernel"] == "norm_rope_store"]
    assert row["ok"] and row["variant"] == "dsv4_indexer_bf16" and row["arch"] == "sm_90a"
    assert {x["kernel"] for x in rows} == {"norm_rope_store", "indexer_logits", "indexer_topk", "indexer_topk_slots"}
    assert all(x["ok"] for x in rows)
