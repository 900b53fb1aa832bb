"""`kgen audit` / `kgen patch` on engine fixture trees (tests/fixtures/engines/: our own minimal code in
the shape of SGLang's and vLLM's files, two SGLang generations). CPU only: patches are checked with
git apply, ast parses, imports with torch/deep_gemm stubbed, behaviour probes of the pool and the
memory budget with the flag on and off, AST comparisons; the GPU checks live in test_engines_gpu.py.
"""

from __future__ import annotations

import ast
import hashlib
import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from kgen.layout import compute
from kgen.reference import load_spec

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "engines"
SGLANG = ["sglang_v1", "sglang_v2"]  # runnable with stubbed imports: the behaviour probes use these
# sglang_v3: SGLang's current shape (read from its sources in the 2026-11-30 trial): flags in
# arg_groups/fields/exec_.py, the indexer factory called from a comprehension, a NamedTuple plan, the
# device store restating its page bytes, a non-paged guard that reads env switches first
SGLANG_ALL = [*SGLANG, "sglang_v3"]
BF16 = ROOT / "specs" / "indexer_bf16.yaml"
FP8 = ROOT / "specs" / "dsv4" / "indexer_fp8.yaml"
FP4 = ROOT / "specs" / "dsv4" / "indexer_fp4.yaml"
PY = sys.executable
FIVE = {  # the five places that restate the indexer's bytes per token, and where each lives
    "engine-pool": "srt/mem_cache/deepseek_v4_memory_pool.py",
    "engine-budget": "srt/model_executor/pool_configurator.py",
    "engine-store": "srt/layers/attention/dsv4/compressor_v2.py",
    "engine-reader": "srt/layers/attention/dsv4/indexer.py",
    "engine-kernel": "fused_norm_rope_v2.cuh",
}


def kgen(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "KGEN_CACHE_DIR": "/tmp/kgen-cache-test-engines"}
    return subprocess.run([PY, "-m", "kgen", *args], cwd=cwd, env=env, capture_output=True, text=True, check=False,
                          timeout=120)


def audit_json(root: Path, *specs: Path) -> tuple[int, dict]:
    r = kgen("audit", "--engine", "sglang", "--root", str(root), *map(str, specs), "--json")
    return r.returncode, json.loads(r.stdout)


