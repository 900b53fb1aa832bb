"""SGLang's store-kernel peer without a GPU: which variants it writes, its absence said cleanly (no kit,
no nvcc, no GPU), the kit taken from the wheels by following #include, and the bench JSON with the peer
absent. The peer on a GPU: tests/test_peer_sglang_gpu.py."""

from __future__ import annotations

import importlib.util
import io
import sys
import zipfile
from pathlib import Path

import pytest

from kgen import bench, peer_sglang
from kgen.validate import validate_paths

ROOT = Path(__file__).resolve().parents[1]
PLAN_SPECS = ROOT / "bench" / "results" / "wpeer-2026-12-03" / "plan"  # dsv4's indexers reading SGLang's plan


def _script():
    spec = importlib.util.spec_from_file_location("sglang_peer", ROOT / "scripts" / "sglang_peer.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("sglang_peer", mod)
    spec.loader.exec_module(mod)
    return mod


def _variants() -> dict:
    return {s.name: s for s in validate_paths([ROOT / "specs" / "dsv4.yaml"]).specs()}


def test_kernel_for_the_dsv4_indexers_only():
    v = _variants()
    assert peer_sglang.kernel_for(v["dsv4_indexer_fp8"]) == ("fp8", "")
    assert peer_sglang.kernel_for(v["dsv4_indexer_fp4"]) == ("fp4", "")
    for name in ("dsv4_indexer_bf16", "dsv4_latent_fp8_p64", "dsv4_latent_bf16"):
        kind, why = peer_sglang.kernel_for(v[name])
        assert kind is None and why.startswith("SGLang's indexer store")
    kind, why = peer_sglang.kernel_for(v["dsv4_latent_fp8_p64"])
    assert "head_dim 128" in why


def test_absent_without_a_kit(tmp_path):
    with pytest.raises(peer_sglang.PeerAbsent, match="no SGLang kit"):
        peer_sglang.build(tmp_path / "nokit", out_dir=tmp_path / "out")
    (tmp_path / "kit" / "csrc" / "deepseek_v4").mkdir(parents=True)
    (tmp_path / "kit" / peer_sglang.KIT_HEADER).write_text("// header\n")
    with pytest.raises(peer_sglang.PeerAbsent, match="lacks include/"):
        peer_sglang.build(tmp_path / "kit", out_dir=tmp_path / "out")


def test_absent_without_nvcc(tmp_path, monkeypatch):
    kit = tmp_path / "kit"
    for rel in (peer_sglang.KIT_HEADER, "include/sgl_kernel/utils.cuh", "include/tvm/ffi/container/tensor.h",
                "include/dlpack/dlpack.h"):
        (kit / rel).parent.mkdir(parents=True, exist_ok=True)
        (kit / rel).write_text("//\n")
    monkeypatch.setattr(peer_sglang, "nvcc", lambda: None)
    with pytest.raises(peer_sglang.PeerAbsent, match="no nvcc"):
        peer_sglang.build(kit, out_dir=tmp_path / "out")


def test_absent_without_a_gpu(monkeypatch):
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(peer_sglang.PeerAbsent, match="no CUDA device"):
        peer_sglang.Peer.load()
    state = bench.PeerState()
    assert state.peer is None and state.why == "no CUDA device"
    rec = state.record()
    assert rec["present"] is False and rec["name"] == peer_sglang.NAME and rec["sglang"] == peer_sglang.SGLANG_VERSION


def test_kit_dir_env(monkeypatch, tmp_path):
    monkeypatch.setenv(peer_sglang.KIT_ENV, str(tmp_path))
    assert peer_sglang.kit_dir() == tmp_path


def test_compile_command_is_sglangs_jit():
    cmd = peer_sglang.compile_command("nvcc", Path("/k"), Path("s.cu"), Path("o.so"))
    assert cmd[1] == "-arch=sm_90a" and "-DSGL_CUDA_ARCH=900" in cmd
    for flag in ("-std=c++20", "-O3", "--expt-relaxed-constexpr", "-DKGEN_PEER_PAGE_BITS=6"):
        assert flag in cmd
    assert "-I/k/include" in cmd and "-I/k/csrc/deepseek_v4" in cmd


def test_peer_plan_rows():
    torch = pytest.importorskip("torch")
    from kgen.reference import read_plan

    pos = torch.tensor([0, 5, 1 << 20], dtype=torch.int64)
    f = read_plan(peer_sglang.peer_plan(torch, pos, 4), "decode_plan")
    assert f["seq_len"].tolist() == [4, 9, (1 << 20) + 4]
    assert f["write_loc"].tolist() == [0, 0, 0] and f["read_page_0"].tolist() == [0, 0, 0]


def _zip(files: dict[str, str]) -> io.BytesIO:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for name, text in files.items():
            z.writestr(name, text)
    buf.seek(0)
    return buf


def test_include_closure_follows_includes_only(tmp_path):
    m = _script()
    sg = _zip({m.SGLANG_JIT + peer_sglang.KIT_HEADER: '#include <sgl_kernel/a.h>\n#include <cuda_runtime.h>\n'
               '#include "local.h"\n',
               m.SGLANG_JIT + "csrc/deepseek_v4/local.h": "// beside\n",
               m.SGLANG_INCLUDE + "sgl_kernel/a.h": '#include "b.h"\n#include <tvm/ffi/x.h>\n#include <hip/hip.h>\n',
               m.SGLANG_INCLUDE + "sgl_kernel/b.h": "// b\n",
               m.SGLANG_INCLUDE + "sgl_kernel/unused.h": "// never included\n"})
    tv = _zip({m.TVM_INCLUDE + "tvm/ffi/x.h": "#include <dlpack/dlpack.h>\n", m.TVM_INCLUDE + "dlpack/dlpack.h": "//\n",
               m.TVM_INCLUDE + "tvm/ffi/unused.h": "//\n"})
    (tmp_path / "s.whl").write_bytes(sg.getvalue())
    (tmp_path / "t.whl").write_bytes(tv.getvalue())
    rec = m.prepare(tmp_path / "kit", tmp_path / "s.whl", tmp_path / "t.whl")
    assert rec["files"] == sorted([peer_sglang.KIT_HEADER, "csrc/deepseek_v4/local.h", "include/sgl_kernel/a.h",
                                   "include/sgl_kernel/b.h", "include/tvm/ffi/x.h", "include/dlpack/dlpack.h"])
    assert (tmp_path / "kit" / peer_sglang.KIT_RECORD).is_file()
    assert not (tmp_path / "kit" / "include" / "sgl_kernel" / "unused.h").exists()


def _cached(pattern: str) -> Path | None:
    m = _script()
    w = m.find_sglang_wheel()
    if w is None:
        return None
    hits = sorted(w.parent.glob(pattern))
    return hits[0] if hits else None


def test_kit_from_the_real_wheels(tmp_path):
    m = _script()
    sg = m.find_sglang_wheel()
    tv = _cached(f"apache_tvm_ffi-{peer_sglang.TVM_FFI_VERSION}-*.whl")
    if sg is None or tv is None:
        pytest.skip("the SGLang and apache-tvm-ffi wheels are not cached under .releases/wheels")
    rec = m.prepare(tmp_path / "kit", sg, tv)
    assert peer_sglang.kit_problem(tmp_path / "kit") is None
    files = set(rec["files"])
    for need in ("include/sgl_kernel/deepseek_v4/compress_v2.cuh", "include/sgl_kernel/deepseek_v4/fp8_utils.cuh",
                 "include/sgl_kernel/warp.cuh", "include/tvm/ffi/container/tensor.h", "include/dlpack/dlpack.h"):
        assert need in files
    assert not any("topk" in f or "hip" in f for f in files)
    size = sum(p.stat().st_size for p in (tmp_path / "kit").rglob("*") if p.is_file())
    assert size < 2 << 20  # the kit travels to the GPU machine: a few hundred KiB


def test_bench_entry_with_the_peer_absent():
    v = _variants()
    state = bench.PeerState(enabled=False)
    e = bench.peer_case(None, None, v["dsv4_indexer_fp8"], (), None, {}, None, state)
    assert e == {"name": peer_sglang.NAME, "absent": "disabled (KGEN_BENCH_PEER=0)"}
    e = bench.peer_case(None, None, v["dsv4_latent_bf16"], (), None, {}, None, state)
    assert set(e) == {"name", "absent"} and e["absent"].startswith("SGLang's indexer store")
    assert state.record()["present"] is False and "what" in state.record()


def test_no_build_without_a_variant_it_writes():
    v = _variants()
    state = bench.PeerState(specs=[v["dsv4_latent_bf16"]])
    assert state.peer is None and state.why == "no variant here is one SGLang's indexer store writes"


def test_ratios_name_the_peer():
    entry = {"kgen": {"cold": {"ms": 0.01, "fraction_of_copy": 0.5}, "graph": {"ms": 0.005}},
             "peer": {"speed_cold": 1.25, "speed_graph": 0.9}}
    r = bench.ratios(entry)
    assert r["cold_speed_vs_peer"] == 1.25 and r["graph_speed_vs_peer"] == 0.9
    assert "cold_speed_vs_peer" not in bench.ratios({"kgen": entry["kgen"], "peer": {"absent": "x"}})
    assert bench._peer_cell(r) == "1.25/0.90" and bench._peer_cell({}) == "-"


def test_bench_plan_inputs_emit_where_sglang_does(monkeypatch):
    torch = pytest.importorskip("torch")
    from kgen import ops
    from kgen.reference import plan_positions, read_plan

    monkeypatch.setattr(bench, "FREQS_ROWS", 4096)
    monkeypatch.setattr(bench, "_freqs_tables", {})
    spec = validate_paths([PLAN_SPECS / "indexer_fp8_plan.yaml"]).specs()[0]
    x, w, b, f, plan, loc, cache = bench.bench_inputs(spec, 200, seed=1, device="cpu")
    assert plan.dtype == torch.uint8 and tuple(plan.shape) == (200, 16)
    _, emit = plan_positions(spec, plan)
    seq = read_plan(plan, "decode_plan")["seq_len"]
    assert bool(emit.any()) and not bool(emit.all())  # a quarter of a decode step's tokens write a key
    assert torch.equal(emit, seq % 4 == 0)  # where SGLang's kernel writes: seq_len % ratio == 0, nothing else
    ops.norm_rope_store(spec, x, w, b, f, plan, loc, cache)
    scales = cache[:, 64 * 128:].reshape(-1, 4).view(torch.float32)[:, 0]  # one fp32 scale per slot
    assert int((scales != 0).sum()) == int(emit.sum())
