"""The registered torch ops on CPU: schema/fake/dispatch (opcheck), torch.compile(fullgraph=True),
bytes equal to the reference for the shipped variants, fake-impl shape checks, the resolve-once
variant cache, the generated fast check (never looser than the ABI table's), the launch buffer.
No GPU and no NVRTC needed."""

from __future__ import annotations

import ctypes
import random
import struct
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from kgen import fastpath, launcher, ops, reference  # noqa: E402
from kgen import inputs as I  # noqa: E402
from kgen.abi import NORM_ROPE_STORE, ArgumentError  # noqa: E402
from kgen.layout import compute  # noqa: E402
from kgen.spec import Norm, Rope  # noqa: E402
from kgen.validate import validate_paths  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
FAMILY = ROOT / "specs" / "dsv4.yaml"
SHIPPED_FILES = [FAMILY, ROOT / "specs" / "indexer_bf16.yaml", ROOT / "specs" / "dsv32_indexer.yaml"]


def _names() -> list[str]:
    """Every shipped variant as the op names it: 'file.yaml' or 'family.yaml::name'."""
    out = []
    for f in SHIPPED_FILES:
        specs = validate_paths([f]).specs()
        rel = f.relative_to(ROOT)
        out += [str(ROOT / rel) if len(specs) == 1 else f"{ROOT / rel}::{s.name}" for s in specs]
    return out


SHIPPED = _names()
FP8 = f"{FAMILY}::dsv4_indexer_fp8"
V32 = str(ROOT / "specs" / "dsv32_indexer.yaml")


def _args(spec, inp) -> tuple:
    """The op's tensors before the cache, in the ABI table's order (None where the spec has none)."""
    return tuple(v for k, v in NORM_ROPE_STORE.arguments(spec, inp).items() if k != "cache")


def _inputs(spec, n, seed=0):
    inp = I.make_inputs(spec, n, seed=seed)
    return _args(spec, inp), inp["cache"]


def _reference_cache(spec, args, cache):
    ref = cache.clone()
    reference.norm_rope_store(spec, *args, ref)
    return ref


# ---------------------------------------------------------------------------------------------
# the op on CPU


@pytest.mark.parametrize("name", SHIPPED, ids=lambda n: n.rsplit("::", 1)[-1].rsplit("/", 1)[-1])
def test_op_writes_the_reference_bytes(name):
    spec = ops.resolve(name).spec
    for n in (1, 37):
        args, cache = _inputs(spec, n, seed=n)
        ref = _reference_cache(spec, args, cache)
        assert not torch.equal(ref, cache)  # the reference wrote something: the comparison can fail
        out = cache.clone()
        torch.ops.kgen.norm_rope_store(name, *args, out)
        assert torch.equal(out, ref)


def test_python_api_takes_a_spec_and_a_path():
    spec = ops.resolve(FP8).spec
    args, cache = _inputs(spec, 9)
    ref = _reference_cache(spec, args, cache)
    for variant in (spec, FP8, Path(str(FAMILY)).as_posix() + "::dsv4_indexer_fp8"):
        out = cache.clone()
        ops.norm_rope_store(variant, *args, out)
        assert torch.equal(out, ref)
    assert ops.variant_name(spec) == ops.variant_name(spec) and ops.variant_name(spec).startswith("spec:")


def test_argument_errors_name_the_argument_through_the_dispatcher():
    spec = ops.resolve(FP8).spec
    (x, w, b, f, p, loc), cache = _inputs(spec, 5)
    with pytest.raises(ArgumentError, match=r"^x: expected float32 \[N, 128\], got bfloat16 \[5, 128\]"):
        torch.ops.kgen.norm_rope_store(FP8, x.bfloat16(), w, b, f, p, loc, cache)
    with pytest.raises(ArgumentError, match=r"^positions: expected int64 \[N\] with N = 5, got int64 \[4\]"):
        torch.ops.kgen.norm_rope_store(FP8, x, w, b, f, p[:4], loc, cache)
    with pytest.raises(ArgumentError, match=r"^bias: must be None"):
        torch.ops.kgen.norm_rope_store(FP8, x, w, w, f, p, loc, cache)
    with pytest.raises(ArgumentError, match=r"^variant: .* has no variant named 'nope'"):
        torch.ops.kgen.norm_rope_store(f"{FAMILY}::nope", x, w, b, f, p, loc, cache)


