"""CPU-side checks of the GPU path: argument checks, arch logic, the no-GPU exit, byte math, the
cache comparison and the random-spec sampler. Nothing here needs a GPU or NVRTC."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from kgen import arch, bench, compare, gpurun, ops, reference, runtime, sample, timing  # noqa: E402
from kgen import inputs as I  # noqa: E402
from kgen.diagnostics import KgenError  # noqa: E402
from kgen.layout import compute, launch_shape  # noqa: E402
from kgen.rules import check_variant  # noqa: E402
from kgen.spec import Rope  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
BF16 = ROOT / "specs" / "indexer_bf16.yaml"
FAMILY = ROOT / "specs" / "dsv4.yaml"
V32 = ROOT / "specs" / "dsv32_indexer.yaml"
HAS_GPU = runtime.gpu_problem() is None


def shipped():
    from kgen.validate import validate_paths

    return validate_paths([FAMILY, V32]).specs()


def good_args(spec, n=7, pages=3):
    lay = compute(spec)
    dt = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[spec.input_dtype]
    h, r = spec.head_dim, spec.rope.dim
    return dict(
        x=torch.randn(n, h).to(dt),
        weight=None if spec.norm.kind == "none" else torch.ones(h, dtype=dt),
        bias=torch.zeros(h, dtype=dt) if spec.norm.kind == "layernorm" else None,
        freqs=torch.randn(100, r) if r else None,
        positions=torch.zeros(n, dtype=torch.int64) if r else None,
        out_loc=torch.arange(n, dtype=torch.int64),
        cache=torch.zeros(pages, lay.page_bytes, dtype=torch.uint8),
    )


def check(spec, **override):
    args = good_args(spec)
    args.update(override)
    with pytest.raises(ops.ArgumentError) as e:
        ops.check_arguments(spec, **args)
    return str(e.value)


# ---------------------------------------------------------------------------------------------
# kgen.ops argument checks (metadata only, before any CUDA call)


def test_dtype_error_names_argument_and_shapes():
    spec = ops.resolve_spec(BF16)
    msg = check(spec, x=torch.randn(7, 128).to(torch.bfloat16))
    assert msg == "x: expected float32 [N, 128], got bfloat16 [7, 128]"


@pytest.mark.parametrize("name,value,needle", [
    ("x", torch.randn(7, 64), "x: expected float32 [N, 128], got float32 [7, 64]"),
    ("x", torch.randn(7, 128, 2)[..., 0], "x: expected a contiguous tensor"),
    ("weight", None, "weight: expected a tensor float32 [128]"),
    ("weight", torch.ones(64), "weight: expected float32 [128] (rmsnorm weight), got float32 [64]"),
    ("bias", torch.zeros(128), "bias: must be None (only layernorm has a bias; norm is rmsnorm)"),
    ("freqs", torch.randn(100, 32), "freqs: expected float32 [max_pos, 64]"),
    ("freqs", torch.randn(100, 64, dtype=torch.float64), "freqs: expected float32 [max_pos, 64]"),
    ("freqs", None, "freqs: expected a tensor float32 [max_pos, 64], got None"),
    ("positions", torch.zeros(7, dtype=torch.int32), "positions: expected int64 [N] with N = 7, got int32 [7]"),
    ("positions", torch.zeros(6, dtype=torch.int64), "positions: expected int64 [N] with N = 7, got int64 [6]"),
    ("out_loc", torch.zeros(7, dtype=torch.int32), "out_loc: expected int64 [N] with N = 7, got int32 [7]"),
    ("cache", torch.zeros(3, 8448, dtype=torch.uint8), "cache: expected uint8 [num_pages, 16384]"),
    ("cache", torch.zeros(3, 16384, dtype=torch.int8), "cache: expected uint8 [num_pages, 16384]"),
    ("cache", torch.zeros(16384, 3, dtype=torch.uint8).t(), "cache: expected a contiguous tensor"),
    ("cache", torch.zeros(3 * 16384, dtype=torch.uint8), "cache: expected uint8 [num_pages, 16384]"),
])
def test_each_argument_is_named(name, value, needle):
    spec = ops.resolve_spec(BF16)
    msg = check(spec, **{name: value})
    assert msg.startswith(name + ":"), msg
    assert needle in msg, msg


def test_cache_error_shows_page_math():
    spec = ops.resolve_spec(BF16)
    msg = check(spec, cache=torch.zeros(2, 8448, dtype=torch.uint8))
    assert "64 tokens x 256 B = 16384 B" in msg and "got uint8 [2, 8448]" in msg


def test_layernorm_needs_bias_and_no_rope_refuses_freqs():
    v32 = ops.resolve_spec(V32)
    assert check(v32, bias=None).startswith("bias: expected a tensor bfloat16 [128] (layernorm bias)")
    norope = v32.model_copy(update={"rope": Rope(dim=0)})
    args = good_args(norope)
    msg = check(norope, freqs=torch.randn(10, 64))
    assert msg.startswith("freqs: must be None (rope.dim is 0)")
    msg = check(norope, freqs=None, positions=torch.zeros(7, dtype=torch.int64))
    assert msg.startswith("positions: must be None")
    assert args["freqs"] is None


def test_norm_none_refuses_weight():
    spec = ops.resolve_spec(BF16)
    from kgen.spec import Norm

    nonorm = spec.model_copy(update={"norm": Norm(kind="none")})
    assert check(nonorm, weight=torch.ones(128)).startswith("weight: must be None (norm is none)")


def test_device_check_comes_last_on_cpu_tensors():
    for spec in shipped():
        msg = check(spec)  # every other argument is right
        assert msg.startswith("x: expected a CUDA tensor, got one on cpu"), (spec.name, msg)


def test_checks_pass_without_device_requirement():
    for spec in shipped():
        c = ops.check_arguments(spec, **good_args(spec, n=5, pages=2), require_cuda=False)
        assert c.num_tokens == 5 and c.num_pages == 2 and c.num_slots == 2 * spec.layout.page_size


def test_zero_tokens_still_checked():
    spec = ops.resolve_spec(BF16)
    msg = check(spec, x=torch.zeros(0, 128), positions=torch.zeros(0, dtype=torch.int64),
                out_loc=torch.zeros(0, dtype=torch.int64))
    assert msg.startswith("x: expected a CUDA tensor")  # checks run; N == 0 is a no-op after them


def test_argument_error_is_a_value_error_and_a_kgen_error():
    spec = ops.resolve_spec(BF16)
    with pytest.raises(ValueError):
        ops.norm_rope_store(spec, **{**good_args(spec), "x": torch.zeros(3, 3)})
    with pytest.raises(KgenError):
        ops.norm_rope_store(BF16, **{**good_args(spec), "x": torch.zeros(3, 3)})


def test_resolve_spec_paths_and_families():
    assert ops.resolve_spec(str(BF16)).name == "dsv4_indexer_bf16"
    assert ops.resolve_spec(f"{FAMILY}::dsv4_indexer_fp8").store.dtype == "fp8_e4m3"
    with pytest.raises(ops.ArgumentError, match="is a family of 7 variants"):
        ops.resolve_spec(FAMILY)
    with pytest.raises(ops.ArgumentError, match="no variant named 'nope'"):
        ops.resolve_spec(f"{FAMILY}::nope")
    with pytest.raises(KgenError) as e:
        ops.resolve_spec(ROOT / "specs" / "missing.yaml")
    assert e.value.exit_code == 2


# ---------------------------------------------------------------------------------------------
# arch check (pure)


@pytest.mark.parametrize("target,cap,runs", [
    ("sm_90a", (9, 0), True), ("sm_90", (9, 0), True), ("sm_80", (8, 6), True), ("sm_86", (8, 0), False),
    ("sm_90a", (10, 0), False), ("sm_100a", (10, 3), False), ("sm_100f", (10, 3), True),
    ("sm_103a", (10, 3), True), ("sm_120a", (12, 0), True), ("sm_120a", (12, 1), False),
    ("sm_120f", (12, 1), True), ("sm_100a", (9, 0), False), ("bogus", (9, 0), False),
])
def test_target_runs_on(target, cap, runs):
    assert arch.runs_on(target, cap) is runs


def test_pick_target_prefers_exact_arch_specific():
    ts = ["sm_90a", "sm_100a", "sm_120a"]
    assert arch.pick((9, 0), ts) == "sm_90a"
    assert arch.pick((10, 0), ts) == "sm_100a"
    assert arch.pick((12, 0), ts) == "sm_120a"
    assert arch.pick((8, 9), ts) is None
    assert arch.pick((8, 9), ["sm_80", "sm_86", "sm_89"]) == "sm_89"
    assert arch.pick((8, 9), ["sm_80", "sm_86"]) == "sm_86"
    assert arch.pick((10, 3), ["sm_100f", "sm_103a"]) == "sm_103a"
    assert arch.pick((9, 0), ["sm_90", "sm_90a"]) == "sm_90a"


def test_check_arch_message_names_device_arch_and_targets():
    with pytest.raises(KgenError) as e:
        arch.check((8, 6), ["sm_90a", "sm_100a"], device_name="GPU 0 (NVIDIA A10)",
                           variant="dsv4_indexer_bf16")
    p = e.value.problems[0]
    assert p.rule == "gpu-arch"
    for needle in ("NVIDIA A10", "8.6", "sm_86", "sm_90a, sm_100a", "dsv4_indexer_bf16"):
        assert needle in p.message, p.message
    assert "no kernel image" not in p.message
    assert arch.check((9, 0), ["sm_90a"]) == "sm_90a"


def test_check_loaded_kernel_abi():
    from kgen.abi import NORM_ROPE_STORE as A

    class P:
        def __init__(self, size):
            self.size = size

    class K:
        def __init__(self, sizes):
            self.arguments_info = [P(s) for s in sizes]

    A.check_loaded(K((A.size,)), "u")
    # the kernel before the params struct: 9 positional parameters
    with pytest.raises(KgenError, match="9 parameter.*one norm_rope_store Params struct of 72 bytes"):
        A.check_loaded(K((8, 8, 8, 8, 8, 8, 8, 4, 8)), "u")
    with pytest.raises(KgenError, match="kernel-abi|Params"):
        A.check_loaded(K((A.size - 8,)), "u")

    class Old:  # no arguments_info: skipped
        pass

    A.check_loaded(Old(), "u")
    A.check_manifest(None, "u")  # a cubin from before manifests: nothing recorded
    A.check_manifest(A.manifest(), "u")
    with pytest.raises(KgenError, match="built for ABI"):
        A.check_manifest({**A.manifest(), "version": A.version + 1}, "u")


# ---------------------------------------------------------------------------------------------
# no GPU: clear line, exit 2


def _kgen(*args):
    return subprocess.run([sys.executable, "-m", "kgen.cli", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)


@pytest.mark.skipif(HAS_GPU, reason="a GPU is present")
def test_kgen_test_without_gpu_exits_2():
    r = _kgen("test", str(BF16), "--json")
    assert r.returncode == 2, r.stderr
    assert "no GPU" in r.stderr and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


@pytest.mark.skipif(HAS_GPU, reason="a GPU is present")
def test_kgen_bench_without_gpu_exits_2(tmp_path):
    r = _kgen("bench", str(BF16), "--json", str(tmp_path / "b.json"))
    assert r.returncode == 2 and "no GPU" in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "b.json").exists()


def test_kgen_test_invalid_spec_is_1_missing_is_2(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(BF16.read_text().replace("page_size: 64", "page_size: 48"))
    r = _kgen("test", str(bad))
    assert r.returncode == 1 and "page-size" in r.stderr and "Traceback" not in r.stderr
    r = _kgen("test", str(tmp_path / "missing.yaml"))
    assert r.returncode == 2 and "Traceback" not in r.stderr


def test_gpu_modules_import_without_torch_or_cuda():
    code = ("import sys, kgen.runtime, kgen.gputest, kgen.gpurun, kgen.compare, kgen.sample, kgen.bench; "
            "bad = [m for m in ('torch', 'cuda.core', 'cuda.bindings') if m in sys.modules]; print(bad)")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "[]", r.stdout + r.stderr
    # kgen.ops registers torch ops, so it imports torch; never cuda.core, NVRTC or jinja2
    code = ("import sys, kgen.ops; "
            "bad = [m for m in ('cuda.core', 'cuda.bindings.nvrtc', 'jinja2') if m in sys.modules]; print(bad)")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "[]", r.stdout + r.stderr


# ---------------------------------------------------------------------------------------------
# bench byte model


def test_byte_model_arithmetic():
    bf16 = ops.resolve_spec(BF16)
    m = bench.byte_model(bf16, 1)
    # fp32 row 128*4 + freqs 64*4 + position 8 + out_loc 8; 128 bf16 written
    assert (m["read_per_token"], m["written_per_token"]) == (512 + 256 + 16, 256)
    assert bench.byte_model(bf16, 4096)["total"] == 4096 * (784 + 256)
    fp8 = ops.resolve_spec(f"{FAMILY}::dsv4_indexer_fp8")
    assert bench.byte_model(fp8, 10)["written"] == 10 * 132
    latent = ops.resolve_spec(f"{FAMILY}::dsv4_latent_fp8_p64")
    m = bench.byte_model(latent, 1)
    assert m["read_per_token"] == 512 * 4 + 64 * 4 + 16
    assert m["written_per_token"] == 448 + 128 + 7 and m["bytes_per_token"] == 584  # the pad byte is not written
    v32 = ops.resolve_spec(V32)
    assert bench.byte_model(v32, 1)["read_per_token"] == 128 * 2 + 64 * 4 + 16
    norope = bf16.model_copy(update={"rope": Rope(dim=0)})
    assert bench.byte_model(norope, 1)["read_per_token"] == 512 + 8  # no freqs row, no position
    assert timing.gbps(10**9, 1.0) == pytest.approx(1000.0)
    assert timing.gbps(1, 0) is None


def test_bench_ratios_and_table(tmp_path):
    k = {"cold": {"ms": 0.02, "us": 20.0, "gbps": 100.0, "fraction_of_copy": 0.5},
         "graph": {"ms": 0.01, "us": 10.0, "gbps": 200.0, "fraction_of_copy": 0.05}, "peak_extra_bytes": 0}
    e = {"variant": "v", "tokens": 64, "kgen": k, "eager": {"cold": {"ms": 0.2}, "graph": {"ms": 0.1}},
         "compile": {"error": "boom"}, "floor": {"empty_kernel": {"cold": {"ms": 0.01}, "graph": {"ms": 0.005}},
                                                  "copy_same_bytes": {"cold": {"ms": 0.01}, "graph": {"ms": 0.004}}}}
    r = bench.ratios(e)
    assert r["graph_speedup_vs_eager"] == pytest.approx(10.0) and "graph_speedup_vs_compile" not in r
    assert r["graph_over_empty_kernel"] == pytest.approx(2.0) and r["cold_over_copy_same_bytes"] == pytest.approx(2.0)
    e["ratios"] = r
    data = {"device": {"name": "Fake"}, "torch": "x", "copy": {"gbps": 4000.0},
            "results": [e, {"variant": "w", "tokens": 1, "error": "bad"},
                        {"variant": "w", "tokens": 2, "skipped": "budget"}]}
    table = bench.summary_table(data)
    assert "Fake" in table and "ERROR" in table and "skipped" in table
    out = tmp_path / "sub" / "b.json"
    bench.write_json_atomic(out, data)
    assert json.loads(out.read_text())["copy"]["gbps"] == 4000.0
    assert [p.name for p in out.parent.iterdir()] == ["b.json"]


# ---------------------------------------------------------------------------------------------
# the whole-cache comparison (CPU: reference against itself, then planted differences)


def _ref_pair(spec, n=37, seed=1):
    inp = I.make_inputs(spec, n, seed=seed)
    *tensors, a = gpurun.kernel_args(spec, inp)
    reference.norm_rope_store(spec, *tensors, a)
    return a, inp["out_loc"]


def _first_written(spec, loc, a):
    lay = compute(spec)
    valid = ((loc >= 0) & (loc < a.shape[0] * lay.page_size)).nonzero()[0, 0]
    return lay, *divmod(int(loc[valid]), lay.page_size)


@pytest.mark.parametrize("spec", shipped(), ids=lambda s: s.name)
def test_compare_identical_and_planted(spec):
    a, loc = _ref_pair(spec)
    c = compare.compare_caches(spec, a, a.clone(), out_loc=loc, tokens=37)
    assert c.ok and c.fraction == 1.0 and c.max_code_distance == 0
    assert c.written_tokens == int(((loc >= 0) & (loc < a.shape[0] * compute(spec).page_size)).sum())
    lay, page, t = _first_written(spec, loc, a)
    quantized = spec.store.dtype not in ("bf16", "fp16")
    # a value one code away (lowest bit of the first value byte)
    b = a.clone()
    b[page, lay.value_offset(t) + lay.quant_row_offset] ^= 1
    c = compare.compare_caches(spec, b, a, out_loc=loc, tokens=37)
    assert c.diff_values == 1 and c.max_code_distance == 1
    assert c.ok is quantized, c.reason
    assert c.equal_bytes == c.total_bytes - 1
    # a value several codes away
    b = a.clone()
    b[page, lay.value_offset(t) + lay.quant_row_offset] ^= 6
    c = compare.compare_caches(spec, b, a, out_loc=loc, tokens=37)
    assert not c.ok and c.max_code_distance >= 2
    # a byte nobody owns (the last page is larger than what was written, or padding)
    untouched = a.shape[0] - 1
    b = a.clone()
    b[untouched, 0] ^= 0xFF
    c = compare.compare_caches(spec, b, a, out_loc=loc, tokens=37)
    assert not c.ok
    assert c.examples and c.examples[0]["page"] == untouched
    # a scale byte
    if lay.scale_unit:
        b = a.clone()
        b[page, lay.scale_offset(t, 0)] ^= 1
        c = compare.compare_caches(spec, b, a, out_loc=loc, tokens=37)
        assert not c.ok and c.scale_mismatches == 1 and "scale" in c.reason
    if lay.kept_bytes:
        b = a.clone()
        b[page, lay.value_offset(t) + lay.kept_row_offset] ^= 1
        c = compare.compare_caches(spec, b, a, out_loc=loc, tokens=37)
        assert c.ok and c.diff_bytes_by_role == {"kept": 1}


def test_compare_stray_write_in_padding():
    spec = ops.resolve_spec(f"{FAMILY}::dsv4_latent_fp8_p2")  # 1728-B pages: 2*584 = 1168 used
    a, loc = _ref_pair(spec)
    b = a.clone()
    b[0, 1700] ^= 1
    c = compare.compare_caches(spec, b, a, out_loc=loc, tokens=37)
    assert not c.ok and c.stray_bytes == 1 and "no token owns" in c.reason


def test_fp4_nibble_distance():
    spec = ops.resolve_spec(f"{FAMILY}::dsv4_indexer_fp4")
    a, loc = _ref_pair(spec)
    lay, page, t = _first_written(spec, loc, a)
    b = a.clone()
    col = lay.value_offset(t)
    lo = int(a[page, col]) & 15
    new = (lo + 1) if (lo & 7) < 7 else (lo - 1)  # one magnitude step, same sign
    b[page, col] = (int(a[page, col]) & 0xF0) | new
    c = compare.compare_caches(spec, b, a, out_loc=loc, tokens=37)
    assert c.max_code_distance == 1 and c.diff_values == 1 and c.ok


def test_sign_magnitude_distance_across_zero():
    t = torch.tensor([0x80, 0x00, 0x81, 0x01], dtype=torch.int64)
    o = compare._ordinal(t, 8)
    assert o.tolist() == [0, 0, -1, 1]


@pytest.mark.parametrize("spec", shipped(), ids=lambda s: s.name)
def test_run_case_dry_run_on_cpu(spec):
    """The whole test flow with the reference standing in for the kernel."""
    c = gpurun.run_case(spec, 64, seed=3, device="cpu", kernel=reference.norm_rope_store)
    assert c.ok and c.fraction == 1.0 and c.tokens == 64
    assert json.loads(json.dumps(c.to_json()))["variant"] == spec.name
    keys = {"variant", "tokens", "equal_bytes", "total_bytes", "fraction", "max_code_distance", "ok"}
    assert keys <= set(c.to_json())


# ---------------------------------------------------------------------------------------------
# random valid specs


def test_sample_specs_are_valid_diverse_and_deterministic():
    specs = sample.sample_specs(24, seed=0)
    assert len(specs) == 24
    for s in specs:
        _, problems = check_variant(s)
        assert not [p for p in problems if p.severity == "error"], s
    assert {s.store.dtype for s in specs} == {"bf16", "fp16", "fp8_e4m3", "fp4_e2m1"}
    assert any(s.store.rope_dtype for s in specs)
    assert len({s.head_dim for s in specs}) >= 3 and len({s.layout.page_size for s in specs}) >= 3
    again = sample.sample_specs(24, seed=0)
    assert [s.model_dump_json() for s in specs] == [s.model_dump_json() for s in again]
    assert len({s.name for s in specs}) == 24


def test_sampled_specs_dry_run_on_cpu():
    for spec in sample.sample_specs(8, seed=5):
        c = gpurun.run_case(spec, 9, seed=1, device="cpu", kernel=reference.norm_rope_store)
        assert c.ok, (spec.name, c.reason)


# ---------------------------------------------------------------------------------------------
# runtime.load / launch mechanics against a fake driver (kgen.launcher) and fake torch.cuda (no GPU)


class _FakeStack:
    """Records what kgen.runtime asks of the launch stack (kgen.launcher): each load, and each
    cuLaunchKernelEx with its config and the bytes its kernelParams point at (read back through the
    void** the driver would read)."""

    def __init__(self, params_size: int):
        import ctypes

        from kgen import launcher

        self.calls: list = []
        self.params_size, self.fail = params_size, False
        stack = self

        def load_cubin(cubin, symbol, device_index, *, what="kernel"):
            stack.calls.append(("load_cubin", len(cubin), symbol, device_index))
            return launcher.DriverKernel(device_index, 0xBEEF, (stack.params_size,), (None, None, 0xC0))

        class Lib:
            @staticmethod
            def cuLaunchKernelEx(cfg, fn, params, extra):  # noqa: N802 - the driver's name
                head = launcher._CONFIG.unpack(ctypes.string_at(cfg, launcher._CONFIG.size))
                grid, block, smem, stream, attrs_at, nattrs = head[:3], head[3:6], head[6], head[7], head[8], head[9]
                attrs = [struct.unpack("<I4xi", ctypes.string_at(attrs_at, 12))] if nattrs else []
                ptr = ctypes.c_void_p.from_address(params).value
                stack.calls.append(("cuLaunchKernelEx", stream, grid, block, fn,
                                    ctypes.string_at(ptr, stack.params_size), attrs, extra, smem))
                return 1 if stack.fail else 0  # CUDA_ERROR_INVALID_VALUE

        self.load_cubin, self.lib = load_cubin, Lib


@pytest.fixture
def fake_gpu(monkeypatch, tmp_path):
    import numpy as np  # noqa: F401

    from kgen import compile as kcompile
    from kgen import launcher
    from kgen.abi import NORM_ROPE_STORE

    stack = _FakeStack(NORM_ROPE_STORE.size)
    monkeypatch.setenv("KGEN_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(runtime, "gpu_problem", lambda: None)
    monkeypatch.setattr(launcher, "load_cubin", stack.load_cubin)
    monkeypatch.setattr(launcher, "_libcuda", lambda: stack.lib)
    monkeypatch.setattr(launcher, "_raise_launch", lambda name, err, grid, block: (_ for _ in ()).throw(
        launcher.LaunchError(f"{name}: kernel launch failed (error {err}: invalid argument)")))
    monkeypatch.setattr(runtime, "device_facts", lambda i: runtime.A.DeviceFacts(i, 132, 50 << 20, 90))
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda i=None: (9, 0))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i=None: "Fake H200")
    monkeypatch.setattr(torch.cuda, "init", lambda: None)

    class _Dev:
        def __init__(self, i):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *a):
            return False

    class _Stream:
        cuda_stream = 0xABC

    monkeypatch.setattr(torch.cuda, "device", _Dev)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda *a: _Stream())
    compiled = []
    real = kcompile.compile_rendered

    def spy(rendered, arch, **kw):
        compiled.append((rendered.uri, arch))
        return real(rendered, arch, progress=None)

    monkeypatch.setattr(runtime, "compile_rendered", spy)
    runtime.clear_cache()
    yield stack, compiled
    runtime.clear_cache()


def test_a_loaded_kernel_plans_with_the_drivers_cluster_counts(fake_gpu, monkeypatch):
    from kgen import launcher
    from kgen.abi import INDEXER_TOPK

    asked = []
    monkeypatch.setattr(launcher.DriverKernel, "clusters_at_once", lambda self, size: asked.append(size) or 7)
    spec = ops.resolve_spec(f"{FAMILY}::dsv4_indexer_fp8")
    writer = runtime.load(spec)
    assert asked == [] and writer.device_facts.cluster_counts == ()  # a kernel without clusters asks nothing
    stack, _ = fake_gpu
    stack.params_size = INDEXER_TOPK.size
    topk = runtime.load(spec, kernel="indexer_topk")
    assert asked == [2, 4, 8, 16] and topk.device_facts.clusters_at_once(16) == 7
    logits = torch.zeros(1, 262144)
    args = INDEXER_TOPK.check(spec, {"logits": logits, "seq_lens": torch.tensor([262144], dtype=torch.int32),
                                     "indices": torch.empty(1, 512, dtype=torch.int32)}, require_cuda=False)
    assert topk._targeted(args).grid()[0] == (16, 1, 1)  # a row of 256K keys on a wide cluster


def test_load_checks_arch_compiles_loads_and_caches(fake_gpu):
    import numpy as np

    cc, compiled = fake_gpu
    spec = ops.resolve_spec(f"{FAMILY}::dsv4_indexer_fp8")
    loaded = runtime.load(spec)
    assert compiled == [("dsv4_indexer_fp8", "sm_90a")] and loaded.arch == "sm_90a"
    (load,) = [c for c in cc.calls if c[0] == "load_cubin"]
    assert load == ("load_cubin", len(loaded.compiled.cubin), loaded.compiled.symbol, 0)
    assert runtime.load(spec) is loaded and len(compiled) == 1  # cached in-process
    args = ops.check_arguments(spec, **good_args(spec, n=1000, pages=3), require_cuda=False)
    loaded.launch(args)
    kind, stream, grid, block, f, packed, attrs, extra, smem = cc.calls[-1]
    assert kind == "cuLaunchKernelEx" and stream == 0xABC and f == 0xBEEF and smem == 0
    assert (grid[0], block[0]) == launch_shape(spec, 1000) and grid[1:] == block[1:] == (1, 1)
    # sm_90a with launch.pdl (the default): the PDL attribute, as the kernel's griddepcontrol expects
    assert loaded.pdl and attrs == [(6, 1)] and extra is None
    # the struct the kernel reads: every data pointer, then N (int32) and num_slots (int64), as the
    # C struct lays them out (4 bytes of padding after num_tokens)
    t = args.tensors
    ptrs = [0 if t[k] is None else t[k].data_ptr() for k in ("x", "weight", "bias", "freqs", "positions",
                                                               "out_loc", "cache")]
    assert packed == np.array(ptrs, dtype="<u8").tobytes() + np.int32(1000).tobytes() + bytes(4) + \
        np.int64(3 * 64).tobytes()
    n = len(cc.calls)
    run = loaded.prepare(args, programmatic_stream_serialization=True)
    run()
    run(stream=0x77)
    assert [c[1] for c in cc.calls[n:]] == [0xABC, 0x77]
    assert all(c[5] == packed and c[6] == [(6, 1)] for c in cc.calls[n:])
    n = len(cc.calls)
    empty = ops.check_arguments(spec, **good_args(spec, n=0, pages=3), require_cuda=False)
    loaded.launch(empty)  # N == 0: nothing launched
    assert len(cc.calls) == n
    off = spec.model_copy(update={"name": "no_pdl", "launch": spec.launch.model_copy(update={"pdl": False})})
    n = len(cc.calls)
    runtime.load(off).launch(args)  # launch.pdl off: a plain launch (the kernel does not wait)
    assert not runtime.load(off).pdl and cc.calls[-1][6] == []
    with pytest.raises(ValueError, match="would race"):
        runtime.load(off).prepare(args, programmatic_stream_serialization=True)
    cc.fail = True
    with pytest.raises(runtime.LaunchError, match="kernel launch failed.*invalid argument"):
        loaded.launch(args)


def test_load_refuses_wrong_arch_before_compiling(fake_gpu):
    cc, compiled = fake_gpu
    spec = ops.resolve_spec(BF16).model_copy(update={"targets": ["sm_100a", "sm_120a"]})
    with pytest.raises(KgenError) as e:
        runtime.load(spec)
    assert "Fake H200" in e.value.problems[0].message and compiled == [] and cc.calls == []


def test_device_arch_checks_the_targets_and_loads_nothing(fake_gpu):
    # kgen.ops.reader.prepare asks for the arch first, so that it loads only the cubin of the launch's shape
    cc, compiled = fake_gpu
    spec = ops.resolve_spec(BF16)
    assert runtime.device_arch(spec) == runtime.device_arch(spec, 0) == "sm_90a"
    with pytest.raises(KgenError) as e:
        runtime.device_arch(spec.model_copy(update={"targets": ["sm_100a", "sm_120a"]}))
    assert "Fake H200" in e.value.problems[0].message
    assert compiled == [] and cc.calls == []


def test_same_name_other_spec_gets_its_own_kernel(fake_gpu):
    """Hypothesis draws the name "a" for many different specs. The runtime used to share a loaded
    module by (name, arch, device), so the second "a" launched the first one's kernel and launch shape
    on its own tensors: reads and writes outside them (an illegal memory access on the GPU)."""
    cc, compiled = fake_gpu
    base = ops.resolve_spec(BF16)
    one = base.model_copy(update={"name": "a"})
    two = one.model_copy(update={"head_dim": 64, "launch": one.launch.model_copy(update={"warps_per_block": 2})})
    la, lb = runtime.load(one), runtime.load(two)
    assert la is not lb and lb.spec == two and la.spec == one
    args_a = ops.check_arguments(one, **good_args(one, n=1000), require_cuda=False)
    args_b = ops.check_arguments(two, **good_args(two, n=1000), require_cuda=False)
    assert lb.prepare(args_b).block == 64 and la.prepare(args_a).block == one.launch.warps_per_block * 32
    assert runtime.load(one.model_copy()) is la  # an equal spec still shares the module
    assert runtime.load(one.model_copy(update={"targets": ["sm_90a"]})) is la  # same cubin: same module


def test_spec_yaml_round_trips_and_a_kernel_fault_names_the_spec(tmp_path):
    from kgen.load import load_document

    spec = ops.resolve_spec(f"{FAMILY}::dsv4_latent_fp8_p64")
    text = gpurun.spec_yaml(spec)
    (tmp_path / "s.yaml").write_text(text)
    assert load_document(tmp_path / "s.yaml").variants[0].spec == spec
    e = gpurun.KernelFault(spec, 7, 3, RuntimeError("CUDA error: an illegal memory access was encountered"))
    assert "dsv4_latent_fp8_p64 at N=7" in str(e) and text in str(e) and "illegal memory access" in str(e)


def test_resolve_spec_sees_a_change_in_an_included_file(tmp_path):
    """The path cache is keyed by the content of every file read: editing a family's included spec
    (the family file itself unchanged) yields the new spec, not the cached one."""
    import shutil

    shutil.copy(BF16, tmp_path / "v.yaml")
    (tmp_path / "fam.yaml").write_text(
        "kgen: 1\nfamily: f\nvariants: [v.yaml]\n"
        "dispatch: {key: [store.dtype], require: [{store.dtype: bf16}]}\n")
    ref = f"{tmp_path / 'fam.yaml'}::dsv4_indexer_bf16"
    assert ops.resolve_spec(ref).layout.page_size == 64
    assert ops.resolve_spec(ref) is ops.resolve_spec(ref)  # unchanged files: the cached spec
    text = (tmp_path / "v.yaml").read_text()
    (tmp_path / "v.yaml").write_text(text.replace("page_size: 64", "page_size: 32")
                                     .replace("page_bytes: 16384", "page_bytes: 8192"))
    assert ops.resolve_spec(ref).layout.page_size == 32


def test_bench_inputs_are_production_like():
    """bench inputs as kgen/bench.py's docstring states them: random positions over the whole 2^20-row table (or one
    consecutive run), every slot of ceil(N / P) pages written once, x = 3 * randn."""
    torch = pytest.importorskip("torch")
    fp8 = ops.resolve_spec(f"{FAMILY}::dsv4_indexer_fp8")
    old = bench.FREQS_ROWS
    try:
        bench.FREQS_ROWS = 1 << 12  # a CPU-sized table; the logic is the same
        bench._freqs_tables.clear()
        x, w, b, f, pos, loc, cache = bench.bench_inputs(fp8, 200, seed=3, device="cpu")
        assert f.shape == (1 << 12, 64) and f.dtype == torch.float32
        assert pos.min() >= 0 and pos.max() < (1 << 12) and pos.unique().numel() > 150  # spread over the table
        assert b is None and w.shape == (128,) and x.shape == (200, 128)
        assert 2.5 < float(x.std()) < 3.5
        P = 64
        assert cache.shape[0] == -(-200 // P)
        assert loc.unique().numel() == 200 and loc.min() >= 0 and loc.max() < cache.shape[0] * P
        _, _, _, _, cpos, _, _ = bench.bench_inputs(fp8, 200, seed=3, positions="consecutive", device="cpu")
        assert torch.equal(cpos - cpos[0], torch.arange(200)) and cpos[-1] < (1 << 12)
        with pytest.raises(ValueError, match="positions"):
            bench.bench_inputs(fp8, 2, seed=0, positions="sorted", device="cpu")
    finally:
        bench.FREQS_ROWS = old
        bench._freqs_tables.clear()
    rec = bench.inputs_record("random")
    assert (rec["positions"], rec["max_pos"], rec["freqs_rows"]) == ("random", 1 << 20, 1 << 20)
    assert timing.graph_calls(1) == timing.GRAPH_MAX_CALLS and timing.graph_calls(1 << 40) == timing.GRAPH_MIN_CALLS


@pytest.mark.parametrize("args, option", [(["test", "--tokens", "-1"], "--tokens"),
                                          (["bench", "--tokens", "0"], "--tokens"),
                                          (["bench", "--tokens", "1", "--positions", "sorted"], "--positions")])
def test_gpu_commands_refuse_bad_options_before_the_gpu(args, option):
    """kgen test and kgen bench share their start (kgen.gpurun.start_gpu_command): a bad option is one
    usage line, exit 2, on any machine (it is checked before the specs and the GPU)."""
    r = _kgen(*args, str(BF16))
    assert r.returncode == 2 and r.stdout == "" and "Traceback" not in r.stderr
    [line] = r.stderr.splitlines()
    assert f"error[usage]: kgen {args[0]}: {option}" in line
    r = _kgen(*args, str(BF16), "--json") if args[0] == "test" else None
    if r is not None:  # test --json: the error document on stdout too
        assert r.returncode == 2 and json.loads(r.stdout)["errors"][0]["rule"] == "usage"


@pytest.mark.parametrize("name", ["dsv4_indexer_fp8", "dsv4_latent_fp8_uniform"])
def test_compare_fast_numerics_tolerance(name):
    """numerics fast: every value one code away passes, however many (the count is reported); two codes
    fail; an fp32 scale within compare.FAST_SCALE_ULPS ulps passes, one more fails."""
    spec = ops.resolve_spec(f"{FAMILY}::{name}").model_copy(update={"numerics": "fast"})
    a, loc = _ref_pair(spec)
    lay = compute(spec)
    written = [divmod(int(x), lay.page_size) for x in loc.tolist() if 0 <= x < a.shape[0] * lay.page_size]
    b = a.clone()
    width = 2 if spec.store.dtype == "bf16" else 1
    for page, t in written:  # the lowest bit of every token's first value: one code each, 1/128 of the values
        b[page, lay.value_offset(t) + lay.quant_row_offset] ^= 1
    c = compare.compare_caches(spec, b, a, out_loc=loc, tokens=37)
    assert c.ok, c.reason
    assert c.diff_values == len(written) and c.max_code_distance == 1
    assert c.diff_values > compare.QUANT_TOLERANCE * c.written_values  # beyond the exact mode's cap
    exact = compare.compare_caches(spec.model_copy(update={"numerics": "exact"}), b, a, out_loc=loc, tokens=37)
    assert not exact.ok
    page, t = written[0]
    b2 = a.clone()
    b2[page, lay.value_offset(t) + lay.quant_row_offset + width - 1] ^= 0x02 if width == 1 else 0x01
    c = compare.compare_caches(spec, b2, a, out_loc=loc, tokens=37)
    assert not c.ok and c.max_code_distance >= 2, c.reason
    if lay.scale_unit == 4:
        import struct

        off = lay.scale_offset(t, 0)
        bits = struct.unpack("<I", bytes(a[page, off:off + 4].tolist()))[0]
        for ulps, ok in ((compare.FAST_SCALE_ULPS, True), (compare.FAST_SCALE_ULPS + 1, False)):
            b3 = a.clone()
            b3[page, off:off + 4] = torch.tensor(list(struct.pack("<I", bits + ulps)), dtype=torch.uint8)
            c = compare.compare_caches(spec, b3, a, out_loc=loc, tokens=37)
            assert c.ok is ok and c.max_scale_distance == ulps, c.reason


@pytest.mark.parametrize("argv,message", [
    (["test", "--readers-only", "--reader-tune", "{bad", str(BF16)], "--reader-tune '{bad' is not JSON"),
    (["test", "--reader-tune", '{"kReaderWgStages": "2"}', str(BF16)], "expected null or an object of integers"),
    (["test", "--tune-cases", "2,x", str(BF16)], "--tune-cases '2,x': expected indices"),
    (["bench", "--profile", "4096", str(BF16)], "--profile '4096': expected B x keys shapes"),
    (["bench", "--reader-shapes", "0x64", str(BF16)], "--reader-shapes '0x64': expected B x keys shapes"),
])
def test_reader_options_of_test_and_bench_are_usage_errors(argv, message):
    """kgen test / kgen bench carry what `python -m kgen.reader_check` did (--readers-only, --reader-tune,
    --tune-cases, --reader-shapes, --profile); a bad value is a one-line usage error, exit 2, before any
    GPU work."""
    r = subprocess.run([sys.executable, "-m", "kgen", *argv], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.returncode == 2 and message in r.stderr and "Traceback" not in r.stderr, r.stderr
