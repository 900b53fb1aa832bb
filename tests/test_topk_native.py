"""The native chain behind torch.ops.kgen.indexer_topk (kgen/fastop.cpp's kgen_native_install_chain, kgen.native
.chain) on the CPU: the reader's and the top-k's native kernels installed on test ops' CPU keys with stub entry
points (the launch stub records each launch), chained as kgen.ops.topk chains them. Checked: one call launches
the reader then the top-k, the top-k's logits pointer is the one the reader was handed, the result is the top-k's
[rows, k] int32 tensor; a bad k launches nothing and reaches the checked twin; a shape the top-k does not know
goes to its own twin after the reader launched. Skipped where the library cannot be built here."""

from __future__ import annotations

import ctypes
import itertools
import struct

import pytest

torch = pytest.importorskip("torch")

from kgen import native  # noqa: E402
from kgen import reader_check as RC  # noqa: E402
from kgen.abi import ArgumentError  # noqa: E402
from kgen.ops import topk as T  # noqa: E402
from kgen.ops.reader import INDEXER_LOGITS_SCHEMA  # noqa: E402
from kgen.ops.reader import INT_ARGS as READER_INT_ARGS  # noqa: E402
from kgen.ops.registry import kernel_op  # noqa: E402
from kgen.resolve import resolve_spec  # noqa: E402
from kgen.score import check_topk_k, topk_reference  # noqa: E402

FP8 = "specs/dsv4.yaml::dsv4_indexer_fp8"
CONTEXT, STREAM_HANDLE, READER_FN, SELECT_FN = 0x7770, 0x1234, 0xAB00, 0xCD00
CONFIG = struct.Struct("<7I4xQQI4x")
LAUNCH = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p),
                          ctypes.c_void_p)
STREAM = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_int32, ctypes.POINTER(ctypes.c_void_p))
CURRENT = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_void_p))
_namespaces = itertools.count()