def test_zero_tokens_is_a_noop_after_the_checks():
    spec = ops.resolve(FP8).spec
    (x, w, b, f, p, loc), cache = _inputs(spec, 5)
    before = cache.clone()
    torch.ops.kgen.norm_rope_store(FP8, x[:0], w, b, f, p[:0], loc[:0], cache)
    assert torch.equal(cache, before)


def test_cache_version_is_bumped():
    spec = ops.resolve(FP8).spec
    args, cache = _inputs(spec, 3)
    v0 = cache._version
    torch.ops.kgen.norm_rope_store(FP8, *args, cache)
    assert cache._version > v0


# ---------------------------------------------------------------------------------------------
# opcheck and torch.compile


def _no_rope_no_norm(base):
    """A spec without RoPE and without norm: freqs, positions and weight are None (Tensor? args)."""
    return base.model_copy(update={"rope": Rope(dim=0), "norm": Norm(kind="none"), "name": "norope_nonorm"})


@pytest.mark.parametrize("which", ["fp8", "layernorm", "none_args"])
def test_opcheck(which):
    if which == "none_args":
        spec = _no_rope_no_norm(ops.resolve(FP8).spec)
        name = ops.variant_name(spec)
    else:
        name = FP8 if which == "fp8" else V32
        spec = ops.resolve(name).spec
    args, cache = _inputs(spec, 11, seed=3)
    if which == "none_args":
        assert args[1] is None and args[3] is None and args[4] is None
    result = torch.library.opcheck(torch.ops.kgen.norm_rope_store.default, (name, *args, cache.clone()))
    assert set(result.values()) == {"SUCCESS"}, result


def test_torch_compile_fullgraph_cpu_matches_the_reference():
    spec = ops.resolve(FP8).spec
    torch._dynamo.reset()

    def step(x, w, f, p, loc, cache):
        torch.ops.kgen.norm_rope_store(FP8, x * 1.0, w, None, f, p, loc, cache)
        return cache

    compiled = torch.compile(step, fullgraph=True, dynamic=True)
    for n, seed in ((13, 1), (40, 2)):  # two N: one dynamic graph
        (x, w, b, f, p, loc), cache = _inputs(spec, n, seed=seed)
        ref = _reference_cache(spec, (x, w, b, f, p, loc), cache)
        out = cache.clone()
        compiled(x, w, f, p, loc, out)
        assert torch.equal(out, ref)


def test_fake_impl_checks_shapes_and_dtypes():
    from torch._subclasses.fake_tensor import FakeTensorMode

    spec = ops.resolve(FP8).spec
    (x, w, _, f, p, loc), cache = _inputs(spec, 6)
    with FakeTensorMode() as mode:
        fx, fw, ff, fp, floc, fc = (mode.from_tensor(t) for t in (x, w, f, p, loc, cache))
        assert torch.ops.kgen.norm_rope_store(FP8, fx, fw, None, ff, fp, floc, fc) is None
        with pytest.raises(ArgumentError, match=r"^x: expected float32 \[N, 128\], got float32 \[6, 64\]"):
            torch.ops.kgen.norm_rope_store(FP8, fx[:, :64].contiguous(), fw, None, ff, fp, floc, fc)
        with pytest.raises(ArgumentError, match=r"^cache: expected uint8 \[num_pages, 8448\]"):
            torch.ops.kgen.norm_rope_store(FP8, fx, fw, None, ff, fp, floc, fc[:, :100].contiguous())
        with pytest.raises(ArgumentError, match=r"^out_loc: expected int64 \[N\] with N = 6, got int64 \[5\]"):
            torch.ops.kgen.norm_rope_store(FP8, fx, fw, None, ff, fp, floc[:5], fc)