@pytest.fixture
def tree(tmp_path):
    """tree(name) -> a private copy of a fixture tree, committed in a fresh git repo."""

    count = iter(range(100))

    def _copy(name: str) -> Path:
        dst = tmp_path / f"{next(count)}" / name
        shutil.copytree(FIXTURES / name, dst)
        if shutil.which("git"):
            for cmd in (["init", "-q"], ["add", "-A"],
                        ["-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "fixture"]):
                subprocess.run(["git", *cmd], cwd=dst, check=True, capture_output=True)
        return dst

    return _copy


def digest(root: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(root.rglob("*")):
        if p.is_file() and ".git" not in p.parts:
            h.update(str(p.relative_to(root)).encode() + b"\0" + p.read_bytes())
    return h.hexdigest()


def patched(tree_dir: Path, spec: Path = BF16) -> Path:
    r = kgen("patch", "--engine", "sglang", "--root", str(tree_dir), str(spec), "--apply")
    assert r.returncode == 0, r.stderr
    return tree_dir


# ---------------------------------------------------------------------------------------------
# audit


@pytest.mark.parametrize("name", SGLANG_ALL)
def test_shipped_fp8_audits_clean(name):
    code, out = audit_json(FIXTURES / name, FP8)
    assert code == 0, out
    (res,) = out["results"]
    assert res["ok"] and res["errors"] == [] and res["variant"] == "dsv4_indexer_fp8"


@pytest.mark.parametrize("name", SGLANG_ALL)
def test_bf16_reports_the_five_places(name):
    code, out = audit_json(FIXTURES / name, BF16)
    assert code == 1
    errors = out["results"][0]["errors"]
    by_rule: dict[str, list[dict]] = {}
    for e in errors:
        by_rule.setdefault(e["rule"], []).append(e)
    for rule, file in FIVE.items():
        assert rule in by_rule, f"{rule} missing: {[e['rule'] for e in errors]}"
        assert all(e["file"].endswith(file) for e in by_rule[rule]), by_rule[rule]
    lay = compute(load_spec(BF16))
    budget = by_rule["engine-budget"][0]
    assert "counts 132 B/token" in budget["message"] and f"{lay.bytes_per_token} B/token" in budget["message"]
    line = Path(budget["file"]).read_text().splitlines()[budget["line"] - 1]
    assert "indexer_bytes" in line or "indexer_head_dim" in line  # points at the budget's own expression
    kernel = next(e for e in by_rule["engine-kernel"] if "kIndexerBytes" in e["message"])
    assert f"{lay.page_bytes} vs 8448" in kernel["message"]
    assert "kIndexerBytes" in Path(kernel["file"]).read_text().splitlines()[kernel["line"] - 1]
    reader = by_rule["engine-reader"][0]
    assert "head_dim_with_sf" in Path(reader["file"]).read_text().splitlines()[reader["line"] - 1]
    assert {"engine-scorer", "engine-nonpaged", "engine-flag"} <= set(by_rule)


def test_human_output_is_located_and_exit_1():
    r = kgen("audit", "--engine", "sglang", "--root", str(FIXTURES / "sglang_v2"), str(BF16))
    assert r.returncode == 1
    assert "Traceback" not in r.stderr
    line = next(ln for ln in r.stderr.splitlines() if "error[engine-budget]" in ln)
    path, lineno, col = line.split(":")[:3]
    assert path.endswith("srt/model_executor/pool_configurator.py") and int(lineno) > 0 and int(col) > 0
    assert "(fix: kgen patch --engine sglang" in line
    assert r.stdout.strip().endswith("mismatch(es)")


def test_fp4_reads_the_engine_fp4_mode():
    """SGLang's own fp4 indexer agrees in both shapes: the older budget reserves the fp8 bytes
    whatever the flag, more than the fp4 pool takes (the engine's choice, not a mismatch)."""
    assert audit_json(FIXTURES / "sglang_v2", FP4)[0] == 0
    assert audit_json(FIXTURES / "sglang_v1", FP4)[0] == 0


def test_not_a_checkout_is_exit_2(tmp_path):
    r = kgen("audit", "--engine", "sglang", "--root", str(tmp_path), str(FP8))
    assert r.returncode == 2 and "is not a sglang checkout" in r.stderr and "Traceback" not in r.stderr
    r = kgen("audit", "--engine", "sglang", "--root", str(tmp_path / "nope"), str(FP8))
    assert r.returncode == 2
    r = kgen("audit", "--engine", "trt", "--root", str(FIXTURES / "sglang_v1"), str(FP8))
    assert r.returncode == 2 and "unknown engine" in r.stderr
    r = kgen("audit", "--engine", "sglang", "--root", str(FIXTURES / "sglang_v1"), str(tmp_path / "missing.yaml"))
    assert r.returncode == 2 and "Traceback" not in r.stderr


def test_drift_names_file_and_symbol(tree):
    root = tree("sglang_v2")
    pool = root / "python/sglang/srt/mem_cache/deepseek_v4_memory_pool.py"
    pool.write_text(pool.read_text().replace("def get_bytes_per_token", "def bytes_per_token"))
    r = kgen("audit", "--engine", "sglang", "--root", str(root), str(FP8))
    assert r.returncode == 1
    assert "error[engine-anchor]" in r.stderr and "DeepSeekV4IndexerPool.get_bytes_per_token" in r.stderr
    assert str(pool) in r.stderr
    before = digest(root)
    r = kgen("patch", "--engine", "sglang", "--root", str(root), str(BF16), "--apply")
    assert r.returncode == 1 and "DeepSeekV4IndexerPool.get_bytes_per_token" in r.stderr
    assert digest(root) == before  # nothing written


def test_drift_two_matches(tree):
    root = tree("sglang_v1")
    ind = root / "python/sglang/srt/layers/attention/dsv4/indexer.py"
    text = ind.read_text()
    ind.write_text(text.replace("        head_dim_with_sf = 68 if use_fp4_indexer else 132\n",
                                "        head_dim_with_sf = 68 if use_fp4_indexer else 132\n"
                                "        head_dim_with_sf = 132\n"))
    r = kgen("audit", "--engine", "sglang", "--root", str(root), str(FP8))
    assert r.returncode == 1 and "found 2" in r.stderr and "head_dim_with_sf" in r.stderr


def test_kernel_moved_between_generations_is_found():
    """jit_kernel/ (older) and kernels/jit/ (newer): each tree has one, and each audit reads it."""
    for name, part in (("sglang_v1", "jit_kernel/csrc"), ("sglang_v2", "kernels/jit/csrc"),
                       ("sglang_v3", "kernels/jit/csrc")):
        _, out = audit_json(FIXTURES / name, BF16)
        files = {e["file"] for e in out["results"][0]["errors"] if e["rule"] == "engine-kernel"}
        assert files and all(part in f for f in files)


# ---------------------------------------------------------------------------------------------
# patch


@pytest.mark.parametrize("name", SGLANG_ALL)
def test_patch_is_a_git_appliable_diff_and_leaves_the_tree(tree, name, tmp_path):
    root = tree(name)
    before = digest(root)
    r = kgen("patch", "--engine", "sglang", "--root", str(root), str(BF16))
    assert r.returncode == 0, r.stderr
    assert digest(root) == before  # without --apply nothing is touched
    diff = r.stdout
    assert diff.startswith("diff --git a/") and "\n+++ b/python/sglang/kgen_indexer/host.py" in diff
    if shutil.which("git"):
        (tmp_path / "p.diff").write_text(diff)
        subprocess.run(["git", "apply", "--check", str(tmp_path / "p.diff")], cwd=root, check=True)
        subprocess.run(["git", "apply", str(tmp_path / "p.diff")], cwd=root, check=True)
        # the applied diff is exactly what --apply writes
        other = tree(name)
        patched(other)
        assert digest(other) == digest(root)
    else:
        patched(root)
    for p in root.rglob("*.py"):
        ast.parse(p.read_text(), str(p))  # every touched (and new) file parses


def test_patch_to_file_and_json(tree, tmp_path):
    root = tree("sglang_v2")
    out = tmp_path / "kgen.diff"
    r = kgen("patch", "--engine", "sglang", "--root", str(root), str(BF16), "-o", str(out))
    assert r.returncode == 0 and r.stdout == "" and out.read_text().startswith("diff --git")
    r = kgen("patch", "--engine", "sglang", "--root", str(root), str(BF16), "--json")
    data = json.loads(r.stdout)
    assert data["variant"] == "dsv4_indexer_bf16" and data["diff"] == out.read_text()
    assert "python/sglang/srt/model_executor/pool_configurator.py" in data["files"]
    # SGLang's store passes a DecodePlan; a spec that reads positions is told so (not silently wired)
    assert [w["rule"] for w in data["warnings"]] == ["engine-store-plan"]


PLAN = ROOT / "specs/sglang/indexer_bf16_plan.yaml"


def test_a_plan_reading_spec_is_wired_without_a_warning(tree):
    """The spec that reads SGLang's DecodePlan: no engine-store-plan warning, the patched store hands
    the op the engine's plan, and the patched tree audits clean for it."""
    root = tree("sglang_v2")
    r = kgen("patch", "--engine", "sglang", "--root", str(root), str(PLAN), "--json")
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["variant"] == "dsv4_indexer_bf16_plan" and data["warnings"] == []
    patched(root, PLAN)
    code, out = audit_json(root, PLAN)
    assert code == 0, out


PROBE = textwrap.dedent('''
    import json, sys, types
    root, flag = sys.argv[1], sys.argv[2] == "on"
    shapes = []
    torch = types.ModuleType("torch")
    torch.uint8 = "uint8"
    def zeros(*shape, dtype=None, device=None):
        shapes.append(list(shape))
        return shape
    torch.zeros = zeros
    torch.ops = types.SimpleNamespace()
    sys.modules["torch"] = torch
    sys.modules["deep_gemm"] = types.ModuleType("deep_gemm")
    sys.path.insert(0, root + "/python")
    from sglang.srt import runtime_context, server_args
    args = server_args.ServerArgs()
    kernel = args.kernel
    if hasattr(kernel, "enable_kgen_indexer"):
        kernel.enable_kgen_indexer = flag
    runtime_context.set_exec(args)
    from sglang.srt.mem_cache.deepseek_v4_memory_pool import DeepSeekV4IndexerPool, DeepSeekV4TokenToKVPool
    from sglang.srt.model_executor.pool_configurator import DSV4PoolConfigurator
    import sglang.srt.layers.attention.dsv4.indexer, sglang.srt.layers.attention.dsv4.compressor_v2
    pool = object.__new__(DeepSeekV4IndexerPool)
    pool.index_head_dim, pool.use_fp4_indexer = 128, False
    if flag:
        pool.kgen_indexer = True
    elif hasattr(kernel, "enable_kgen_indexer"):
        pool.kgen_indexer = False
    pool.page_size, pool.size, pool.layer_num, pool.device = 64, 64 * 10, 2, "cpu"
    per_token = pool.get_bytes_per_token()
    pool._create_buffer()
    conf = object.__new__(DSV4PoolConfigurator)
    conf.qk_nope_head_dim, conf.qk_rope_head_dim, conf.indexer_head_dim = 448, 64, 128
    conf.num_layers_ca4, conf.swa_ratio = 30, 0.1
    full = DeepSeekV4TokenToKVPool(size=4 * 640, page_size=256, dtype="bf16", indexer_head_dim=128, layer_num=1,
                                   device="cpu")
    print(json.dumps({"bytes_per_token": per_token, "pages": shapes[0], "budget": conf._get_bytes_per_full_token(),
                      "pool_page_bytes": shapes[-1][1]}))
''')


def probe(root: Path, flag: bool) -> dict:
    r = subprocess.run([PY, "-c", PROBE, str(root), "on" if flag else "off"], capture_output=True, text=True,
                       check=False, timeout=60, env={"PATH": "/usr/bin:/bin"})
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_apply_writes_all_or_nothing(tree, monkeypatch):
    from kgen.diagnostics import KgenError
    from kgen.engines import commands
    from kgen.engines.tree import EngineTree

    root = tree("sglang_v2")
    before = digest(root)
    from kgen import files

    real = files.os.replace
    calls = []

    def flaky(src, dst):
        calls.append(dst)
        if len(calls) == 3:
            raise OSError("disk full")
        real(src, dst)

    monkeypatch.setattr(files.os, "replace", flaky)
    files = {"python/sglang/a.py": "a = 1\n", "python/sglang/srt/server_args.py": "x = 2\n",
             "python/sglang/c.py": "c = 3\n"}
    with pytest.raises(KgenError):
        commands.write_all(EngineTree(root), files)
    assert digest(root) == before
    assert not list(root.rglob(".*.tmp"))  # no staged files left behind


# ---------------------------------------------------------------------------------------------
# SGLang's current shape (sglang_v3): what the trial against SGLang's own files needed


V3 = FIXTURES / "sglang_v3"


def test_current_shape_audit_names_the_device_store_and_reads_the_guard():
    """bf16: the flag's class in arg_groups/fields/exec_.py and the device store's own page shift are
    named too. fp4: SGLang's budget restates 132 B whatever the flag (its one finding); the non-paged
    guard, which reads environment switches before it excludes fp4, is understood to be off."""
    _, out = audit_json(V3, BF16)
    errors = out["results"][0]["errors"]
    flag = next(e for e in errors if e["rule"] == "engine-flag")
    assert flag["file"].endswith("srt/arg_groups/fields/exec_.py") and "ExecKernel" in flag["message"]
    device = [e for e in errors if "fused_norm_rope_indexer addresses" in e["message"]]
    assert len(device) == 1 and "132 << kPageBits = 8448 B" in device[0]["message"]
    assert "kPageBytes = 132ll << kPageBits" in Path(device[0]["file"]).read_text().splitlines()[device[0]["line"] - 1]
    assert audit_json(V3, FP4)[0] == 0


PLAN_PROBE = textwrap.dedent('''
    import json, sys, types
    root = sys.argv[1]
    calls = []
    torch = types.ModuleType("torch")
    torch.ops = types.SimpleNamespace(kgen=types.SimpleNamespace(
        norm_rope_store=lambda *args: calls.append([getattr(a, "tag", repr(a)) for a in args])))
    sys.modules["torch"] = torch
    kgen_pkg, kgen_ops = types.ModuleType("kgen"), types.ModuleType("kgen.ops")
    kgen_pkg.ops = kgen_ops
    sys.modules["kgen"], sys.modules["kgen.ops"] = kgen_pkg, kgen_ops
    sys.path.insert(0, root + "/python")

    class T:
        def __init__(self, tag):
            self.tag = tag
        def is_complex(self):
            return False

    from sglang import kgen_indexer
    from sglang.kernels.ops.attention.dsv4.compress import CompressorDecodePlan, CompressorPrefillPlan
    from sglang.srt.runtime_context import get_exec
    kernel = get_exec().kernel
    flags = [kgen_indexer.enabled()]
    kernel.enable_kgen_indexer = True
    flags.append(kgen_indexer.enabled())
    kernel.enable_deepseek_v4_fp4_indexer = True
    try:
        flags.append(kgen_indexer.enabled())
    except ValueError as e:
        flags.append(str(e))
    kgen_indexer.store(T("x"), CompressorDecodePlan(4, T("plan_d")), T("w"), T("freqs"), T("out_loc"), T("cache"))
    kgen_indexer.store(T("x"), CompressorPrefillPlan(4, T("plan_c"), T("plan_w")), T("w"), T("freqs"),
                       T("out_loc"), T("cache"))
    try:
        kgen_indexer.store(T("x"), CompressorPrefillPlan(128, T("plan_c"), T("plan_w")), T("w"), T("freqs"),
                           T("out_loc"), T("cache"))
        ratio = "stored"
    except ValueError as e:
        ratio = str(e)
    print(json.dumps({"calls": calls, "ratio": ratio, "flags": flags}))
''')


def test_patched_prefill_spec_is_the_variant_reading_the_compress_plan(tree):
    """The bundle's prefill twin stores the variant's bytes: resolved by kgen's op from the engine
    tree, it has the variant's layout and reads CompressPlan rows; on SGLang-shaped prefill plans the
    op (CPU) writes what the variant's reference writes at the plan's positions and slots."""
    torch = pytest.importorskip("torch")
    from kgen import inputs as I
    from kgen import layout as L
    from kgen import ops
    from kgen import reference as R
    from kgen.abi import NORM_ROPE_STORE

    root = patched(tree("sglang_v3"), PLAN)
    pkg = root / "python/sglang/kgen_indexer"
    variant, twin = ops.resolve(str(pkg / "spec.yaml")).spec, ops.resolve(str(pkg / "spec_prefill.yaml")).spec
    assert variant.positions.source == "decode_plan" and twin.positions.source == "compress_plan"
    assert twin.name == f"{variant.name}_prefill"
    same = {"name", "description", "positions"}
    assert twin.model_dump(exclude=same) == variant.model_dump(exclude=same)
    assert L.compute(twin).page_bytes == L.compute(variant).page_bytes
    inp = I.make_inputs(twin, 129, seed=7)
    args = tuple(v for k, v in NORM_ROPE_STORE.arguments(twin, inp).items() if k != "cache")
    got = inp["cache"].clone()
    ops.norm_rope_store(str(pkg / "spec_prefill.yaml"), *args, got)
    pos, slots = R.compress_plan_slots(twin, inp["positions"], inp["out_loc"])
    arr = variant.model_copy(update={"positions": variant.positions.model_copy(update={"source": "array"})})
    want = inp["cache"].clone()
    R.norm_rope_store(arr, inp["x"], inp["weight"], None, inp["freqs"], pos, slots, want)
    assert torch.equal(got, want) and not torch.equal(got, inp["cache"])


def test_drift_in_one_site_leaves_the_others_audited(tree):
    """One moved anchor is named (file and symbol) and every other site is still audited; a patch
    names the same drift and writes nothing."""
    root = tree("sglang_v3")
    fields = root / "python/sglang/srt/arg_groups/fields/exec_.py"
    fields.write_text(fields.read_text().replace("enable_deepseek_v4_fp4_indexer", "use_fp4_c4_indexer"))
    code, out = audit_json(root, BF16)
    rules = [e["rule"] for e in out["results"][0]["errors"]]
    assert code == 1 and rules.count("engine-anchor") == 1
    assert set(FIVE) <= set(rules)
    anchor = next(e for e in out["results"][0]["errors"] if e["rule"] == "engine-anchor")
    assert "enable_deepseek_v4_fp4_indexer" in anchor["message"] and "arg_groups/fields/*.py" in anchor["message"]
    before = digest(root)
    r = kgen("patch", "--engine", "sglang", "--root", str(root), str(BF16), "--apply")
    assert r.returncode == 1 and "enable_deepseek_v4_fp4_indexer" in r.stderr and digest(root) == before


# ---------------------------------------------------------------------------------------------
# vLLM


VLLM = FIXTURES / "vllm"
VLLM_SPEC = FIXTURES / "vllm_indexer_fp8.yaml"


def vllm_audit(*specs: Path) -> tuple[int, list[dict]]:
    r = kgen("audit", "--engine", "vllm", "--root", str(VLLM), *map(str, specs), "--json")
    return r.returncode, [e for res in json.loads(r.stdout)["results"] for e in res["errors"]]


def test_vllm_own_layout_audits_clean():
    assert vllm_audit(VLLM_SPEC) == (0, [])


def test_vllm_pads_pages_to_576():
    """SGLang's fp8 page (8448 B) is not vLLM's (8640 B): kgen's layout of the spec, padded to the
    alignment vLLM asks for, says so; the writer's pow2 scales and missing Hadamard are named too."""
    code, errors = vllm_audit(FP8)
    assert code == 1
    page = [e for e in errors if e["rule"] == "engine-pool"]
    assert len(page) == 1 and "8640 B" in page[0]["message"] and "8448 B" in page[0]["message"]
    assert "page_align: 576" in page[0]["fix"]
    assert "alignment=576" in Path(page[0]["file"]).read_text().splitlines()[page[0]["line"] - 1]
    store = [e for e in errors if e["rule"] == "engine-store"]
    assert any("Hadamard" in e["message"] for e in store) and any("fp32_pow2" in e["message"] for e in store)
    # the writer is called through a local bound to the Triton kernel: the finding is at that call
    assert all("store_fn(" in Path(e["file"]).read_text().splitlines()[e["line"] - 1] for e in store)
    assert not [e for e in errors if e["rule"] in ("engine-dtype", "engine-scorer")]  # fp8 bytes: readable


def test_vllm_bf16_gate_and_scorer():
    code, errors = vllm_audit(BF16)
    rules = {e["rule"] for e in errors}
    assert code == 1 and {"engine-pool", "engine-dtype", "engine-scorer", "engine-store"} <= rules
    gate = next(e for e in errors if e["rule"] == "engine-dtype")
    assert gate["file"].endswith("v1/attention/backends/mla/indexer.py") and "fp8, mxfp4" in gate["message"]


def test_vllm_older_model_path_is_still_read(tmp_path):
    """The model package moved from model_executor/models/ to vllm/models/: both are read."""
    root = tmp_path / "vllm"
    shutil.copytree(VLLM, root)
    (root / "vllm/model_executor/models").mkdir()
    shutil.move(root / "vllm/models/deepseek_v4", root / "vllm/model_executor/models/deepseek_v4")
    r = kgen("audit", "--engine", "vllm", "--root", str(root), str(VLLM_SPEC))
    assert r.returncode == 0, r.stderr


def test_vllm_patch_refuses_a_variant_it_cannot_wire(tree):
    """vLLM's compress_pool hands the store bf16 rows and pads pages to 576 B: an fp32-input spec
    with 16384-B pages is refused with both reasons, located at the spec, nothing written."""
    r = kgen("patch", "--engine", "vllm", "--root", str(VLLM), str(BF16))
    assert r.returncode == 1 and r.stdout == "" and "Traceback" not in r.stderr
    assert "compress_pool" in r.stderr and "page_align: 576" in r.stderr and str(BF16) in r.stderr


def test_a_family_audits_its_indexer_variants_and_names_the_others():
    code, out = audit_json(FIXTURES / "sglang_v2", ROOT / "specs" / "dsv4.yaml")
    assert code == 1
    by_variant = {r["variant"]: r for r in out["results"]}
    assert by_variant["dsv4_indexer_fp8"]["ok"] and by_variant["dsv4_indexer_fp4"]["ok"]
    assert not by_variant["dsv4_indexer_bf16"]["ok"]
    latent = [r for name, r in by_variant.items() if "latent" in name]
    assert latent and all(r["ok"] and r["skipped"] and r["errors"] == [] for r in latent)


ROUTING_PROBE = textwrap.dedent('''
    import json, sys, types
    root, flag = sys.argv[1], sys.argv[2] == "on"
    calls = []

    class Recorder:
        def __init__(self, ns):
            self.ns = ns
        def __getattr__(self, name):
            def op(*args):
                calls.append([self.ns + "." + name, [getattr(a, "tag", repr(a)) for a in args]])
                return T("out:" + name)
            return op

    class T:
        def __init__(self, tag, shape=(8, 16384)):
            self.tag, self.shape = tag, shape
        def is_complex(self):
            return False
        def dim(self):
            return len(self.shape)
        def view(self, *shape):
            return T(self.tag + ".view" + repr(tuple(shape)), shape)
        def unsqueeze(self, d):
            return T(self.tag + ".unsqueeze", self.shape)

    torch = types.ModuleType("torch")
    torch.uint8 = "uint8"
    torch.ops = types.SimpleNamespace(sgl_kernel=Recorder("sgl_kernel"), kgen=Recorder("kgen"))
    sys.modules["torch"] = torch
    kgen_pkg, kgen_ops = types.ModuleType("kgen"), types.ModuleType("kgen.ops")
    kgen_pkg.ops = kgen_ops
    sys.modules["kgen"], sys.modules["kgen.ops"] = kgen_pkg, kgen_ops
    deep_gemm = types.ModuleType("deep_gemm")
    for name in ("fp8_paged_mqa_logits", "fp8_fp4_paged_mqa_logits", "fp8_mqa_logits"):
        setattr(deep_gemm, name, (lambda n: lambda *a: calls.append(["deep_gemm." + n, []]) or T(n))(name))
    sys.modules["deep_gemm"] = deep_gemm
    sys.path.insert(0, root + "/python")
    from sglang.srt import runtime_context, server_args
    args = server_args.ServerArgs()
    if hasattr(args.kernel, "enable_kgen_indexer"):
        args.kernel.enable_kgen_indexer = flag
    runtime_context.set_exec(args)
    from sglang.srt.layers.attention.dsv4.compressor_v2 import CompressorBackendMixin
    from sglang.srt.layers.attention.dsv4.indexer import C4IndexerBackendMixin

    ns = types.SimpleNamespace
    comp = object.__new__(CompressorBackendMixin)
    comp._get_paged_compress_metadata = lambda ratio: T("plan")
    comp._get_out_loc = lambda ratio: T("out_loc")
    comp.latent_bf16 = False
    norm = ns(weight=T("norm.weight"), variance_epsilon=1e-6)
    for is_indexer in (True, False):
        comp._forward_compress_all_in_one(kv_score_buffer=T("state"), kv_score_input=T("kv_score"), ape=T("ape"),
                                          norm=norm, freqs_cis_cache=T("freqs"), kv_cache=T("kv_cache"), page_size=64,
                                          compress_ratio=4, is_indexer=is_indexer)
    reader = object.__new__(C4IndexerBackendMixin)
    reader.skip_scoring = False
    reader.nonpaged_max_len = 100  # short sequences: the engine would take its fp8 non-paged path
    batch = ns(forward_mode=ns(is_extend=lambda: True), max_c4_seq_len=10)
    pool = ns(get_index_k_with_scale_buffer=lambda layer: T("index_k"))
    meta = ns(c4_seq_lens=T("seq_lens"), page_table=T("page_table"), deep_gemm_metadata=T("dg"), max_c4_seq_len=77)
    reader.forward_c4_indexer(T("q"), T("weights"), ns(use_fp4_indexer=False, layer_id=0), batch, pool, meta)
    print(json.dumps(calls))
''')


def test_page_size_mismatch_is_named_at_the_factory_and_the_view(tmp_path):
    spec = tmp_path / "p128.yaml"
    spec.write_text(FP8.read_text().replace("name: dsv4_indexer_fp8", "name: idx_fp8_p128")
                    .replace("page_size: 64", "page_size: 128").replace("page_bytes: 8448", "page_bytes: 16896"))
    for name in SGLANG:
        code, out = audit_json(FIXTURES / name, spec)
        errors = out["results"][0]["errors"]
        assert code == 1 and sorted(e["rule"] for e in errors) == ["engine-page-size", "engine-reader"], errors
        assert all("64 tokens" in e["message"] and "128" in e["message"] for e in errors)
