"""kgen/fastop.cpp (the native kernel of torch.ops.kgen.norm_rope_store, kgen/native.py) on the CPU.

The same library the GPU uses is built here and installed on a test op's CPU key with stub entry
points: the launch stub records the CUlaunchConfig and the Params bytes the kernel hands to the
driver. Checked: the bytes equal kgen.abi's packing of the same arguments, PDL and the grid go into
the config, the cache's version is bumped, and every argument the ABI table refuses (and every
shape or context not registered) goes to the checked twin, whose located message reaches the caller.
Skipped when this machine cannot build it (no C++ compiler or torch headers): the op then keeps its
Python kernel (kgen.native's fallback)."""

from __future__ import annotations

import ctypes
import itertools
import struct
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from kgen import native, ops  # noqa: E402
from kgen.abi import ArgumentError  # noqa: E402
from kgen.bench import bench_inputs  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
FP8 = str(ROOT / "specs" / "dsv4" / "indexer_fp8.yaml")
CONTEXT = 0x7770
STREAM_HANDLE = 0x1234
FUNCTION = 0xABC0
CONFIG = struct.Struct("<7I4xQQI4x")
_namespaces = itertools.count()

LAUNCH = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p),
                          ctypes.c_void_p)
STREAM = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_int32, ctypes.POINTER(ctypes.c_void_p))
CURRENT = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_void_p))


class Harness:
    """A test op `kgen_native_test<i>::op` with the native kernel at its CPU key; the twin
    `checked` runs the ABI table's check (require_cuda=False) and registers the shape, as
    kgen.ops.Variant.launch_checked does on the GPU."""

    def __init__(self, variant: str, pdl: bool = False, cluster: bool = False):
        self.v = ops.resolve(variant)
        self.name = variant
        self.launches: list[tuple[tuple, int, bytes, bytes]] = []
        self.checked_calls = 0
        self.context = CONTEXT
        size = self.v.abi.size

        @LAUNCH
        def launch(cfg, fn, params, _extra):
            fields = CONFIG.unpack(ctypes.string_at(cfg, CONFIG.size))
            attr = ctypes.string_at(fields[8], 72 * fields[9]) if fields[9] else b""
            self.launches.append((CONFIG.unpack(ctypes.string_at(cfg, CONFIG.size)), fn,
                                  ctypes.string_at(params[0], size), attr))
            return 0

        @STREAM
        def stream(_dev, out):
            out[0] = STREAM_HANDLE
            return 0

        @CURRENT
        def current(out):
            out[0] = self.context
            return 0

        self._keep = (launch, stream, current)
        ns = f"kgen_native_test{next(_namespaces)}"
        self.lib = torch.library.Library(ns, "FRAGMENT")  # noqa: TOR901
        self.lib.define("op" + ops.NORM_ROPE_STORE_SCHEMA)
        self.lib.define("checked" + ops.NORM_ROPE_STORE_SCHEMA)
        self.lib.impl("op", lambda *a: None, "CPU")  # shadowed by the native kernel, as on the GPU
        self.lib.impl("checked", self._checked, "CPU")
        try:
            self.native = native.install_for_tests(ns, "op", "checked", "CPU",
                                                   *(ctypes.cast(f, ctypes.c_void_p).value for f in self._keep))
        except RuntimeError as e:
            pytest.skip(f"the native kernel cannot be built here: {e}")
        v = self.v
        self.handle = self.native.add_variant(variant, v._native_table(), len(v._symbols), v.abi.size, 16)
        assert self.handle
        one = bench_inputs(v.spec, 1, 0, device="cpu")
        self.threads = v.abi.check(v.spec, dict(zip(v.names, one)), require_cuda=False).grid()[1]
        self.native.set_device(self.handle, 0, FUNCTION, CONTEXT, (self.threads, 1, 1), pdl)
        if cluster:
            self.native.set_cluster(self.handle, True)
        self.op = getattr(torch.ops, ns).op

    def _checked(self, variant, *tensors):
        self.checked_calls += 1
        v = ops.resolve(variant)
        a = v.abi.check(v.spec, dict(zip(v.names, tensors)), require_cuda=False, layout=v.layout)
        blocks = a.grid()[0] if a.num_tokens else 0
        self.native.add_shape(self.handle, tuple(a.dims[s] for s in v._symbols),
                              (blocks, 1, 1) if blocks else (0, 0, 0), 0, v.abi.pack(a.values(lambda _n, _t: 0)))

    def expected_params(self, args) -> bytes:
        a = self.v.abi.check(self.v.spec, dict(zip(self.v.names, args)), require_cuda=False, layout=self.v.layout)
        return self.v.abi.pack(a.values())