# ---------------------------------------------------------------------------------------------
# resolve once


def test_a_variant_string_is_resolved_once(monkeypatch, tmp_path):
    import shutil

    import kgen.resolve

    shutil.copy(ROOT / "specs" / "indexer_bf16.yaml", tmp_path / "v.yaml")
    name = str(tmp_path / "v.yaml")
    calls = []
    real = kgen.resolve.validate_or_raise
    monkeypatch.setattr(kgen.resolve, "validate_or_raise", lambda *a, **k: calls.append(a) or real(*a, **k))
    spec = ops.resolve(name).spec
    args, cache = _inputs(spec, 4)
    for _ in range(3):
        torch.ops.kgen.norm_rope_store(name, *args, cache)
    assert len(calls) == 1 and ops.resolve(name) is ops.resolve(name)
    # never re-read: a changed file is not seen until forget()
    (tmp_path / "v.yaml").write_text((tmp_path / "v.yaml").read_text().replace("eps: 1.0e-6", "eps: 1.0e-5"))
    assert ops.resolve(name).spec is spec
    ops.forget()
    assert ops.resolve(name).spec is not spec and len(calls) == 2


# ---------------------------------------------------------------------------------------------
# the generated check is never looser than the ABI table's


def _mutations(args: dict, rng: random.Random):
    """Argument sets around a valid one: each a single plausible mistake."""
    names = list(args)
    for _ in range(60):
        a = dict(args)
        name = rng.choice(names)
        t = a[name]
        kind = rng.choice(["none", "dtype", "shape", "noncontig", "misaligned", "extra_dim", "set", "keep"])
        if kind == "none":
            a[name] = None
        elif kind == "set" and t is None:
            a[name] = torch.zeros(3)
        elif t is None:
            continue
        elif kind == "dtype":
            a[name] = t.to(rng.choice([torch.float16, torch.int32, torch.float64, torch.uint8, torch.bfloat16]))
        elif kind == "shape" and t.dim():
            dim = rng.randrange(t.dim())
            cut = max(0, t.shape[dim] - rng.choice([1, 2]))
            a[name] = t.narrow(dim, 0, cut).contiguous()
        elif kind == "noncontig" and t.dim() == 2 and t.shape[0] > 1 and t.shape[1] > 1:
            a[name] = t.t().contiguous().t()
        elif kind == "misaligned" and t.numel() > 1:
            flat = torch.cat([t.reshape(-1)[:1], t.reshape(-1)])
            a[name] = flat[1:].view(t.shape)
        elif kind == "extra_dim":
            a[name] = t.unsqueeze(0)
        yield a


@pytest.mark.parametrize("name", [FP8, V32, "norope"])
def test_generated_check_is_stricter_than_the_table(name):
    if name == "norope":
        spec = _no_rope_no_norm(ops.resolve(FP8).spec)
    else:
        spec = ops.resolve(name).spec
    lay = compute(spec)
    check = fastpath.build_check(NORM_ROPE_STORE, spec, lay, allow_cpu=True)
    args, cache = _inputs(spec, 9)
    good = dict(zip(NORM_ROPE_STORE.tensor_names, (*args, cache)))
    got = check(**good)
    table = NORM_ROPE_STORE.check(spec, good, require_cuda=False)
    assert got is not None and got[1] == tuple(table.dims[s] for s in fastpath._symbols(NORM_ROPE_STORE, spec, lay))
    assert got[2] == table.values()[:len(NORM_ROPE_STORE.tensors)]
    refused = 0
    for a in _mutations(good, random.Random(7)):
        fast = check(**a)
        try:
            NORM_ROPE_STORE.check(spec, a, require_cuda=False)
            table_ok = True
        except ArgumentError:
            table_ok = False
        assert table_ok or fast is None, {k: (getattr(t, "dtype", None), getattr(t, "shape", None))
                                          for k, t in a.items()}
        refused += fast is None
    assert refused > 20  # the mutations do hit the checks