class Chained:
    """The chain on test ops' CPU keys (`device` "cuda": their CUDA keys, CUDA tensors); `entry_points` (launch,
    stream, context addresses) replace the recording stubs (bench/results/topk2-2026-12-03/host_cpu_chain.py: C
    stubs, for timing; bench/results/h200-2026-12-07-s30/host_parts.py: the same on a GPU, the driver left out)."""

    def __init__(self, entry_points: list[int] | None = None, device: str = "cpu"):
        dispatch_key = device.upper()
        self.spec = resolve_spec(FP8)
        self.reader = kernel_op(FP8, "indexer_logits", int_args=READER_INT_ARGS)
        self.select = kernel_op(FP8, "indexer_topk", int_args=T.INT_ARGS, op_name=T.SELECT)
        self.launches: list[tuple[int, tuple, bytes]] = []
        self.twin_calls = {"logits": 0, "select": 0, "chain": 0}
        sizes = {READER_FN: self.reader.abi.size, SELECT_FN: self.select.abi.size}

        @LAUNCH
        def launch(cfg, fn, params, _extra):
            fields = CONFIG.unpack(ctypes.string_at(cfg, CONFIG.size))
            self.launches.append((fn, fields, ctypes.string_at(params[0], sizes[fn])))
            return 0

        @STREAM
        def stream(_dev, out):
            out[0] = STREAM_HANDLE
            return 0

        @CURRENT
        def current(out):
            out[0] = CONTEXT
            return 0

        self._keep = (launch, stream, current)
        ns = self.ns = f"kgen_chain_test{next(_namespaces)}"
        self.lib = torch.library.Library(ns, "FRAGMENT")  # noqa: TOR901
        for name, schema in (("logits", INDEXER_LOGITS_SCHEMA), ("select", T.SELECT_SCHEMA), ("chain", T.TOPK_SCHEMA)):
            self.lib.define(name + schema)
            self.lib.define(f"{name}_checked" + schema)
            self.lib.impl(name, lambda *a: None, dispatch_key)  # shadowed by the native kernels
        self.lib.impl("logits_checked", self._logits_checked, dispatch_key)
        self.lib.impl("select_checked", self._select_checked, dispatch_key)
        self.lib.impl("chain_checked", self._chain_checked, dispatch_key)
        ptrs = entry_points or [ctypes.cast(f, ctypes.c_void_p).value for f in self._keep]
        try:
            self.n_reader = native.install_for_tests(ns, "logits", "logits_checked", dispatch_key, *ptrs)
            self.n_select = native.install_for_tests(ns, "select", "select_checked", dispatch_key, *ptrs)
        except RuntimeError as e:
            pytest.skip(f"the native kernel cannot be built here: {e}")
        self.h = {}
        for key, op, nat, fn in (("logits", self.reader, self.n_reader, READER_FN),
                                 ("select", self.select, self.n_select, SELECT_FN)):
            h = nat.add_variant(FP8, op._native_table(), len(op._symbols), op.abi.size, 16,
                                int_args={arg: op._symbols.index(sym) for sym, arg in op.int_args.items()},
                                keyed_by_device=True)
            assert h
            if op.abi.cluster_x:
                nat.set_cluster(h, True)
            nat.set_device(h, 0, fn, CONTEXT, (1024, 1, 1), True)
            self.h[key] = (nat, h, op, fn)
        self.chain = native.chain(self.n_reader, self.n_select, ns, "chain", "chain_checked", dispatch_key,
                                  T.CHAIN_READER_ARGS, T.CHAIN_SELECT_ARGS, T.CHAIN_K)
        ops = getattr(torch.ops, ns)
        self.op, self.logits_op, self.select_op = ops.chain, ops.logits, ops.select

    def _register(self, key: str, tensors: dict):
        nat, h, op, fn = self.h[key]
        a = op.abi.check(op.spec, tensors, require_cuda=False, layout=op.layout)
        blocks, threads = a.grid()
        grid = blocks if isinstance(blocks, tuple) else (int(blocks), 1, 1)
        nat.add_shape(h, tuple(a.dims[s] for s in op._symbols), grid, int(op.abi.shared_bytes(a)),
                      op.abi.pack(a.values(lambda _n, _t: 0)), device=0, function=fn, context=CONTEXT,
                      block=(threads, 1, 1), pdl=True)

    def _logits_checked(self, variant, q, w, cache, table, lens, msl):
        self.twin_calls["logits"] += 1
        logits = torch.zeros((q.shape[0] * q.shape[1], msl), dtype=torch.float32, device=q.device)
        self._register("logits", {"cache_map": None, "q": q, "weights": w, "cache": cache, "block_table": table,
                                  "seq_lens": lens, "logits": logits})
        return logits

    def _select_checked(self, variant, logits, lens, k):
        self.twin_calls["select"] += 1
        check_topk_k(k)
        out = torch.empty((logits.shape[0], k), dtype=torch.int32, device=logits.device)
        self._register("select", {"logits": logits, "seq_lens": lens, "indices": out})
        return topk_reference(logits, lens, logits.shape[0] // lens.shape[0], k).to(torch.int32)

    def _chain_checked(self, variant, q, w, cache, table, lens, msl, k):
        self.twin_calls["chain"] += 1
        check_topk_k(k)
        return self.select_op(variant, self.logits_op(variant, q, w, cache, table, lens, msl), lens, k)


def _pointer(op, params: bytes, name: str) -> int:
    at = next(s.offset for s in op.abi.slots if s.field.name == name)
    return struct.unpack_from("<Q", params, at)[0]


@pytest.fixture(scope="module")
def chained():
    return Chained()


@pytest.fixture(scope="module")
def case():
    return RC.make_case(resolve_spec(FP8), [17000, 300], next_n=2, seed=2, device="cpu")  # a cluster of 8


def test_one_call_launches_the_reader_then_the_top_k(chained, case):
    first = chained.op(FP8, *case, 512)  # the twins teach both shapes
    assert chained.twin_calls == {"logits": 1, "select": 1, "chain": 1} and chained.launches == []
    assert first.shape == (4, 512)
    got = chained.op(FP8, *case, 512)
    assert chained.twin_calls == {"logits": 1, "select": 1, "chain": 1}
    (fa, ca, pa), (fb, cb, pb) = chained.launches
    assert (fa, fb) == (READER_FN, SELECT_FN)
    assert _pointer(chained.select, pb, "logits") == _pointer(chained.reader, pa, "logits") != 0
    assert _pointer(chained.select, pb, "indices") == got.data_ptr()
    assert got.dtype == torch.int32 and got.shape == (4, 512)
    # the top-k's launch: grid (cluster, rows, 1), the cluster dimension and PDL attributes
    assert cb[:3] == (8, 4, 1) and cb[-1] == 2 and cb[-3] == STREAM_HANDLE
    assert chained.chain.counts()[0] >= 1


def test_a_bad_k_launches_nothing(chained, case):
    chained.op(FP8, *case, 512)
    before, twins = len(chained.launches), chained.twin_calls["chain"]
    with pytest.raises(ArgumentError, match=r"^k: expected an int in \[1, 65536\], got 0$"):
        chained.op(FP8, *case, 0)
    assert len(chained.launches) == before and chained.twin_calls["chain"] == twins + 1


def test_a_shape_the_top_k_lacks_goes_to_its_twin_after_the_reader(chained, case):
    chained.op(FP8, *case, 512)
    before, select_twins = len(chained.launches), chained.twin_calls["select"]
    got = chained.op(FP8, *case, 7)  # the reader's shape is known, the top-k's (k = 7) is not
    assert [f for f, _, _ in chained.launches[before:]] == [READER_FN]
    assert chained.twin_calls["select"] == select_twins + 1 and got.shape == (4, 7)
    chained.op(FP8, *case, 7)  # now both launch natively
    assert [f for f, _, _ in chained.launches[before + 1:]] == [READER_FN, SELECT_FN]
