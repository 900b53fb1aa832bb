"""`kgen render`: generated/ is reproduced byte for byte, invalid specs write nothing, StrictUndefined,
every shipped variant compiles without spills, every rule with twin=True has a static_assert that
fires with its id under --no-validate, and the dispatch tables (C++ and Python) select and refuse."""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import KGEN
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kgen.diagnostics import KgenError
from kgen.load import load_document
from kgen.reader_layout import readable
from kgen.render import (
    RenderedVariant,
    environment,
    include_dirs,
    render_all,
    render_document,
    render_paths,
    render_variant,
)
from kgen.rules import RULES, check_variant
from kgen.spec import Spec
from strategies import ROOT, base_spec, clone, fp4_spec, fp8_spec, packed_latent_spec, valid_specs, write_yaml

SPECS = sorted((ROOT / "specs").glob("*.yaml"))
GENERATED = ROOT / "generated"
TWINS = sorted(r.id for r in RULES.values() if r.twin)
ASSERT_RE = re.compile(r'static assertion failed with "\[([a-z0-9-]+)\]')


def shipped_specs() -> list[Spec]:
    seen = {}
    for p in SPECS:
        for v in load_document(p).variants:
            seen.setdefault(v.spec.name, v.spec)
    return [seen[k] for k in sorted(seen)]


def tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


# ---------------------------------------------------------------------------------------------
# compile helper (kgen.compile, through a per-session cache)


@pytest.fixture(scope="session")
def cache(tmp_path_factory):
    from kgen.cache import Cache

    return Cache(tmp_path_factory.mktemp("render-cache"))


def compile_rv(rv: RenderedVariant, cache, arch: str = "sm_90a"):
    """(CompiledKernel or None, full NVRTC log)."""
    from kgen.compile import CompileError, compile_rendered

    try:
        k = compile_rendered(rv, arch, cache=cache, progress=None)
        return k, k.log
    except CompileError as e:
        return None, e.log


def fired(log: str) -> set[str]:
    return set(ASSERT_RE.findall(log))


def twin_errors(spec: Spec) -> set[str]:
    _, problems = check_variant(spec)
    return {p.rule for p in problems if p.severity == "error" and RULES[p.rule].twin}


# ---------------------------------------------------------------------------------------------
# generated/ and the writer


def test_generated_is_reproduced_byte_for_byte(tmp_path):
    out = tmp_path / "gen"
    written = render_paths(SPECS, out)
    assert sorted(written) == sorted(p for p in out.rglob("*") if p.is_file())
    assert tree(out) == tree(GENERATED), "generated/ is stale: run `.venv/bin/kgen render specs/*.yaml`"