@pytest.fixture(scope="module")
def fp8():
    return Harness(FP8)


def test_a_registered_shape_launches_natively_with_the_abi_bytes(fp8):
    args = bench_inputs(fp8.v.spec, 300, 0, device="cpu")
    fp8.op(fp8.name, *args)  # first call: the twin checks and registers the shape
    assert fp8.checked_calls == 1 and fp8.launches == []
    fast0, _ = fp8.native.counts()
    version = args[-1]._version
    fp8.op(fp8.name, *args)
    assert fp8.checked_calls == 1 and len(fp8.launches) == 1
    config, function, params, _ = fp8.launches[-1]
    blocks, threads = fp8.v.abi.check(fp8.v.spec, dict(zip(fp8.v.names, args)), require_cuda=False).grid()
    assert config == (blocks, 1, 1, threads, 1, 1, 0, STREAM_HANDLE, 0, 0) and threads == fp8.threads
    assert function == FUNCTION
    assert params == fp8.expected_params(args)
    assert args[-1]._version == version + 1  # the cache is declared mutated
    assert fp8.native.counts()[0] == fast0 + 1


def test_the_pointers_follow_the_tensors(fp8):
    args = bench_inputs(fp8.v.spec, 300, 1, device="cpu")
    fp8.op(fp8.name, *args)
    other = tuple(None if t is None else t.clone() for t in args)
    fp8.op(fp8.name, *other)
    assert fp8.launches[-1][2] == fp8.expected_params(other) != fp8.expected_params(args)


def _mutations(args):
    """(what, arguments) the ABI table refuses, one argument wrong each."""
    x, w, b, f, p, loc, cache = args
    yield "x dtype", (x.double(), w, b, f, p, loc, cache)
    yield "x rank", (x[None], w, b, f, p, loc, cache)
    yield "x fixed size", (x[:, :64].contiguous(), w, b, f, p, loc, cache)
    yield "x strides", (x.t().contiguous().t(), w, b, f, p, loc, cache)
    yield "weight missing", (x, None, b, f, p, loc, cache)
    yield "bias present", (x, w, torch.zeros_like(w), f, p, loc, cache)
    yield "positions length", (x, w, b, f, p[:-1], loc, cache)
    yield "out_loc dtype", (x, w, b, f, p, loc.int(), cache)
    yield "cache row bytes", (x, w, b, f, p, loc, cache[:, :-16].contiguous())
    yield "cache misaligned", (x, w, b, f, p, loc, torch.empty(cache.numel() + 16, dtype=torch.uint8)[8:]
                               [:cache.numel()].view(cache.shape))
    yield "x not a tensor", (x.tolist()[:1] and 3, w, b, f, p, loc, cache)


@pytest.mark.parametrize("what", [m[0] for m in _mutations(bench_inputs(
    ops.resolve(FP8).spec, 8, 0, device="cpu"))])
def test_refused_arguments_reach_the_located_message_and_never_launch(fp8, what):
    args = bench_inputs(fp8.v.spec, 8, 2, device="cpu")
    fp8.op(fp8.name, *args)  # registers N = 8
    fp8.op(fp8.name, *args)
    bad = dict(_mutations(args))[what]
    launched, checked = len(fp8.launches), fp8.checked_calls
    if what == "x not a tensor":  # the schema itself refuses it, before any kernel
        with pytest.raises((TypeError, RuntimeError)):
            fp8.op(fp8.name, *bad)
        return
    with pytest.raises(ArgumentError) as e:
        fp8.op(fp8.name, *bad)
    assert len(fp8.launches) == launched and fp8.checked_calls == checked + 1
    assert str(e.value).split(":")[0] in {"x", "weight", "bias", "freqs", "positions", "out_loc", "cache"}


