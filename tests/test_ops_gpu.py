"""The registered op on the GPU: the kernel through torch.ops.kgen.norm_rope_store for every shipped
variant (compared with the reference like `kgen test`), CUDA-graph capture, torch.compile on CUDA
(fullgraph, the cache written in place: no copy of it), the per-call fast path, a fresh thread,
both launch backends and the PDL launch attribute. Marked `gpu`; skipped cleanly without a GPU."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from kgen import runtime

REASON = runtime.gpu_problem()
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(REASON is not None, reason=f"needs a CUDA GPU: {REASON}")]

ROOT = Path(__file__).resolve().parents[1]
FAMILY = ROOT / "specs" / "dsv4.yaml"
FP8 = f"{FAMILY}::dsv4_indexer_fp8"
BF16 = str(ROOT / "specs" / "indexer_bf16.yaml")


def _shipped() -> list[str]:
    from kgen.validate import validate_paths

    out = []
    for f in (FAMILY, ROOT / "specs" / "indexer_bf16.yaml", ROOT / "specs" / "dsv32_indexer.yaml"):
        specs = validate_paths([f]).specs()
        out += [str(f) if len(specs) == 1 else f"{f}::{s.name}" for s in specs]
    return out


def _inputs(spec, n, seed=0):
    from kgen import inputs as I
    from kgen.abi import NORM_ROPE_STORE

    inp = I.make_inputs(spec, n, seed=seed, device="cuda")
    args = tuple(v for k, v in NORM_ROPE_STORE.arguments(spec, inp).items() if k != "cache")
    return args, inp["cache"]


def _reference(spec, args, cache):
    from kgen import reference

    ref = cache.clone()
    reference.norm_rope_store(spec, *args, ref)
    return ref


def _assert_same(spec, got, ref, loc, n):
    """Equal as `kgen test` defines it (bf16: every byte; quantized: at most 1e-4 of the values one
    code apart, scales and untouched bytes exact)."""
    import torch

    from kgen.compare import compare_caches

    torch.cuda.synchronize()
    c = compare_caches(spec, got, ref, out_loc=loc, tokens=n)
    assert c.ok, f"{spec.name} N={n}: {c.reason}; {c.examples[:4]}"


@pytest.mark.parametrize("name", _shipped(), ids=lambda n: n.rsplit("::", 1)[-1].rsplit("/", 1)[-1])
def test_eager_op_matches_the_reference(name):
    import torch

    from kgen import ops

    spec = ops.resolve(name).spec
    for n in (1, 7, 4097):
        args, cache = _inputs(spec, n, seed=n)
        ref = _reference(spec, args, cache)
        out = cache.clone()
        torch.ops.kgen.norm_rope_store(name, *args, out)
        _assert_same(spec, out, ref, args[5], n)


def test_op_switches_to_the_large_launch_shape_byte_exact():
    """The fp8 indexer's per-N launch (launch.large_min_tokens): through the op, just below, at and above
    the threshold (the grid of each shape cached by the fast path), the bytes are the reference's."""
    import torch

    from kgen import ops
    from kgen.layout import launch_shape

    spec = ops.resolve(FP8).spec
    m = spec.launch.large_min_tokens
    assert m > 0 and spec.launch.large_tokens_per_warp != spec.launch.tokens_per_warp
    for n in (m - 1, m, 2 * m + 3):
        args, cache = _inputs(spec, n, seed=n)
        ref = _reference(spec, args, cache)
        out = cache.clone()
        for _ in range(2):  # the slow path, then the cached shape
            out.copy_(cache)
            torch.ops.kgen.norm_rope_store(FP8, *args, out)
            _assert_same(spec, out, ref, args[5], n)
    w = spec.launch.warps_per_block
    assert launch_shape(spec, m)[0] == -(-m // (w * spec.launch.large_tokens_per_warp))
    assert launch_shape(spec, m - 1)[0] == -(-(m - 1) // (w * spec.launch.tokens_per_warp))


def test_cuda_graph_capture_of_the_op():
    import torch

    from kgen import ops

    spec = ops.resolve(FP8).spec
    args, cache = _inputs(spec, 4097, seed=3)
    eager = cache.clone()
    torch.ops.kgen.norm_rope_store(FP8, *args, eager)  # also loads the kernel: nothing loads in capture
    g_cache = cache.clone()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=s):
        torch.ops.kgen.norm_rope_store(FP8, *args, g_cache)
    torch.cuda.synchronize()
    assert torch.equal(g_cache, cache)  # capture records, it does not run
    g.replay()
    torch.cuda.synchronize()
    assert torch.equal(g_cache, eager)
    g_cache.copy_(cache)
    g.replay()
    torch.cuda.synchronize()
    assert torch.equal(g_cache, eager)  # replayable


def test_torch_compile_fullgraph_on_cuda_writes_in_place():
    import torch

    from kgen import ops

    spec = ops.resolve(FP8).spec
    torch._dynamo.reset()

    def step(x, w, f, p, loc, cache):
        torch.ops.kgen.norm_rope_store(FP8, x, w * 1.0, None, f, p, loc, cache)
        return cache

    compiled = torch.compile(step, fullgraph=True, dynamic=True)
    for n, seed in ((64, 1), (4097, 2)):
        (x, w, b, f, p, loc), cache = _inputs(spec, n, seed=seed)
        eager = cache.clone()
        torch.ops.kgen.norm_rope_store(FP8, x, w, b, f, p, loc, eager)
        out = cache.clone()
        compiled(x, w, f, p, loc, out)  # compiles (first N)
        out.copy_(cache)
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        compiled(x, w, f, p, loc, out)
        torch.cuda.synchronize()
        extra = torch.cuda.max_memory_allocated() - base
        assert torch.equal(out, eager)
        # w * 1.0 (512 B) is the only new buffer: the cache is not functionalized into a copy
        assert extra < min(cache.numel(), 4096), extra


def test_fast_path_skips_the_table_check_for_a_known_shape(monkeypatch):
    import torch

    from kgen import ops

    v = ops.resolve(BF16)
    args, cache = _inputs(v.spec, 100)
    torch.ops.kgen.norm_rope_store(BF16, *args, cache)  # slow path: loads, remembers the shape
    calls = []
    real = v.abi.check
    monkeypatch.setattr(v.abi.__class__, "check", lambda self, *a, **k: calls.append(1) or real(*a, **k))
    out = cache.clone()
    torch.ops.kgen.norm_rope_store(BF16, *args, out)
    assert calls == []  # the generated check and the prepacked launch only
    (x, *rest) = args
    torch.ops.kgen.norm_rope_store(BF16, x[:50], rest[0], rest[1], rest[2], rest[3][:50], rest[4][:50], out)
    assert calls == [1]  # a new N: the table's check once
    torch.cuda.synchronize()


def test_native_kernel_launches_known_shapes_and_refuses_bad_arguments():
    import torch

    from kgen import native, ops
    from kgen.abi import ArgumentError

    v = ops.resolve(FP8)
    args, cache = _inputs(v.spec, 4096, seed=11)
    ref = _reference(v.spec, args, cache)
    out = cache.clone()
    torch.ops.kgen.norm_rope_store(FP8, *args, out)  # loads, installs the native kernel, learns the shape
    kernel = ops._native_kernel()
    if kernel is None:
        pytest.skip(f"no native kernel on this machine: {native.status()}")
    launched, declined = kernel.counts()
    again = cache.clone()
    version = again._version
    torch.ops.kgen.norm_rope_store(FP8, *args, again)
    assert kernel.counts() == (launched + 1, declined)
    assert again._version == version + 1
    _assert_same(v.spec, again, ref, args[5], 4096)
    x, *rest = args
    with pytest.raises(ArgumentError, match=r"^x: expected float32"):
        torch.ops.kgen.norm_rope_store(FP8, x.double(), *rest, again)
    with pytest.raises(ArgumentError, match=r"^cache: "):
        torch.ops.kgen.norm_rope_store(FP8, *args, again[:, :-16])
    assert kernel.counts()[0] == launched + 1  # neither launched


def test_fresh_thread_and_side_stream():
    import torch

    from kgen import ops

    spec = ops.resolve(BF16).spec
    args, cache = _inputs(spec, 300, seed=9)
    ref = _reference(spec, args, cache)
    out = cache.clone()
    errors = []

    def work():
        try:
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.default_stream())
            with torch.cuda.stream(s):
                torch.ops.kgen.norm_rope_store(BF16, *args, out)
            s.synchronize()
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    t = threading.Thread(target=work)
    t.start()
    t.join()
    assert not errors, errors
    assert torch.equal(out, ref)


