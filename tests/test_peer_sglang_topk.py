"""SGLang's DeepSeek-V4 top-k peer (kgen.peer_sglang_topk) without a GPU: its absence said cleanly (no kit, no
nvcc, no GPU), the kit taken from the cached wheels holding topk_v2.cuh's include closure and tvm-ffi's library,
the launcher compiled by nvcc for sm_90a, its errors returned as text rather than thrown across the C boundary,
and the bench script's run without a device (the bench's rows themselves: tests/test_topk_bench.py)."""

from __future__ import annotations

import importlib.util
import json
import re
import struct
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from kgen import peer_sglang
from kgen import peer_sglang_topk as P

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "bench" / "results" / "tpeer-2026-12-03" / "bench_topk_peer.py"
EM_CUDA = 190


def _script():
    spec = importlib.util.spec_from_file_location("sglang_topk_peer", ROOT / "scripts" / "sglang_topk_peer.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("sglang_topk_peer", mod)
    spec.loader.exec_module(mod)
    return mod


def _fake_kit(root: Path, skip: str = "") -> Path:
    for rel in (P.KIT_TOPK, P.KIT_PROBE, "include/sgl_kernel/deepseek_v4/topk_impl.cuh",
                "include/tvm/ffi/container/tensor.h", f"include/{P.KIT_EXTRA_HEADERS[0]}", "include/dlpack/dlpack.h",
                P.KIT_LIB):
        if rel != skip:
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_text("//\n")
    return root


def test_absent_without_a_kit(tmp_path):
    with pytest.raises(P.PeerAbsent, match="no SGLang top-k kit"):
        P.build(tmp_path / "nokit", defines=P.OFFLINE_DEFINES, out_dir=tmp_path / "out")
    kit = _fake_kit(tmp_path / "kit", skip=P.KIT_LIB)
    with pytest.raises(P.PeerAbsent, match="lacks lib/libtvm_ffi.so"):
        P.build(kit, defines=P.OFFLINE_DEFINES, out_dir=tmp_path / "out")
    with pytest.raises(P.PeerAbsent, match="lacks lib/libtvm_ffi.so"):
        P.build_probe(kit, out_dir=tmp_path / "out")


def test_absent_without_nvcc(tmp_path, monkeypatch):
    monkeypatch.setattr(peer_sglang, "nvcc", lambda: None)
    with pytest.raises(P.PeerAbsent, match="no nvcc"):
        P.build(_fake_kit(tmp_path / "kit"), defines=P.OFFLINE_DEFINES, out_dir=tmp_path / "out")


def test_absent_without_a_gpu(monkeypatch):
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(P.PeerAbsent, match="no CUDA device"):
        P.Peer.load()


def test_the_build_needs_the_probes_answers(tmp_path):
    with pytest.raises(ValueError, match="SGL_TOPK_V2_MAX_C16_OCC1"):
        P.build(_fake_kit(tmp_path / "kit"), defines={"SGL_TOPK_V2_MAX_C8_OCC2": 30}, out_dir=tmp_path)


def test_kit_dir_env(monkeypatch, tmp_path):
    monkeypatch.setenv(P.KIT_ENV, str(tmp_path))
    assert P.kit_dir() == tmp_path


def test_compile_command_is_sglangs_jit_with_the_probe_macros():
    cmd = P.compile_command("nvcc", Path("/k"), Path("s.cu"), Path("o.so"),
                            defines={"SGL_TOPK_V2_MAX_C8_OCC2": 33, "SGL_TOPK_V2_MAX_C16_OCC1": 0})
    assert cmd[1] == "-arch=sm_90a" and "-DSGL_CUDA_ARCH=900" in cmd
    for flag in ("-std=c++20", "-O3", "--expt-relaxed-constexpr", "-DSGL_TOPK_V2_MAX_C8_OCC2=33",
                 "-DSGL_TOPK_V2_MAX_C16_OCC1=0", "-DKGEN_PEER_PDL=true", "-I/k/include",
                 "-I/k/csrc/deepseek_v4", "-I/k/csrc/occupancy", "-ltvm_ffi", "-L/k/lib"):
        assert flag in cmd
    assert cmd.index("s.cu") < cmd.index("-ltvm_ffi")  # libraries after the source that needs them
    assert cmd[cmd.index("-o") + 1] == "o.so"


def test_padded_scores_keeps_the_values():
    torch = pytest.importorskip("torch")
    x = torch.randn(3, 8)
    assert P.padded_scores(torch, x) is x
    y = torch.randn(3, 7)
    p = P.padded_scores(torch, y)
    assert p.shape == y.shape and p.stride() == (8, 1) and torch.equal(p, y)


def _wheels():
    m = _script()
    sg, tv = m.W.find_sglang_wheel(), m.find_tvm_ffi_wheel()
    if sg is None or tv is None:
        pytest.skip(f"no cached SGLang {peer_sglang.SGLANG_VERSION} / apache-tvm-ffi {peer_sglang.TVM_FFI_VERSION} "
                    "wheel (make releases; the tvm-ffi wheel beside it)")
    return m, sg, tv


@pytest.fixture(scope="module")
def kit(tmp_path_factory):
    m, sg, tv = _wheels()
    dest = tmp_path_factory.mktemp("kit") / "sglang_topk"
    rec = m.prepare(dest, sg, tv)
    return dest, rec, sg


def test_kit_from_the_cached_wheels_holds_the_include_closure(kit):
    dest, rec, sg = kit
    assert P.kit_problem(dest) is None
    files = set(rec["files"])
    assert {P.KIT_TOPK, P.KIT_PROBE, P.KIT_LIB, "include/sgl_kernel/deepseek_v4/topk_impl.cuh",
            "include/tvm/ffi/extra/c_env_api.h", "include/dlpack/dlpack.h"} <= files
    on_disk = {str(p.relative_to(dest)) for p in dest.rglob("*") if p.is_file()} - {P.KIT_RECORD}
    assert on_disk == files
    # closed: every include of a kit file that names a header of the wheels' include roots is in the kit
    with zipfile.ZipFile(sg) as z:
        sglang_headers = {n[len("sglang/kernels/jit/include/"):] for n in z.namelist()
                          if n.startswith("sglang/kernels/jit/include/")}
    include = re.compile(r'^\s*#\s*include\s*[<"]([^>"]+)[>"]', re.M)
    for rel in files - {P.KIT_LIB}:
        for inc in include.findall((dest / rel).read_text(errors="replace")):
            if inc in sglang_headers:
                assert f"include/{inc}" in files, (rel, inc)
    size = sum((dest / f).stat().st_size for f in files)
    assert size < 8 << 20
    record = json.loads((dest / P.KIT_RECORD).read_text())
    assert record["sglang"]["version"] == peer_sglang.SGLANG_VERSION and len(record["sglang"]["sha256"]) == 64
    assert record["sources"] == list(P.KIT_SOURCES)


def _cuda_elf_archs(blob: bytes) -> list[int]:
    """SM numbers of the CUDA ELF images embedded in `blob` (e_machine EM_CUDA; the SM in e_flags' bits 8-15)."""
    out = []
    i = blob.find(b"\x7fELF", 1)
    while i != -1:
        if blob[i + 4] == 2 and struct.unpack_from("<H", blob, i + 18)[0] == EM_CUDA:
            out.append((struct.unpack_from("<I", blob, i + 48)[0] >> 8) & 0xFF)
        i = blob.find(b"\x7fELF", i + 1)
    return out


@pytest.fixture(scope="module")
def built(kit, tmp_path_factory):
    if peer_sglang.nvcc() is None:
        pytest.skip("no nvcc")
    dest, _, _ = kit
    out = tmp_path_factory.mktemp("build")
    return dest, P.build(dest, defines=P.OFFLINE_DEFINES, out_dir=out), P.build_probe(dest, out_dir=out)


@pytest.mark.slow
def test_nvcc_compiles_the_launcher_for_sm_90a(built):
    dest, so, probe_so = built
    for path, symbols in ((so, ("kgen_sglang_topk", "kgen_sglang_topk_paged", "kgen_sglang_topk_plan",
                                "kgen_sglang_topk_error")),
                          (probe_so, ("kgen_sglang_cluster_probe",))):
        archs = _cuda_elf_archs(path.read_bytes())
        assert archs and set(archs) == {90}, archs
        dyn = subprocess.run(["nm", "-D", "--defined-only", str(path)], capture_output=True, text=True).stdout
        for s in symbols:
            assert re.search(rf"\bT {s}$", dyn, re.M), s
    needed = subprocess.run(["readelf", "-d", str(so)], capture_output=True, text=True).stdout
    assert "libtvm_ffi.so" in needed and str((dest / "lib").resolve()) in needed  # found through the rpath
    # cached: a second build is the same file, no compile
    assert P.build(dest, defines=P.OFFLINE_DEFINES, out_dir=so.parent) == so


@pytest.mark.slow
def test_errors_come_back_as_text_without_a_gpu(built):
    dest, so, _ = built
    P._load_tvm_ffi(dest)
    peer = P.Peer(so, P.OFFLINE_DEFINES)
    # SGLang's own host check, before any CUDA call
    rc = peer.lib.kgen_sglang_topk(None, 4, 64, 64, None, None, 0, None, 0, None)
    assert rc == 1 and "topk must be in (0, 2048]" in peer.lib.kgen_sglang_topk_error().decode()
    rc = peer.lib.kgen_sglang_topk(None, 4, 63, 63, None, None, 16, None, 0, None)
    assert rc == 1 and "multiple of 4" in peer.lib.kgen_sglang_topk_error().decode()
    # the paged entry hands SGLang its page table and page size (checked by SGLang before any CUDA call)
    rc = peer.lib.kgen_sglang_topk_paged(None, 4, 64, 64, None, None, 2, 48, None, 16, None, 0, None)
    assert rc == 1 and "page_size must be power of 2" in peer.lib.kgen_sglang_topk_error().decode()
    with pytest.raises(RuntimeError, match="SGLang's top-k failed"):
        peer._check(1, "top-k")
    from kgen import runtime

    if runtime.gpu_problem() is None:
        return  # past the host checks the calls below would launch on null pointers
    # valid arguments: SGLang's dispatch gets as far as its first CUDA call, whose error comes back as text
    assert peer.lib.kgen_sglang_topk_plan(None, 4, None, -1, 0, None) == 0  # a small batch: nothing to plan
    for rows, cols in ((1, 65536), (4, 4096), (64, 300000)):  # cluster, one block per row, the persistent pool
        assert peer.lib.kgen_sglang_topk(None, rows, cols, cols, None, None, 512, None, 0, None) == 1
        assert "CUDA error" in peer.lib.kgen_sglang_topk_error().decode()


def test_bench_script_without_a_device(tmp_path):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a GPU is here: the bench runs for real")
    out = tmp_path / "b.json"
    r = subprocess.run([sys.executable, str(BENCH), "--json", str(out), "--batches", "1", "--keys", "4096"],
                       capture_output=True, text=True, cwd=ROOT, timeout=120,
                       env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert r.returncode == 0, r.stderr
    d = json.loads(out.read_text())
    assert d["absent"] == "no CUDA device" and d["results"] == [] and d["cases_planned"] == 8
    assert d["sglang"]["present"] is False


def test_bench_cases_cover_the_matrix_mode_by_mode():
    spec = importlib.util.spec_from_file_location("bench_topk_peer", BENCH)
    assert spec is not None and spec.loader is not None
    b = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(b)
    cs = b.cases([1, 8, 32, 64], [4096, 65536, 262144], [512, 2048], [("equal", 1), ("pm30", 2)])
    assert len(cs) == 48 and len(set(cs)) == 48
    assert {c[2:4] for c in cs[:24]} == {("equal", 1)}  # a run cut after the first mode keeps it whole


def test_bench_script_is_a_caller_of_kgens_topk_bench(monkeypatch):
    from kgen import topk_bench as TB

    spec = importlib.util.spec_from_file_location("bench_topk_peer", BENCH)
    assert spec is not None and spec.loader is not None
    b = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(b)
    seen = {}
    monkeypatch.setattr(TB, "bench_topk_case", lambda *a, **kw: seen.update(args=a, kw=kw) or {"ok": 1})
    peer, dg = object(), object()
    assert b.bench_case("torch", "timer", peer, dg, "spec", 8, 4096, "pm30", 2, 512) == {"ok": 1}
    assert seen["args"] == ("torch", "timer", "spec", 8, 4096, "pm30", 2, 512)
    assert seen["kw"] == {"seed": 0, "peer": dg, "sglang": peer}  # the flow itself: tests/test_topk_bench.py


def test_the_launch_closures_hold_the_tensors_they_point_at():
    """prepare's plan / select pass raw addresses: a caller that keeps only them (and drops the padded copy of the
    scores it made) must not see that memory freed under SGLang's kernel (the copy was freed and reused once,
    and SGLang read another tensor's bytes)."""
    import gc
    import weakref

    import torch

    calls = []

    class Lib:  # the launcher's two entry points, recording the addresses they are given
        def kgen_sglang_topk_plan(self, lens, rows, meta, threshold, dev, stream):
            calls.append(("plan", lens, meta))
            return 0

        def kgen_sglang_topk(self, scores, rows, cols, stride, lens, out, k, meta, dev, stream):
            calls.append(("topk", scores, stride))
            return 0

    peer = object.__new__(P.Peer)
    peer.lib, peer.device = Lib(), 0
    peer.metadata = lambda rows: torch.zeros((rows + 1, P.PLAN_COLS), dtype=torch.int32)
    peer._stream = lambda: 0
    scores = P.padded_scores(torch, torch.randn(3, 4097))  # a copy: 4097 columns are not 16-B strided
    gone = weakref.ref(scores.untyped_storage())
    plan, select, _, _ = peer.prepare(scores, torch.full((3,), 4097, dtype=torch.int32), 8)
    address = scores.data_ptr()
    del scores
    gc.collect()
    assert gone() is not None  # still held: by the closures
    plan()
    select()
    assert calls[1] == ("topk", address, 4100)
    del plan, select
    gc.collect()
    assert gone() is None