def test_unknown_variant_shape_or_context_goes_to_the_twin(fp8):
    args = bench_inputs(fp8.v.spec, 40, 3, device="cpu")
    fp8.op(fp8.name, *args)
    n_launch, n_checked = len(fp8.launches), fp8.checked_calls
    fp8.op(fp8.name, *args)
    assert (len(fp8.launches), fp8.checked_calls) == (n_launch + 1, n_checked)
    fp8.context = CONTEXT + 1  # another context is current: the native path declines
    try:
        fp8.op(fp8.name, *args)
    finally:
        fp8.context = CONTEXT
    assert (len(fp8.launches), fp8.checked_calls) == (n_launch + 1, n_checked + 1)
    fp8.op(f"{fp8.name}::dsv4_indexer_fp8", *args)  # the same spec by another string: not registered natively
    assert (len(fp8.launches), fp8.checked_calls) == (n_launch + 1, n_checked + 2)
    with pytest.raises(ArgumentError, match="no variant named 'nope'"):
        fp8.op(f"{fp8.name}::nope", *args)


def test_zero_tokens_launch_nothing_and_bump_the_version(fp8):
    args = bench_inputs(fp8.v.spec, 0, 0, device="cpu")
    fp8.op(fp8.name, *args)
    launched, version = len(fp8.launches), args[-1]._version
    fp8.op(fp8.name, *args)
    assert len(fp8.launches) == launched and args[-1]._version == version + 1


def test_pdl_sets_the_launch_attribute():
    h = Harness(FP8, pdl=True)
    args = bench_inputs(h.v.spec, 64, 4, device="cpu")
    h.op(h.name, *args)
    h.op(h.name, *args)
    config, _, params, attr = h.launches[-1]
    assert config[-1] == 1 and config[-2] != 0
    assert struct.unpack_from("<I4xi", attr) == (6, 1)  # CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
    assert params == h.expected_params(args)


def test_a_cluster_variant_gets_the_cluster_dimension_beside_pdl():
    h = Harness(FP8, pdl=True, cluster=True)
    args = bench_inputs(h.v.spec, 64, 4, device="cpu")
    h.op(h.name, *args)
    h.op(h.name, *args)
    config, _, params, attr = h.launches[-1]
    assert config[0] > 1 and config[-1] == 2
    # programmatic stream serialization, then CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION (grid.x, 1, 1)
    assert struct.unpack_from("<I4xi", attr) == (6, 1)
    assert struct.unpack_from("<I4xIII", attr, 72) == (4, config[0], 1, 1)
    assert params == h.expected_params(args)


def test_the_native_table_follows_the_abi_table():
    v = ops.resolve(FP8)
    table = v._native_table()
    assert [t["arg"] for t in table] == list(range(1, len(v.abi.tensors) + 1))
    offsets = {s.field.name: s.offset for s in v.abi.slots}
    for f, t in zip(v.abi.tensors, table):
        assert t["offset"] == offsets[f.name] and t["present"] == f.present(v.spec)
        if t["present"]:
            assert len(t["dims"]) == len(f.shape(v.spec, v.layout)) and t["dtype"] == f.dtype(v.spec)


def test_without_a_compiler_the_op_keeps_its_python_kernel(monkeypatch, tmp_path):
    monkeypatch.setattr(native, "_state", {})
    monkeypatch.setattr(native, "_compiler", lambda: None)
    monkeypatch.setenv("KGEN_CACHE_DIR", str(tmp_path))  # nothing built there
    assert native.install("kgen", "norm_rope_store", "_norm_rope_store_checked") is None
    assert native.status() == "off: no C++ compiler (set CXX, or install g++)"
    assert not (tmp_path / "_native").exists()