def test_cli_render_matches_generated(tmp_path):
    out = tmp_path / "cli"
    r = subprocess.run([str(KGEN), "render", *map(str, SPECS), "-o", str(out)],
                       capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    assert tree(out) == tree(GENERATED)


def test_render_is_deterministic_and_leaves_equal_files_alone(tmp_path):
    out = tmp_path / "gen"
    render_paths(SPECS, out)
    first = {p: p.stat().st_mtime_ns for p in out.rglob("*") if p.is_file()}
    render_paths(SPECS, out)
    assert {p: p.stat().st_mtime_ns for p in out.rglob("*") if p.is_file()} == first
    assert not list(out.rglob("*.tmp"))


def test_invalid_spec_writes_nothing(tmp_path):
    bad = clone(fp4_spec())
    bad["store"]["scale"] = "fp32"
    write_yaml(tmp_path / "bad.yaml", bad)
    out = tmp_path / "out"
    with pytest.raises(KgenError) as e:
        render_paths([*SPECS, tmp_path / "bad.yaml"], out)
    assert not out.exists()
    assert any(p.rule == "store-scale" and p.line is not None for p in e.value.problems)
    r = subprocess.run([str(KGEN), "render", *map(str, SPECS), str(tmp_path / "bad.yaml"),
                        "-o", str(out)], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 1 and "error[store-scale]" in r.stderr and "Traceback" not in r.stderr
    assert not out.exists()


def test_missing_file_writes_nothing(tmp_path):
    out = tmp_path / "out"
    with pytest.raises(KgenError) as e:
        render_paths([*SPECS, tmp_path / "nope.yaml"], out)
    assert e.value.exit_code == 2
    assert not out.exists()


def test_unexpressible_values_raise_located_errors(tmp_path):
    s = base_spec()
    s["norm"]["eps"] = 1e300  # finite as a double, inf as fp32
    write_yaml(tmp_path / "eps.yaml", s)
    for validate in (True, False):
        with pytest.raises(KgenError) as e:
            render_paths([tmp_path / "eps.yaml"], tmp_path / "out", validate=validate)
        p = e.value.problems[0]
        assert p.rule == "norm-eps" and p.line is not None, p
    s = base_spec()
    s["layout"]["page_align"] = 10**30
    write_yaml(tmp_path / "big.yaml", s)
    with pytest.raises(KgenError) as e:
        render_paths([tmp_path / "big.yaml"], tmp_path / "out", validate=False)
    assert e.value.problems[0].line is not None
    assert not (tmp_path / "out").exists()


def test_bad_names_are_refused_even_without_validation(tmp_path):
    s = base_spec()
    s["name"] = "../escape"
    write_yaml(tmp_path / "n.yaml", s)
    with pytest.raises(KgenError) as e:
        render_paths([tmp_path / "n.yaml"], tmp_path / "out", validate=False)
    assert e.value.problems[0].rule == "name"
    assert not (tmp_path / "out").exists() and not (tmp_path / "escape").exists()


def test_strict_undefined_catches_a_missing_variable():
    import jinja2

    env = environment()
    assert env.undefined is jinja2.StrictUndefined and env.keep_trailing_newline
    with pytest.raises(jinja2.UndefinedError):
        env.from_string("{{ missing }}").render()
    with pytest.raises(jinja2.UndefinedError):  # a real template with one value left out
        env.get_template("variant/kernel.cu.j2").render(uri="x", banner="", description="", input_dtype="fp32",
                                                        constants=[], kernel="norm_rope_store")


# ---------------------------------------------------------------------------------------------
# the API


def test_render_variant_api():
    for spec in shipped_specs():
        rv = render_variant(spec)
        assert rv.uri == spec.name
        assert rv.kernel_file == f"{spec.name}/kernel.cu" and rv.kernel_file in rv.files
        assert rv.name_expression == f"kgen::norm_rope_store<kgen_cfg::{spec.name}>"
        # the read side (docs/ops.md): the reader and its top-k
        reader = ("logits_config.cuh", "indexer_logits.cu", "topk_config.cuh", "indexer_topk.cu",
                  "topk_slots_config.cuh", "indexer_topk_slots.cu") if readable(spec) else ()
        assert set(rv.files) == {f"{spec.name}/{f}" for f in ("config.cuh", "kernel.cu", "host.h", "host.py", *reader)}
        cu, cfg = rv.files[rv.kernel_file], rv.files[f"{spec.name}/config.cuh"]
        # FlashInfer's split: the config header holds the struct, the .cu only includes it and
        # instantiates the kernel once
        assert f"struct {spec.name} {{" in cfg and "#include <kgen/norm_rope_store.cuh>" in cfg
        assert '#include "config.cuh"' in cu and f"struct {spec.name}" not in cu
        assert cu.count("template __global__") == 1 and len(cu.splitlines()) <= 20
        # the kernel's address for nvcc builds is outside NVRTC's view (the cubin is the instantiation alone)
        assert cu.index("#ifndef __CUDACC_RTC__") > cu.index("template __global__")


def test_include_dirs_hold_only_real_headers():
    dirs = include_dirs()
    assert dirs and all(d.is_dir() for d in dirs)
    files = [p for d in dirs for p in d.rglob("*") if p.is_file()]
    assert files and all(p.suffix in (".cuh", ".h") for p in files)
    assert any(p.name == "norm_rope_store.cuh" for p in files)


def test_render_document_of_a_family_has_tables_and_every_variant():
    doc = load_document(ROOT / "specs" / "dsv4.yaml")
    files = dict(render_document(doc))
    assert list(files) == sorted(files)
    assert "dsv4_fused_norm_rope/select_kernel.h" in files and "dsv4_fused_norm_rope/select_kernel.py" in files
    for v in doc.variants:
        assert f"{v.spec.name}/kernel.cu" in files


def test_host_constants_come_from_layout(tmp_path):
    from kgen import layout as L

    render_paths(SPECS, tmp_path)
    for spec in shipped_specs():
        mod = _import(tmp_path / spec.name / "host.py")
        lay = L.compute(spec)
        for k, v in L.host_constants(lay).items():
            assert getattr(mod, k) == v, (spec.name, k)
        assert mod.NAME == spec.name and mod.REGIONS == tuple((r.name, r.offset, r.size) for r in lay.regions())
        assert mod.ROW_PARTS == tuple((r.name, r.offset, r.size) for r in lay.row_parts())
        h = (tmp_path / spec.name / "host.h").read_text()
        assert f"kPageBytes = {lay.page_bytes};" in h and f"kBytesPerToken = {lay.bytes_per_token};" in h


# ---------------------------------------------------------------------------------------------
# dispatch tables


def _import(path: Path):
    spec = importlib.util.spec_from_file_location(f"kgen_test_{path.parent.name}_{path.stem}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_python_select_kernel(tmp_path):
    from kgen.family import variant_key

    render_paths([ROOT / "specs" / "dsv4.yaml"], tmp_path)
    mod = _import(tmp_path / "dsv4_fused_norm_rope" / "select_kernel.py")
    doc = load_document(ROOT / "specs" / "dsv4.yaml")
    key = doc.family.dispatch.key
    assert mod.KEY == tuple(key)
    for v in doc.variants:
        assert mod.select_kernel(*variant_key(v.spec, key)) == v.spec.name
        assert mod.CONSTANTS[v.spec.name]["PAGE_BYTES"] > 0
    assert mod.select_kernel(input_dtype="fp32", head_dim=128, store_dtype="bf16", store_scale="none",
                             layout_page_size=64) == "dsv4_indexer_bf16"
    with pytest.raises(KeyError) as e:
        mod.select_kernel("fp32", 128, "bf16", "none", 32)
    text = str(e.value)
    assert "layout.page_size: 32" in text and "supported keys" in text and "store.dtype: fp4_e2m1" in text
    with pytest.raises(KeyError):
        mod.select_kernel("fp32", "128", "bf16", "none", 64)  # strict types, as the validator


FAMILY_KEY = "s::InputDtype::fp32, 128, s::StoreDtype::{dtype}, s::StoreScale::{scale}, {page}"


def _select_main(tmp_path: Path, body: str, *objs: str, nvcc_view: bool = False) -> subprocess.CompletedProcess:
    """Build and run a C++ main that includes dsv4.yaml's rendered select_kernel.h (`s::` is its
    namespace) with only the rendered dir on the include path, linked with `objs`."""
    main = tmp_path / "main.cc"
    main.write_text(("#define __CUDACC__ 1\n" if nvcc_view else "")
                    + '#include "dsv4_fused_norm_rope/select_kernel.h"\n#include <cstdio>\n'
                    + "namespace s = kgen_select::dsv4_fused_norm_rope;\nint main() {\n" + body + "}\n")
    exe = tmp_path / "main"
    r = subprocess.run(["g++", "-std=c++17", "-Wall", "-Werror", "-I", str(tmp_path), str(main), *objs, "-pthread",
                        "-o", str(exe)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
    return subprocess.run([str(exe)], capture_output=True, text=True)


@pytest.mark.skipif(shutil.which("g++") is None, reason="no host C++ compiler")
def test_cxx_select_kernel_host_only(tmp_path):
    render_paths([ROOT / "specs" / "dsv4.yaml"], tmp_path)
    bf16 = FAMILY_KEY.format(dtype="bf16", scale="none", page=64)
    r = _select_main(tmp_path, (
        f"  const auto& e = s::select_kernel({{{bf16}}});\n"
        '  std::printf("%s %lld %d\\n", e.uri, e.page_bytes, e.kernel == nullptr);\n'
        f"  try {{ s::select_kernel({{{FAMILY_KEY.format(dtype='bf16', scale='none', page=32)}}}); }}\n"
        '  catch (const std::invalid_argument& x) { std::printf("%s\\n", x.what()); }\n'
        "  s::StoreDtype d;\n"
        '  if (!s::parse("fp8_e4m3", d) || d != s::StoreDtype::fp8_e4m3 || s::parse("fp8_e5m2", d)) return 2;\n'
        '  if (std::string(s::name(s::StoreScale::ue8m0)) != "ue8m0") return 3;\n'
        "  return kgen_host::dsv4_indexer_fp8::kPageBytes == 8448 ? 0 : 1;\n"))
    assert r.returncode == 0
    first, second = r.stdout.splitlines()[:2]
    assert first == "dsv4_indexer_bf16 16384 1"
    assert "no variant for {input_dtype: fp32, head_dim: 128, store.dtype: bf16, store.scale: none, " \
           "layout.page_size: 32}" in second and "supported keys" in second


def _clang_format() -> str | None:
    """The pinned clang-format of the lint extra (beside this Python), else one on PATH."""
    import sys

    beside = Path(sys.executable).parent / "clang-format"
    return str(beside) if beside.exists() else shutil.which("clang-format")


@pytest.mark.skipif(_clang_format() is None, reason="no clang-format (pip install -e '.[lint]')")
def test_rendered_cxx_passes_clang_format(tmp_path):
    """Every C++ file kgen renders is already formatted by the project's .clang-format (ColumnLimit 120),
    for the shipped specs and for names, descriptions and dispatch keys at their longest."""
    long_name = "v" * 64
    spec = {**base_spec(), "name": long_name, "description": "a description " * 20}
    fam = {"kgen": 1, "family": "f" * 64, "description": "d " * 80,
           "variants": [{**base_spec(), "name": "a" * 63 + "1", "input_dtype": "bf16"},
                        {**base_spec(), "name": "a" * 63 + "2"}],
           "dispatch": {"key": ["input_dtype", "head_dim", "store.dtype", "store.scale", "layout.page_size",
                                "rope.style", "norm.kind", "hadamard", "name"]}}
    write_yaml(tmp_path / "long.yaml", spec)
    write_yaml(tmp_path / "fam.yaml", fam)
    files = render_all([*SPECS, tmp_path / "long.yaml", tmp_path / "fam.yaml"])
    out = tmp_path / "out"
    cxx = [rel for rel in files if rel.endswith((".h", ".cu", ".cuh")) and not rel.startswith("include/")]
    assert any(rel.startswith("f" * 64) for rel in cxx) and f"{long_name}/config.cuh" in cxx
    for rel in cxx:
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        (out / rel).write_text(files[rel])
    r = subprocess.run([_clang_format(), f"--style=file:{ROOT / '.clang-format'}", "--dry-run", "-Werror",
                        *(str(out / rel) for rel in cxx)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-4000:]


@pytest.mark.skipif(shutil.which("g++") is None, reason="no host C++ compiler")
def test_cxx_select_kernel_links_kernels_it_does_not_instantiate(tmp_path):
    """What an nvcc build sees (__CUDACC__): the table's kernel pointers come from each variant's
    kernel.cu, compiled once and linked; the table itself includes no kernel header (the including
    unit compiles without the kgen headers on its include path). Host compilers stand in for nvcc:
    kernel.cu builds against the CPU shim."""
    render_paths([ROOT / "specs" / "dsv4.yaml"], tmp_path)
    objs = []
    for v in load_document(ROOT / "specs" / "dsv4.yaml").variants:
        obj = tmp_path / f"{v.spec.name}.o"
        subprocess.run(["g++", "-std=c++20", "-c", "-w", "-I", str(ROOT / "tests" / "cpu_shim"), "-I",
                        str(tmp_path / "include"), "-x", "c++", str(tmp_path / v.spec.name / "kernel.cu"),
                        "-o", str(obj)], check=True, capture_output=True, text=True)
        objs.append(str(obj))
    fp8 = FAMILY_KEY.format(dtype="fp8_e4m3", scale="fp32", page=64)
    r = _select_main(tmp_path, f"  const auto& e = s::select_kernel({{{fp8}}});\n"
                     "  return e.kernel != nullptr && e.kernel == kgen_kernels::dsv4_indexer_fp8() ? 0 : 1;\n",
                     *objs, nvcc_view=True)
    assert r.returncode == 0


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="no nvcc")
def test_cxx_select_kernel_under_nvcc(tmp_path):
    """Under nvcc the table holds the kernel pointers (the headers compile outside NVRTC too)."""
    render_paths([ROOT / "specs" / "dsv4.yaml"], tmp_path)
    main = tmp_path / "main.cu"
    main.write_text('#include "dsv4_fused_norm_rope/select_kernel.h"\n'
                    "namespace s = kgen_select::dsv4_fused_norm_rope;\n"
                    "const void* pick() { return s::select_kernel(\n"
                    "    {s::InputDtype::fp32, 128, s::StoreDtype::fp8_e4m3, s::StoreScale::fp32, 64}).kernel; }\n")
    r = subprocess.run(["nvcc", "-std=c++17", "-arch=sm_90a", "--fmad=false", "-c", "-I", str(tmp_path),
                        "-I", str(tmp_path / "include"), str(main), "-o", str(tmp_path / "main.o")],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]


# ---------------------------------------------------------------------------------------------
# compiling: the shipped variants, registers and spills


@pytest.mark.parametrize("spec", shipped_specs(), ids=lambda s: s.name)
def test_shipped_variant_compiles_for_sm90a_without_spills(spec, cache):
    k, log = compile_rv(render_variant(spec), cache)
    assert k is not None, log
    assert k.registers is not None and k.registers <= 255
    assert k.spill_bytes == 0 and k.stack_bytes == 0, log
    assert not fired(log)


# ---------------------------------------------------------------------------------------------
# twins: each twin rule, broken alone, renders under --no-validate and fails to compile with its id


def _case(base, **changes):
    d = clone(base)
    for path, value in changes.items():
        node = d
        *parents, last = path.split("__")
        for p in parents:
            node = node.setdefault(p, {})
        node[last] = value
    return d


TWIN_CASES = {
    "head-dim": [(_case(base_spec(), head_dim=96, rope__dim=0, hadamard=False), {"head-dim"})],
    "rope-dim": [(_case(base_spec(), rope__dim=-4), {"rope-dim"})],
    "rope-lanes": [(_case(base_spec(), rope__dim=4, rope__style="neox"), {"rope-lanes"})],
    "hadamard": [(_case(base_spec(), head_dim=96, rope__dim=0, hadamard=True), {"head-dim", "hadamard"})],
    "norm-eps": [(_case(base_spec(), norm__eps=0.0), {"norm-eps"}),
                 (_case(base_spec(), norm__eps=float("nan")), {"norm-eps"}),
                 (_case(base_spec(), norm__eps=1e-50), {"norm-eps"})],  # 0 as fp32
    "store-scale": [(_case(base_spec(), store__scale="fp32"), {"store-scale"}),
                    (_case(fp4_spec(), store__block=64), {"store-scale"})],
    "store-block": [(_case(fp8_spec(), store__block=48), {"store-block"}),
                    (_case(base_spec(), store__block=0), {"store-block"})],  # no scale: formerly [layout]
    "store-rope-dtype": [(_case(base_spec(), store__rope_dtype="bf16"), {"store-rope-dtype"})],
    "store-amax-floor": [(_case(fp8_spec(), store__amax_floor=0.0), {"store-amax-floor"})],
    "page-size": [(_case(base_spec(), layout__page_size=48), {"page-size"})],
    "scale-stride": [(_case(fp8_spec(), layout__scale_stride=2), {"scale-stride"})],
    "layout-align": [(_case(packed_latent_spec(), layout__page_size=1, layout__page_align=1), {"layout-align"}),
                     (_case(fp4_spec(), head_dim=32, rope__dim=0, hadamard=False), {"layout-align"})],
    "page-align": [(_case(base_spec(), layout__page_align=0), {"page-align"}),
                   (_case(base_spec(), layout__page_align=2**31), {"page-align"})],
    "page-bytes-limit": [(_case(fp8_spec(), layout__page_size=65536, layout__scale_stride=32768),
                          {"page-bytes-limit"})],
    "launch": [(_case(base_spec(), launch__warps_per_block=0), {"launch"}),
               (_case(base_spec(), launch__tokens_per_warp=9), {"launch"}),
               (_case(base_spec(), launch__stage_tokens=9), {"launch"}),
               (_case(base_spec(), launch__warps_per_block=8, launch__min_blocks_per_sm=9), {"launch"})],
    "launch-large": [(_case(base_spec(), launch__large_min_tokens=64, launch__large_tokens_per_warp=9),
                      {"launch-large"}),
                     (_case(base_spec(), launch__large_min_tokens=2**31), {"launch-large"})],
    "positions": [(_case(base_spec(), positions__source="decode_plan", positions__compress_ratio=0), {"positions"}),
                  (_case(base_spec(), rope__dim=0, hadamard=False, positions__source="decode_plan"), {"positions"}),
                  (_case(base_spec(), rope__dim=0, hadamard=False, positions__source="compress_plan"), {"positions"}),
                  (_case(base_spec(), positions__source="compress_plan", positions__compress_ratio=0), {"positions"})],
}


def test_every_twin_rule_has_a_case():
    assert sorted(TWIN_CASES) == TWINS


@pytest.mark.parametrize("rule,index", [(r, i) for r in sorted(TWIN_CASES) for i in range(len(TWIN_CASES[r]))])
def test_twin_fires_with_its_rule_id(rule, index, tmp_path, cache):
    data, expected = TWIN_CASES[rule][index]
    write_yaml(tmp_path / "s.yaml", data)
    with pytest.raises(KgenError) as e:  # the validator refuses it, located
        render_paths([tmp_path / "s.yaml"], tmp_path / "v")
    assert {p.rule for p in e.value.problems if p.severity == "error"} == expected
    assert not (tmp_path / "v").exists()

    render_paths([tmp_path / "s.yaml"], tmp_path / "out", validate=False)
    spec = Spec.model_validate(data)
    assert twin_errors(spec) == expected
    k, log = compile_rv(render_variant(spec), cache)
    assert k is None, "the kernel compiled"
    assert fired(log) == expected, log
    errors = [ln for ln in log.splitlines() if "error" in ln]
    assert all("static assertion failed" in ln for ln in errors if "error:" in ln), errors


def test_twin_message_matches_the_contract_example(cache):
    spec = Spec.model_validate(_case(fp4_spec(), store__block=64))
    _, log = compile_rv(render_variant(spec), cache)
    assert '"[store-scale] fp4_e2m1 needs scale ue8m0 with block 32"' in log


# mutations of good specs, type-correct for the schema: twins and validator must agree exactly
_MUTATIONS = {
    "head_dim": st.sampled_from([0, 16, 32, 48, 64, 96, 128, 160, 256, 1024, 2048, -32]),
    "rope__dim": st.sampled_from([-2, 0, 2, 4, 6, 8, 16, 30, 32, 64, 96, 128, 130, 512]),
    "rope__style": st.sampled_from(["interleaved", "neox"]),
    "rope__placement": st.sampled_from(["first", "last"]),
    "hadamard": st.booleans(),
    "norm__kind": st.sampled_from(["rmsnorm", "layernorm", "none"]),
    "norm__eps": st.sampled_from([1e-6, 0.0, -1.0, float("inf"), float("nan"), 1e-50]),
    "store__dtype": st.sampled_from(["bf16", "fp16", "fp8_e4m3", "fp4_e2m1"]),
    "store__scale": st.sampled_from(["none", "fp32", "fp32_pow2", "ue8m0"]),
    "store__block": st.sampled_from([None, 1, 2, 4, 8, 16, 32, 48, 64, 128, 256, 448, 512]),
    "store__amax_floor": st.sampled_from([1e-4, 0.0, -1.0, float("inf")]),
    "store__rope_dtype": st.sampled_from([None, "bf16", "fp16"]),
    "store__bf16_roundtrip": st.booleans(),
    "store__scale_math": st.sampled_from(["divide", "reciprocal"]),
    "layout__page_size": st.sampled_from([1, 2, 3, 48, 64, 65536, 131072, 0, -64]),
    "layout__page_align": st.sampled_from([1, 0, 16, 576, 2**31, 2**31 + 1]),
    "layout__scale_stride": st.sampled_from([None, 0, 1, 2, 3, 4, 8, 9, -1]),
    "launch__warps_per_block": st.sampled_from([0, 1, 8, 32, 33]),
    "launch__tokens_per_warp": st.sampled_from([0, 1, 2, 8, 9]),
    "launch__large_min_tokens": st.sampled_from([0, 1, 4096, 2**31 - 1, 2**31, -1]),
    "launch__large_tokens_per_warp": st.sampled_from([0, 1, 4, 8, 9]),
    "launch__stage_tokens": st.sampled_from([-1, 0, 1, 3, 8, 9]),
}


@st.composite
def mutated_specs(draw):
    base = draw(st.sampled_from([base_spec, fp8_spec, fp4_spec, packed_latent_spec]))()
    keys = draw(st.lists(st.sampled_from(sorted(_MUTATIONS)), min_size=1, max_size=3, unique=True))
    return _case(base, **{k: draw(_MUTATIONS[k]) for k in keys})


@pytest.mark.slow
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=mutated_specs())
def test_twins_agree_with_the_validator(data, cache):
    """Any schema-valid spec renders (or raises a located KgenError for an unexpressible value); its
    compile fails with exactly the twin rules the validator reports, or succeeds when there are none."""
    spec = Spec.model_validate(data)
    try:
        rv = render_variant(spec)
    except KgenError as e:
        assert all(p.loc for p in e.problems)
        return
    expected = twin_errors(spec)
    k, log = compile_rv(rv, cache)
    got = fired(log)
    if not expected and not got and k is None:
        assert "[layout]" in log, log  # byte math kgen cannot compute (e.g. a block of 0 when unscaled)
        return
    assert got == expected, (data, log[-2000:])
    assert (k is not None) == (not expected), log[-2000:]


@pytest.mark.slow
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=valid_specs())
def test_accepted_specs_compile(data, cache):
    data["name"] = "accepted"
    k, log = compile_rv(render_variant(Spec.model_validate(data)), cache)
    assert k is not None, (data, log[-3000:])


def test_render_all_has_the_headers():
    files = render_all(SPECS)
    for p in include_dirs()[0].rglob("*.cuh"):
        assert files["include/" + p.relative_to(include_dirs()[0]).as_posix()] == p.read_text()


# ---------------------------------------------------------------------------------------------
# the real kernel source run on the CPU (tests/cpu_shim: a warp = 32 threads, shuffles through a
# barrier, exact software casts) against the Torch reference: the lane mapping, spans, offsets and
# operation order, byte for byte. The intrinsics' own rounding is the GPU test's job.


def emulate(spec: Spec, work: Path, n: int = 37, seed: int = 0) -> tuple[int, list]:
    pytest.importorskip("torch")
    import emulate as E

    return E.launch(spec, E.build(spec, work), work, n, seed=seed)


needs_gxx = pytest.mark.skipif(shutil.which("g++") is None, reason="no host C++ compiler")


@needs_gxx
@pytest.mark.parametrize("spec", shipped_specs(), ids=lambda s: s.name)
def test_kernel_source_on_cpu_matches_reference(spec, tmp_path):
    assert emulate(spec, tmp_path) == (0, [])


@needs_gxx
@pytest.mark.slow
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=valid_specs(max_page_size=64))
def test_kernel_source_on_cpu_matches_reference_for_accepted_specs(data, tmp_path_factory):
    data["name"] = "emulated"
    assert emulate(Spec.model_validate(data), tmp_path_factory.mktemp("emu"), n=23, seed=1) == (0, [])