# ---------------------------------------------------------------------------------------------
# the launch buffer


@pytest.mark.parametrize("pdl", [False, True])
def test_launch_buffer_layout(pdl):
    abi = NORM_ROPE_STORE
    buf = launcher.PreparedLaunch(abi.struct_format, 256, pdl=pdl)
    values = (0x7000_0000_0010, 0x7000_0000_0020, 0, 0x7000_0000_0040, 0x7000_0000_0050, 0x7000_0000_0060,
              0x7000_0000_0070, 4096, 4096 * 64)
    buf.pack((129, 1, 1), 0, 0xABCDEF, *values)
    gx, gy, gz, bx, by, bz, smem, stream, attrs, nattrs = buf.config_fields()
    assert (gx, gy, gz, bx, by, bz, smem, stream) == (129, 1, 1, 256, 1, 1, 0, 0xABCDEF)
    buf.pack((3, 4, 5), 70000, 0x11, *values)  # the reader's 3-D grid and opted-in shared memory
    assert buf.config_fields()[:8] == (3, 4, 5, 256, 1, 1, 70000, 0x11)
    assert buf.param_bytes() == abi.pack(values)  # the struct exactly as kgen.abi lays it out
    (ptr,) = buf.kernel_params()
    assert ctypes.string_at(ptr, abi.size) == abi.pack(values)  # kernelParams[0] -> the struct
    assert nattrs == (1 if pdl else 0)
    if pdl:
        attr_id, value = struct.unpack("<I4xi", ctypes.string_at(attrs, 12))
        assert (attr_id, value) == (launcher.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION, 1)
    else:
        assert attrs == 0


# ---------------------------------------------------------------------------------------------
# indexer_logits: registered with its schema; CPU = kgen.score's Torch path


def test_indexer_logits_is_registered():
    schema = str(torch.ops.kgen.indexer_logits.default._schema)
    assert schema.startswith("kgen::indexer_logits(str variant, Tensor q, Tensor weights, Tensor cache, "
                             "Tensor block_table, Tensor seq_lens, int max_seq_len) -> Tensor")


def test_indexer_logits_cpu_is_the_torch_path():
    score = pytest.importorskip("kgen.score")
    name = f"{FAMILY}::dsv4_indexer_fp8"
    spec = ops.resolve(name).spec
    lay = compute(spec)
    g = torch.Generator().manual_seed(0)
    B, H, pages, max_pages = 2, 4, 6, 3
    n = pages * lay.page_size
    inp = I.make_inputs(spec, n, seed=1, num_pages=pages, skip_fraction=0.0, overflow_locs=False)
    cache = inp["cache"]
    reference.norm_rope_store(spec, *_args(spec, inp), cache)
    q = torch.randn(B, 1, H, spec.head_dim, generator=g).bfloat16()
    weights = torch.rand(B, H, generator=g)
    block_table = torch.tensor([[0, 2, 4], [1, 3, 5]], dtype=torch.int32)
    seq_lens = torch.tensor([70, 130], dtype=torch.int32)
    got = torch.ops.kgen.indexer_logits(name, q, weights, cache, block_table, seq_lens, 192)
    want = score.indexer_logits_torch(spec, q, weights, cache, block_table, seq_lens, 192)
    assert got.shape == (B, 192) and torch.equal(got, want)
    assert torch.isfinite(got[0, :70]).all() and torch.isinf(got[0, 70:]).all()
    assert lay.page_size * max_pages >= 130