def test_switched_off_by_the_environment(monkeypatch):
    monkeypatch.setattr(native, "_state", {})
    monkeypatch.setenv("KGEN_NATIVE", "0")
    assert native.install("kgen", "norm_rope_store", "_norm_rope_store_checked") is None
    assert native.status() == "off (KGEN_NATIVE=0)"


def test_a_failed_build_says_why_and_leaves_nothing(monkeypatch, tmp_path):
    fake = tmp_path / "cxx"
    fake.write_text("#!/bin/sh\necho 'fastop.cpp:1: error: no' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setattr(native, "_compiler", lambda: str(fake))
    monkeypatch.setenv("KGEN_CACHE_DIR", str(tmp_path / "cache"))
    with pytest.raises(RuntimeError, match="the C..? build failed: -std=c\\+\\+20: fastop.cpp:1: error: no"):
        native.build()
    assert list((tmp_path / "cache" / "_native").iterdir()) == []


def test_the_build_key_follows_the_compilers_version(tmp_path):
    """An upgraded compiler at the same path gets a new library, never the old build's (the key hashes
    the toolchain, not only its path)."""
    cxx = tmp_path / "cxx"

    def key_with(version: str) -> str:
        cxx.write_text(f"#!/bin/sh\necho '{version}'\n")
        cxx.chmod(0o755)
        return native._build_key(str(cxx))

    old, same, new = key_with("cc 13.2.0"), key_with("cc 13.2.0"), key_with("cc 14.1.0")
    assert old == same != new


# ---------------------------------------------------------------------------------------------
# the reader's op: the logits allocated natively, max_seq_len from the int argument, the cubin and the
# tensor map per shape (and per cache address)


class ReaderHarness:
    """A test op with indexer_logits' schema and the native kernel at its CPU key; its twin `checked`
    plans the call with the reader's KernelOp tables (kgen.ops.registry), registers the shape (its own
    cubin: READER_FUNCTION) and this cache's tensor map (MAP), as the GPU's checked twin does; with
    `uses_map=False` the shape's cubin reads no map (the fp4 reader's) and the twin teaches none."""

    MAP = bytes(range(128))
    READER_FUNCTION = 0xDEF0

    def __init__(self, variant: str, *, uses_map: bool = True):
        from kgen.ops import reader

        self.uses_map = uses_map
        self.op_py = reader._op(ops.variant_name(variant))
        self.launches: list = []
        self.checked_calls = 0
        op = self.op_py
        size = op.abi.size

        @LAUNCH
        def launch(cfg, fn, params, _extra):
            self.launches.append((CONFIG.unpack(ctypes.string_at(cfg, CONFIG.size)), fn,
                                  ctypes.string_at(params[0], size)))
            return 0

        @STREAM
        def stream(_dev, out):
            out[0] = STREAM_HANDLE
            return 0

        self._keep = (launch, stream)
        ns = f"kgen_native_test{next(_namespaces)}"
        self.lib = torch.library.Library(ns, "FRAGMENT")  # noqa: TOR901
        self.lib.define("op" + reader.INDEXER_LOGITS_SCHEMA)
        self.lib.define("checked" + reader.INDEXER_LOGITS_SCHEMA)
        self.lib.impl("op", lambda *a: None, "CPU")
        self.lib.impl("checked", self._checked, "CPU")
        try:
            self.native = native.install_for_tests(ns, "op", "checked", "CPU",
                                                   *(ctypes.cast(f, ctypes.c_void_p).value for f in self._keep), None)
        except RuntimeError as e:
            pytest.skip(f"the native kernel cannot be built here: {e}")
        maps = [s for s in op.abi.slots if s.field.kind == "tensor_map"]
        self.handle = self.native.add_variant(
            op.key, op._native_table(), len(op._symbols), size, 16,
            int_args={arg: op._symbols.index(sym) for sym, arg in op.int_args.items()}, keyed_by_device=True,
            map_offset=maps[0].offset, map_source=list(op.names).index("cache"))
        assert self.handle
        self.ns = ns
        self.call = getattr(torch.ops, ns).op

    def _checked(self, variant, q, weights, cache, block_table, seq_lens, max_seq_len):
        from kgen.ops import reader

        self.checked_calls += 1
        op = self.op_py
        a = reader.check(op.spec, q, weights, cache, block_table, seq_lens, max_seq_len, require_cuda=False)
        sizes = tuple(a.dims[s] for s in op._symbols)
        self.native.add_shape(self.handle, sizes, (3, a.dims["B"], 1), 70000, op.abi.pack(a.values(lambda _n, _t: 0)),
                              device=0, function=self.READER_FUNCTION, context=0, block=(288, 1, 1), pdl=True,
                              uses_map=self.uses_map)
        if self.uses_map:
            self.native.add_map(self.handle, sizes, 0, cache.data_ptr(), self.MAP)
        return a.tensors["logits"]


def test_the_reader_launches_natively_and_returns_its_logits():
    from kgen import reader_check as rc
    from kgen.reference import load_spec

    h = ReaderHarness(FP8)
    spec = load_spec(ROOT / "specs" / "dsv4" / "indexer_fp8.yaml")
    q, w, cache, table, lens, msl = rc.make_case(spec, [5, 70], device="cpu", seed=2)
    name = h.op_py.key
    first = h.call(name, q, w, cache, table, lens, msl)  # unknown shape: the twin
    assert h.checked_calls == 1 and h.launches == [] and first.shape == (2, msl)
    out = h.call(name, q, w, cache, table, lens, msl)  # now native: allocated and launched in C++
    assert h.checked_calls == 1 and len(h.launches) == 1
    assert out.shape == (2, msl) and out.dtype == torch.float32 and out.data_ptr() != first.data_ptr()
    cfg, fn, params = h.launches[0]
    assert cfg[:7] == (3, 2, 1, 288, 1, 1, 70000) and cfg[7] == STREAM_HANDLE and fn == h.READER_FUNCTION
    slots = {s.field.name: s for s in h.op_py.abi.slots}
    assert params[:128] == h.MAP  # the tensor map of this cache, at offset 0
    for name_, t in (("q", q), ("weights", w), ("cache", cache), ("block_table", table), ("seq_lens", lens),
                     ("logits", out)):
        off = slots[name_].offset
        assert struct.unpack_from("<Q", params, off)[0] == t.data_ptr(), name_
    assert struct.unpack_from("<i", params, slots["max_seq_len"].offset)[0] == msl
    # another cache tensor (another layer): no map for its address yet -> the twin teaches it
    other = cache.clone()
    h.call(name, q, w, other, table, lens, msl)
    assert h.checked_calls == 2
    h.call(name, q, w, other, table, lens, msl)
    assert h.checked_calls == 2 and len(h.launches) == 2
    # another max_seq_len (the int argument): another shape
    h.call(name, q, w, cache, table, lens, msl + 64)
    assert h.checked_calls == 3
    # refused arguments reach the located message of the twin, never a launch
    with pytest.raises(ArgumentError, match=r"^q: expected float8_e4m3fn"):
        h.call(name, q.to(torch.bfloat16), w, cache, table, lens, msl)
    assert len(h.launches) == 2


def test_a_shape_whose_cubin_reads_no_map_launches_natively_for_any_cache():
    """The fp4 reader's cubin reads no tensor map: its shapes launch natively with the map slot zero, for
    every cache tensor, without waiting for a map that is never taught (the H200 found every such call
    declined)."""
    from kgen import reader_check as rc
    from kgen.reference import load_spec

    h = ReaderHarness(FP8, uses_map=False)
    spec = load_spec(ROOT / "specs" / "dsv4" / "indexer_fp8.yaml")
    q, w, cache, table, lens, msl = rc.make_case(spec, [5, 70], device="cpu", seed=2)
    name = h.op_py.key
    h.call(name, q, w, cache, table, lens, msl)
    h.call(name, q, w, cache, table, lens, msl)
    h.call(name, q, w, cache.clone(), table, lens, msl)  # another layer's cache: still native
    assert h.checked_calls == 1 and len(h.launches) == 2
    for _cfg, _fn, params in h.launches:
        assert params[:128] == bytes(128)
