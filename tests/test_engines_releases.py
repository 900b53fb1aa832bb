"""`kgen audit` / `kgen patch` against the released engines (`make releases`: SGLang 0.5.17 and
0.5.23, vLLM 0.33.0 from the package registry). The release trees decide: every shipped indexer
spec in an engine's own format audits clean (exit 0), the others report their located mismatches
and nothing else, and a patch applies, audits clean and leaves the engine's formatter (black, line
88) and import order (isort, profile black) nothing to change.
"""

from __future__ import annotations

import difflib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import releases  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SPECS = ROOT / "specs"
FP8, FP4 = SPECS / "dsv4" / "indexer_fp8.yaml", SPECS / "dsv4" / "indexer_fp4.yaml"
BF16, PLAN = SPECS / "indexer_bf16.yaml", SPECS / "sglang" / "indexer_bf16_plan.yaml"
PY = sys.executable
BIN = Path(PY).parent


def kgen(*args: str) -> subprocess.CompletedProcess:
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "KGEN_CACHE_DIR": "/tmp/kgen-cache-test-releases"}
    return subprocess.run([PY, "-m", "kgen", *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          check=False, timeout=300)


def audit(engine: str, root: Path, *specs: Path) -> tuple[int, list[dict]]:
    r = kgen("audit", "--engine", engine, "--root", str(root), *map(str, specs), "--json")
    assert "Traceback" not in r.stderr, r.stderr
    return r.returncode, json.loads(r.stdout)["results"]


@pytest.mark.parametrize("name", releases.SGLANG)
def test_sglang_native_specs_audit_clean(name):
    code, results = audit("sglang", releases.tree(name), FP8, FP4)
    assert code == 0 and all(r["ok"] for r in results), results


@pytest.mark.parametrize("name", releases.SGLANG)
def test_sglang_bf16_reports_each_place_located(name):
    root = releases.tree(name)
    code, (res,) = audit("sglang", root, BF16)
    rules = sorted(e["rule"] for e in res["errors"])
    assert code == 1
    assert rules == sorted(["engine-flag", "engine-pool", "engine-pool", "engine-budget", "engine-store",
                            "engine-kernel", "engine-kernel", "engine-kernel", "engine-reader", "engine-scorer",
                            "engine-nonpaged"]), rules
    for e in res["errors"]:
        assert e["file"].startswith(str(root)) and e["line"] >= 1, e
        assert Path(e["file"]).is_file()
    scorer = next(e for e in res["errors"] if e["rule"] == "engine-scorer")
    assert "None" not in scorer["message"].split(", ")  # 0.5.23's `fn = None` (HIP) is no scorer


def test_family_skips_latent_variants_with_a_note():
    code, results = audit("sglang", releases.tree("sglang-0.5.23"), SPECS / "dsv4.yaml")
    by = {r["variant"]: r for r in results}
    assert by["dsv4_indexer_fp8"]["ok"] and by["dsv4_indexer_fp4"]["ok"]
    latent = [r for n, r in by.items() if "latent" in n]
    assert latent and all(r["ok"] and r.get("skipped") and not r["errors"] for r in latent)
    assert code == 1 and not by["dsv4_indexer_bf16"]["ok"]  # the family's bf16 indexer is not SGLang's


def _formatter_changes(path: Path, cwd: Path) -> list[str]:
    """The lines black (line 88) would change in a file: its diff's -/+ lines."""
    r = subprocess.run([str(BIN / "black"), "-q", "--diff", "-l", "88", str(path)], capture_output=True, text=True,
                       check=False, cwd=cwd)
    return sorted(ln for ln in r.stdout.splitlines() if ln[:1] in "-+" and ln[:3] not in ("---", "+++"))


@pytest.mark.parametrize("name", releases.SGLANG)
def test_sglang_patch_applies_audits_clean_and_is_formatter_clean(name, tmp_path):
    """The patch (plan-reading bf16) is a git-appliable diff; applied, the tree audits clean for the
    variant and still for the engine's own layouts; every edited engine file gives black and isort
    exactly what the release gave them, every new file nothing; no kernel sources are vendored."""
    if not (BIN / "black").exists() or not (BIN / "isort").exists():
        pytest.fail("black and isort come with the test extra (pip install -e '.[test]')", pytrace=False)
    original = releases.tree(name)
    root = tmp_path / name
    shutil.copytree(original, root)
    r = kgen("patch", "--engine", "sglang", "--root", str(root), str(PLAN), "--apply", "-o", str(tmp_path / "p.diff"))
    assert r.returncode == 0, r.stderr
    assert "PR summary" in r.stderr or "Summary" in r.stderr  # the maintainer-facing summary
    if shutil.which("git"):
        clean = tmp_path / "clean"
        shutil.copytree(original, clean)
        subprocess.run(["git", "apply", "--check", str(tmp_path / "p.diff")], cwd=clean, check=True)
    code, results = audit("sglang", root, PLAN, FP8, FP4)
    assert code == 0, results
    pkg = root / "python" / "sglang" / "kgen_indexer"
    assert sorted(p.name for p in pkg.iterdir()) == ["__init__.py", "host.py", "spec.yaml", "spec_prefill.yaml"]
    for p in sorted((root / "python").rglob("*.py")):
        rel = p.relative_to(root)
        before = original / rel
        if before.is_file() and before.read_bytes() == p.read_bytes():
            continue
        cwd = root / "python"
        was = _formatter_changes(before, original / "python") if before.is_file() else []
        now = _formatter_changes(p, cwd)
        assert now == was, (rel, "\n".join(difflib.unified_diff(was, now)))
        isort = subprocess.run([str(BIN / "isort"), "--profile", "black", "--check-only", "-q", str(p)], cwd=cwd,
                               capture_output=True, text=True, check=False)
        assert isort.returncode == 0, (rel, isort.stdout, isort.stderr)


def test_patch_refuses_then_names_drift_and_audits_the_rest(tmp_path):
    """A site that moved is one named engine-anchor error; every other site is still audited."""
    root = tmp_path / "t"
    shutil.copytree(releases.tree("sglang-0.5.23"), root)
    pool = root / "python/sglang/srt/mem_cache/deepseek_v4_memory_pool.py"
    pool.write_text(pool.read_text().replace("def get_bytes_per_token(self)", "def bytes_per_token(self)"))
    code, (res,) = audit("sglang", root, BF16)
    rules = [e["rule"] for e in res["errors"]]
    assert code == 1 and rules.count("engine-anchor") == 1
    assert {"engine-budget", "engine-store", "engine-reader", "engine-kernel"} <= set(rules)
    r = kgen("patch", "--engine", "sglang", "--root", str(root), str(PLAN), "--apply")
    assert r.returncode == 1 and "get_bytes_per_token" in r.stderr


def test_vllm_release_audit(tmp_path):
    root = releases.tree("vllm-0.33.0")
    code, results = audit("vllm", root, ROOT / "tests/fixtures/engines/vllm_indexer_fp8.yaml")
    assert code == 0, results
    code, (res,) = audit("vllm", root, BF16)
    assert code == 1 and {"engine-pool", "engine-dtype", "engine-scorer", "engine-store"} <= {
        e["rule"] for e in res["errors"]}
    assert not [e for e in res["errors"] if e["rule"] == "engine-anchor"], res["errors"]


@pytest.mark.parametrize("name", releases.SGLANG)
def test_root_may_be_the_installed_package(name):
    """`--root .../site-packages/sglang`: the package directory itself is accepted."""
    code, results = audit("sglang", releases.tree(name) / "python" / "sglang", FP8)
    assert code == 0, results


def test_without_root_the_importable_package_is_audited():
    root = releases.tree("sglang-0.5.23") / "python"
    env = {"PYTHONPATH": f"{ROOT}:{root}", "PATH": "/usr/bin:/bin", "KGEN_CACHE_DIR": "/tmp/kgen-cache-test-releases"}
    r = subprocess.run([PY, "-m", "kgen", "audit", "--engine", "sglang", str(FP8)], cwd=ROOT, env=env,
                       capture_output=True, text=True, check=False, timeout=300)
    assert r.returncode == 0 and str(root / "sglang") in r.stdout, r.stderr
    env["PYTHONPATH"] = str(ROOT)
    r = subprocess.run([PY, "-m", "kgen", "audit", "--engine", "sglang", str(FP8)], cwd=ROOT, env=env,
                       capture_output=True, text=True, check=False, timeout=300)
    assert r.returncode == 2 and "no importable sglang" in r.stderr and "Traceback" not in r.stderr


VLLM_FP4 = ROOT / "tests/fixtures/engines/vllm_indexer_fp4.yaml"


def test_vllm_fp4_cache_width_follows_the_imported_block_size():
    """0.33.0's fp4 cache width is `head_dim // 2 + head_dim // MXFP4_BLOCK_SIZE`, the constant
    imported from fused_indexer_q.py (kept in the tree): vLLM's own fp4 format audits clean, and
    SGLang's fp4 spec reports its three real differences, none of them unreadable."""
    root = releases.tree("vllm-0.33.0")
    code, results = audit("vllm", root, VLLM_FP4)
    assert code == 0 and all(r["ok"] for r in results), results
    code, (res,) = audit("vllm", root, FP4)
    assert code == 1 and sorted(e["rule"] for e in res["errors"]) == ["engine-pool", "engine-store", "engine-store"], \
        res["errors"]


def test_vllm_sm100_scale_slot_is_one_located_finding(tmp_path):
    """On SM100 (`mqa_logits_use_mx_scales()`) vLLM's fp8 keys hold four equal ue8m0 bytes in the
    scale slot: a vLLM-format spec that targets sm_100a gets exactly that one finding, located at
    the architecture check and naming the bytes; the same spec for sm_90a only, and vLLM's fp4
    format on sm_100a, stay clean."""
    root = releases.tree("vllm-0.33.0")
    fixture = ROOT / "tests/fixtures/engines/vllm_indexer_fp8.yaml"
    spec = tmp_path / "vllm_fp8_sm100.yaml"
    spec.write_text(fixture.read_text().replace("targets: [sm_90a]", "targets: [sm_90a, sm_100a]"))
    code, (res,) = audit("vllm", root, spec)
    assert code == 1 and len(res["errors"]) == 1, res["errors"]
    (e,) = res["errors"]
    assert e["rule"] == "engine-store" and e["file"] == str(root / "vllm/utils/deep_gemm.py") and e["line"] > 1
    assert "is_device_capability_family(" in (root / "vllm/utils/deep_gemm.py").read_text().splitlines()[e["line"] - 1]
    msg = e["message"]
    assert msg.startswith("on sm_100a ") and "page bytes 8192-8447, 4 B per token" in msg and "sm_90a" in msg
    assert "7f 7f 7f 7f" in msg and "00 00 80 3f" in msg
    assert audit("vllm", root, fixture)[0] == 0
    assert audit("vllm", root, VLLM_FP4)[0] == 0
    code, (res,) = audit("vllm", root, FP8)  # SGLang's fp8 (targets sm_90a, sm_100a, sm_120a): its 4, and this
    assert sum("on sm_100a " in e["message"] for e in res["errors"]) == 1 and len(res["errors"]) == 5


def test_vllm_scale_slot_check_that_moved_is_named_drift(tmp_path):
    """An architecture check kgen cannot find is a named engine-anchor error, not silence (the
    SM100 bytes would go unreported) and not a crash; the other sites are still audited."""
    root = tmp_path / "vllm"
    shutil.copytree(releases.tree("vllm-0.33.0"), root)
    dg = root / "vllm/utils/deep_gemm.py"
    dg.write_text(dg.read_text().replace("current_platform.is_device_capability_family(\n        100\n    )",
                                         "current_platform.is_blackwell()"))
    code, (res,) = audit("vllm", root, ROOT / "tests/fixtures/engines/vllm_indexer_fp8.yaml")
    assert code == 1 and [e["rule"] for e in res["errors"]] == ["engine-anchor"], res["errors"]
    assert "is_device_capability_family(<capability>) in mqa_logits_use_mx_scales" in res["errors"][0]["message"]