def test_launcher_hands_the_driver_the_packed_launch(monkeypatch):
    """The ctypes launch path against a stand-in for libcuda's cuLaunchKernelEx that reads what a
    driver would read: the config struct, the kernelParams array and the Params it points to."""
    abi = NORM_ROPE_STORE
    seen = []
    codes = [launcher.CUDA_ERROR_INVALID_CONTEXT, 0, 0, 719]

    def fake_launch(cfg, fn, params, extra):
        head = struct.unpack("<7I4xQQI4x", ctypes.string_at(cfg, 56))
        (struct_ptr,) = struct.unpack("<Q", ctypes.string_at(params, 8))
        seen.append((head, fn, ctypes.string_at(struct_ptr, abi.size), extra))
        return codes.pop(0)

    class FakeLib:
        cuLaunchKernelEx = staticmethod(fake_launch)

    made_current = []
    monkeypatch.setattr(launcher, "_libcuda", lambda: FakeLib)
    kernel = launcher.DriverKernel(0, 0xF00, (abi.size,))
    monkeypatch.setattr(kernel, "make_current", lambda: made_current.append(1))
    monkeypatch.setattr(launcher, "_raise_launch", lambda name, err, grid, block: (_ for _ in ()).throw(
        launcher.LaunchError(f"{name}: error {err}")))
    prepared = launcher.PreparedLaunch(abi.struct_format, 256, pdl=True)
    run = launcher.launcher(kernel, prepared, backend="ctypes", name="k")
    values = (16, 32, 0, 48, 64, 80, 96, 7, 64 * 3)
    run((5, 1, 1), 0, 0x1234, *values)  # first: no context on this thread -> made current, launched again
    assert made_current == [1] and len(seen) == 2
    head, fn, params, extra = seen[-1]
    assert head[:8] == (5, 1, 1, 256, 1, 1, 0, 0x1234) and head[9] == 1 and fn == 0xF00 and extra is None
    assert params == abi.pack(values)
    run((1, 1, 1), 0, 0, *values[:-2], 1, 64)
    assert seen[-1][2] == abi.pack((*values[:-2], 1, 64))
    with pytest.raises(launcher.LaunchError, match="k: error 719"):
        run((1, 1, 1), 0, 0, *values)


# ---------------------------------------------------------------------------------------------
# the CPU op's argument checks (issue 23, classes 12 and 16): a located, named error, never a wrap,
# an IndexError or a silent no-op


def _cpu_case():
    spec = ops.resolve_spec(str(ROOT / "specs" / "indexer_bf16.yaml"))
    (x, w, b, f, p, loc), cache = _inputs(spec, 6)
    return spec, [x, w, b, f, p, loc], cache


@pytest.mark.parametrize("bad,message", [
    (lambda a: a[4].fill_(-1), r"^positions: values in \[-1, -1\] but freqs has \d+ rows \(valid: \[0, \d+\]\)"),
    (lambda a: a[4].fill_(10**6), r"^positions: values in \[1000000, 1000000\] but freqs has"),
    (lambda a: a.__setitem__(3, a[3][:0]), r"^positions: .* but freqs has 0 rows \(it has no row to read\)"),
])
def test_cpu_op_refuses_positions_outside_freqs(bad, message):
    spec, args, cache = _cpu_case()
    bad(args)
    before = cache.clone()
    with pytest.raises(ArgumentError, match=message):
        torch.ops.kgen.norm_rope_store(ops.variant_name(spec), *args, cache)
    assert torch.equal(cache, before)  # nothing written


def test_cpu_op_names_a_meta_tensor_among_cpu_ones():
    spec, args, cache = _cpu_case()
    args[0] = args[0].to("meta")
    with pytest.raises(ArgumentError, match=r"^weight: on cpu, but x is on meta: all arguments must share one"):
        torch.ops.kgen.norm_rope_store(ops.variant_name(spec), *args, cache)
    spec, args, cache = _cpu_case()
    with pytest.raises(ArgumentError, match=r"^cache: on meta, but x is on cpu"):
        torch.ops.kgen.norm_rope_store(ops.variant_name(spec), *args, cache.to("meta"))
