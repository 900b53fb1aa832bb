"""SGLang's DeepSeek-V4 top-k peer (kgen.peer_sglang_topk) without a GPU: its absence said cleanly (no kit, no
nvcc, no GPU), the kit taken from the cached wheels holding topk_v2.cuh's include closure and tvm-ffi's library,
the launcher compiled by nvcc for sm_90a, its errors returned as text rather than thrown across the C boundary,
and the bench script's run without a device."""

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
    for path, symbols in ((so, ("kgen_sglang_topk", "kgen_sglang_topk_plan", "kgen_sglang_topk_error")),
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


def test_bench_set_check_counts_ties_apart():
    torch = pytest.importorskip("torch")
    spec = importlib.util.spec_from_file_location("bench_topk_peer", BENCH)
    assert spec is not None and spec.loader is not None
    b = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(b)
    logits = torch.tensor([[5.0, 4.0, 3.0, 3.0, 1.0, -1.0], [1.0, 2.0, 3.0, 4.0, 5.0, 6.0],
                           [9.0, 8.0, 0.0, 0.0, 0.0, 0.0], [1.0, 0.0, 0.0, 0.0, 0.0, 0.0]])
    vis = torch.tensor([6, 6, 6, 2])
    want = torch.topk(logits, 3, dim=1)
    got = want.indices.clone().to(torch.int32)
    got[0] = torch.tensor([3, 0, 1], dtype=torch.int32) if int(want.indices[0, 2]) == 2 else torch.tensor([2, 0, 1])
    got[1] = torch.tensor([5, 4, 0], dtype=torch.int32)  # 0 is not among the top 3 and no tie
    got[3] = torch.tensor([1, -1, 0], dtype=torch.int32)  # a short row: 0..L-1 then -1, in any order
    c = b._set_check(torch, got, want.values, want.indices.to(torch.int32), logits, vis, 3)
    assert c["rows_checked"] == 3 and c["rows_differing"] == 2 and c["rows_differing_beyond_ties"] == 1
    assert c["keys_swapped"] == 2 and c["short_rows"] == 1 and c["short_rows_wrong"] == 0
    got[3] = torch.tensor([1, 0, 0], dtype=torch.int32)
    assert b._set_check(torch, got, want.values, want.indices.to(torch.int32), logits, vis, 3)["short_rows_wrong"] == 1


class _FakePeer:
    """A peer whose kernels are torch.topk on the CPU (the bench's flow without a device)."""

    def __init__(self, torch):
        self.torch = torch

    def _select(self, scores, vis, out):
        t = self.torch
        out.fill_(-1)
        for r in range(scores.shape[0]):
            n = int(vis[r])
            idx = t.topk(scores[r, :n], min(n, out.shape[1])).indices
            out[r, :idx.numel()] = idx.to(t.int32)

    def prepare(self, scores, vis, k):
        out = self.torch.empty((scores.shape[0], k), dtype=self.torch.int32)
        meta = self.torch.zeros((scores.shape[0] + 1, 2), dtype=self.torch.int32)
        return (lambda: None), (lambda: self._select(scores, vis, out)), out, meta

    def launch(self, scores, vis, out, meta):
        self._select(scores, vis, out)


class _FakeDeepGEMM:
    def __init__(self, logits):
        self.logits = logits

    def get_num_sms(self):
        return 132

    def get_paged_mqa_logits_metadata(self, ctx, page, sms):
        return None

    def fp8_paged_mqa_logits(self, *args):
        rows, width = self.logits.shape
        out = self.logits.new_full((rows, width + 61), float("-inf"))  # DeepGEMM's aligned, wider rows
        out[:, :width] = self.logits
        return out


def test_bench_case_flow_on_cpu_stand_ins(monkeypatch):
    torch = pytest.importorskip("torch")
    import functools

    from kgen import reader_check as RC
    from kgen.ops import topk as T
    from kgen.resolve import resolve_spec
    from kgen.score import indexer_logits_torch, topk_reference

    spec_ = importlib.util.spec_from_file_location("bench_topk_peer", BENCH)
    assert spec_ is not None and spec_.loader is not None
    b = importlib.util.module_from_spec(spec_)
    spec_.loader.exec_module(b)
    spec = resolve_spec(f"specs/dsv4.yaml::{b.VARIANT}")
    made: dict = {}

    def make_case(*a, **kw):
        made["args"] = RC.make_case.__wrapped__(*a, **kw, device="cpu")
        return made["args"]

    def launcher(spec, args):
        logits = indexer_logits_torch(spec, *args)
        made["logits"] = logits
        return (lambda: None), logits

    def prepare_select(spec, logits, seq_lens, k):
        out = topk_reference(logits, seq_lens, logits.shape[0] // seq_lens.shape[0], k).to(torch.int32)
        return (lambda: None), out

    def prepare(spec, q, w, cache, table, seq_lens, msl, k):
        return prepare_select(spec, indexer_logits_torch(spec, q, w, cache, table, seq_lens, msl), seq_lens, k)

    class Timer:
        def cold(self, fn, **kw):
            fn()
            return {"ms": 0.002}

        def warm(self, fn, **kw):
            fn()
            return {"ms": 0.001, "graph_error": "none here"}

    orig = RC.make_case
    monkeypatch.setattr(RC, "make_case", functools.wraps(orig)(make_case))
    monkeypatch.setattr(RC, "launcher", launcher)
    monkeypatch.setattr(T, "prepare", prepare)
    monkeypatch.setattr(T, "prepare_select", prepare_select)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    class LazyDG(_FakeDeepGEMM):
        def fp8_paged_mqa_logits(self, *args):
            self.logits = made["logits"]
            return super().fp8_paged_mqa_logits(*args)

    dg = LazyDG(None)
    e = b.bench_case(torch, Timer(), _FakePeer(torch), dg, spec, 2, 4096, "pm30", 2, 512)
    assert e["rows"] == 4 and e["max_seq_len"] % 4 and e["sglang_scores"].startswith("a copy, rows padded to")
    assert set(e["absent"]) == {"sglang_plan", "kgen_reader+sglang_topk"}
    for how in ("cold", "graph"):
        assert {"kgen", "kgen_select", "torch.topk", "sglang_topk", "deepgemm+torch.topk",
                "deepgemm+sglang_topk"} <= set(e[how])
        assert e[how]["deepgemm_fastest"] in ("deepgemm+torch.topk", "deepgemm+sglang_topk")
    for c in ("check_kgen", "check_kgen_select", "check_sglang"):
        assert e[c]["rows_checked"] == 4 and e[c]["rows_differing_beyond_ties"] == 0, (c, e[c])
    assert "B=2" in b.line(e)
    e = b.bench_case(torch, Timer(), _FakePeer(torch), None, spec, 1, 4096, "equal", 1, 2048)
    assert e["sglang_scores"] == "the logits" and set(e["absent"]) == {"sglang_plan", "deepgemm"}
    assert e["graph"]["reader_fastest"] in ("kgen_reader+torch.topk", "kgen_reader+sglang_topk")
    assert e["check_sglang"]["rows_checked"] == 1 and e["check_sglang"]["rows_differing"] == 0