@pytest.mark.parametrize("backend,pdl", [("ctypes", True), ("bindings", False), ("bindings", True)])
def test_launch_backends_and_pdl(backend, pdl):
    import torch

    from kgen import launcher, ops

    v = ops.resolve(BF16)
    args, cache = _inputs(v.spec, 257, seed=4)
    ref = _reference(v.spec, args, cache)
    torch.ops.kgen.norm_rope_store(BF16, *args, cache.clone())  # loads
    dev = torch.cuda.current_device()
    k = v.kernels[dev]
    run = launcher.launcher(k["kernel"], launcher.PreparedLaunch(v.abi.struct_format, k["block"], pdl=pdl),
                            backend=backend, name=v.spec.name)
    out = cache.clone()
    checked = v.abi.check(v.spec, dict(zip(v.names, (*args, out))))
    # nothing in flight before it: with the PDL attribute a kernel that does not wait in-kernel
    # (griddepcontrol.wait) could overlap its predecessor
    torch.cuda.synchronize()
    run((checked.grid()[0], 1, 1), 0, torch.cuda.current_stream().cuda_stream, *checked.values())
    torch.cuda.synchronize()
    assert torch.equal(out, ref)


def test_prepared_raw_launcher():
    import torch

    from kgen import ops

    spec = ops.resolve(FP8).spec
    args, cache = _inputs(spec, 4096, seed=6)
    eager = cache.clone()
    torch.ops.kgen.norm_rope_store(FP8, *args, eager)
    out = cache.clone()
    run = ops.prepare(FP8, *args, out)
    run()
    torch.cuda.synchronize()
    assert torch.equal(out, eager)
