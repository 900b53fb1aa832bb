"""`kgen patch --engine vllm` against the released vLLM 0.33.0 (`make releases`): the patch applies
with git, audits clean for its variant and still for vLLM's own formats, leaves vLLM's formatter
(ruff format, line 88) and import order (ruff isort) nothing to change, carries no kernel sources,
refuses what it cannot wire with located reasons, and names a moved site as drift. The
vLLM-recipe spec (specs/vllm_indexer_fp8.yaml) audits clean there.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import releases  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
RELEASE = "vllm-0.33.0"
SPEC = ROOT / "specs" / "vllm_indexer_bf16.yaml"
RECIPE = ROOT / "specs" / "vllm_indexer_fp8.yaml"
FP4 = ROOT / "tests" / "fixtures" / "engines" / "vllm_indexer_fp4.yaml"
RUFF_CONFIG = ROOT / "tests" / "fixtures" / "engines" / "vllm_ruff.toml"
PY = sys.executable
RUFF = Path(PY).parent / "ruff"
EDITED = ["vllm/model_executor/layers/sparse_attn_indexer.py", "vllm/models/deepseek_v4/attention.py",
          "vllm/v1/attention/backends/mla/indexer.py"]


def kgen(*args: str) -> subprocess.CompletedProcess:
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "KGEN_CACHE_DIR": "/tmp/kgen-cache-test-vllm"}
    return subprocess.run([PY, "-m", "kgen", *args], cwd=ROOT, env=env, capture_output=True, text=True, check=False,
                          timeout=300)


def audit(root: Path, *specs: Path) -> tuple[int, list[dict]]:
    r = kgen("audit", "--engine", "vllm", "--root", str(root), *map(str, specs), "--json")
    assert "Traceback" not in r.stderr, r.stderr
    return r.returncode, json.loads(r.stdout)["results"]


def ruff(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(RUFF), *args, "--config", str(RUFF_CONFIG)], cwd=cwd, capture_output=True, text=True,
                          check=False)


@pytest.fixture(scope="module")
def patched(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("vllm-patch")
    root = tmp / RELEASE
    shutil.copytree(releases.tree(RELEASE), root)
    r = kgen("patch", "--engine", "vllm", "--root", str(root), str(SPEC), "--apply", "-o", str(tmp / "p.diff"))
    assert r.returncode == 0, r.stderr
    return root, tmp / "p.diff", r.stderr


def test_recipe_spec_audits_clean_and_sm100_names_the_bytes(tmp_path):
    """vLLM's own fp8 keys (bf16 round trip, power-of-two scale, no Hadamard, 576-B pages) agree on
    sm_90a; with sm_100a too, the one finding is the SM100 scale slot, naming its bytes."""
    root = releases.tree(RELEASE)
    code, results = audit(root, RECIPE, FP4)
    assert code == 0 and all(r["ok"] for r in results), results
    spec = tmp_path / "recipe_sm100.yaml"
    spec.write_text(RECIPE.read_text().replace("targets: [sm_90a]", "targets: [sm_90a, sm_100a]"))
    code, (res,) = audit(root, spec)
    assert code == 1 and [e["rule"] for e in res["errors"]] == ["engine-store"], res["errors"]
    msg = res["errors"][0]["message"]
    assert "page bytes 8192-8447" in msg and "7f 7f 7f 7f" in msg and "00 00 80 3f" in msg


def test_patch_applies_audits_clean_and_carries_no_sources(patched, tmp_path):
    root, diff, stderr = patched
    assert "PR summary" in stderr and 'indexer_kv_dtype="kgen"' in stderr
    if shutil.which("git"):
        clean = tmp_path / "clean"
        shutil.copytree(releases.tree(RELEASE), clean)
        subprocess.run(["git", "apply", "--check", str(diff)], cwd=clean, check=True)
    code, results = audit(root, SPEC, RECIPE, FP4)
    assert code == 0 and all(r["ok"] for r in results), results
    pkg = root / "vllm" / "kgen_indexer"
    assert sorted(p.name for p in pkg.iterdir()) == ["__init__.py", "host.py", "layers.py", "spec.yaml"]
    changed = sorted(str(p.relative_to(root)) for p in root.rglob("*.py") if "kgen_indexer" not in p.parts
                     and p.read_bytes() != (releases.tree(RELEASE) / p.relative_to(root)).read_bytes())
    assert changed == sorted(EDITED)
    r = kgen("patch", "--engine", "vllm", "--root", str(root), str(SPEC))
    assert r.returncode == 0 and r.stdout == "" and "already carries" in r.stderr


def test_edited_files_pass_vllms_formatter_and_import_order(patched):
    """ruff format and ruff's isort (tests/fixtures/engines/vllm_ruff.toml) leave every edited and
    every new file as kgen wrote it; the release's own files pass the same settings."""
    if not RUFF.exists():
        pytest.fail("ruff comes with the lint extra (pip install -e '.[lint]')", pytrace=False)
    root, _diff, _ = patched
    files = [*EDITED, *(str(p.relative_to(root)) for p in sorted((root / "vllm" / "kgen_indexer").glob("*.py")))]
    for where, names in ((releases.tree(RELEASE), EDITED), (root, files)):
        r = ruff("format", "--check", "--diff", *names, cwd=where)
        assert r.returncode == 0, (where, r.stdout[-3000:], r.stderr[-2000:])
        r = ruff("check", "--select", "I", *names, cwd=where)
        assert r.returncode == 0, (where, r.stdout[-3000:])


def test_variants_the_patch_cannot_wire_are_refused_located(tmp_path):
    """compress_pool hands the store bf16 rows of pages of 64 keys, padded to 576 B: a spec that
    reads fp32 rows, or pages of 32 keys, is refused at the spec, nothing written."""
    root = tmp_path / RELEASE
    shutil.copytree(releases.tree(RELEASE), root)
    before = {p: p.read_bytes() for p in root.rglob("*") if p.is_file()}
    spec = tmp_path / "p32.yaml"
    spec.write_text(SPEC.read_text().replace("page_size: 64", "page_size: 32").replace(
        "bytes_per_token: 256\n  page_bytes: 16704\n", "bytes_per_token: 256\n  page_bytes: 8640\n"))
    for bad, words in ((ROOT / "specs" / "indexer_bf16.yaml", ["reads fp32 rows", "page_align: 576"]),
                       (spec, ["pages hold 32 keys"])):
        r = kgen("patch", "--engine", "vllm", "--root", str(root), str(bad), "--apply")
        assert r.returncode == 1 and "Traceback" not in r.stderr and r.stdout == ""
        assert all(w in r.stderr for w in words) and str(bad) in r.stderr, r.stderr
    assert {p: p.read_bytes() for p in root.rglob("*") if p.is_file()} == before


def test_a_moved_hook_is_named_drift_and_nothing_is_written(tmp_path):
    root = tmp_path / RELEASE
    shutil.copytree(releases.tree(RELEASE), root)
    att = root / "vllm/models/deepseek_v4/attention.py"
    att.write_text(att.read_text().replace("def _get_indexer_cls(", "def _indexer_cls("))
    before = {p: p.read_bytes() for p in root.rglob("*") if p.is_file()}
    r = kgen("patch", "--engine", "vllm", "--root", str(root), str(SPEC), "--apply")
    assert r.returncode == 1 and "engine-anchor" in r.stderr and "_get_indexer_cls" in r.stderr
    assert {p: p.read_bytes() for p in root.rglob("*") if p.is_file()} == before
