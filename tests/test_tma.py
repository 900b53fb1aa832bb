"""The reader's tensor map (kgen.tma, kgen.abi's TensorMap field `cache_map` of indexer_logits): the
geometry it describes from kgen.layout's numbers, the value rule (a map only where the launch runs the TMA
variant, zeros elsewhere), the driver call's arguments and its refusal named, the memo; on a GPU, a real
encode."""

from __future__ import annotations

import dataclasses
import types

import pytest

torch = pytest.importorskip("torch")

from kgen import layout as L  # noqa: E402
from kgen import reader_check as rc  # noqa: E402
from kgen import reader_layout as RL  # noqa: E402
from kgen import reader_plan as RP  # noqa: E402
from kgen import runtime, tma  # noqa: E402
from kgen.abi import INDEXER_LOGITS, NO_TENSOR_MAP, ArgumentError  # noqa: E402
from kgen.ops import reader as ops_reader  # noqa: E402
from kgen.reference import load_spec  # noqa: E402
from strategies import ROOT  # noqa: E402

SPECS = ROOT / "specs"
FP8, BF16, FP4 = "dsv4/indexer_fp8.yaml", "indexer_bf16.yaml", "dsv4/indexer_fp4.yaml"
TMA = {"kReaderWgTma": 1}


def _lay(path: str) -> L.Layout:
    return L.compute(load_spec(SPECS / path))


# ---------------------------------------------------------------------------------------------
# geometry: every number from the layout


def test_fp8_geometry_is_the_132_byte_key_layout():
    lay = _lay(FP8)
    # 128 B of key + a 4-B scale per key; the scales sit after the page's 64 key rows
    assert (lay.row_bytes, lay.page_size, lay.page_bytes) == (128, 64, 8448)
    g = tma.cache_map_geometry(lay, 10)
    assert g.dims == (128, 1, 64, 10)  # one 128-B chunk per row, 64 keys per page, 10 pages
    assert g.strides == (128, 128, 8448)
    assert g.box == (128, 1, 64, 1) and g.element_strides == (1, 1, 1, 1)
    # the box is one tile of one chunk: no tile crosses a page, the box's bytes end before the scales
    assert g.box[2] == RL.READER_WG_TILE_KEYS and lay.page_size % g.box[2] == 0
    assert g.box[2] * g.strides[1] <= lay.scale_region_offset


def test_bf16_geometry_has_two_chunks_per_row():
    lay = _lay(BF16)
    assert (lay.row_bytes, lay.page_size, lay.page_bytes) == (256, 64, 16384)
    g = tma.cache_map_geometry(lay, 3)
    assert g.dims == (128, 2, 64, 3) and g.strides == (128, 256, 16384) and g.box == (128, 1, 64, 1)
    # the map covers exactly the pages' bytes: the last element's offset + 1 is the tensor's size
    last = sum((d - 1) * s for d, s in zip(g.dims, (1, *g.strides), strict=True))
    assert last + 1 == 3 * lay.page_bytes


def test_geometry_follows_the_layout_not_constants():
    # another page size and head_dim: the geometry moves with the layout's numbers
    spec = load_spec(SPECS / BF16)
    data = spec.model_dump()
    data["head_dim"] = 256
    data["layout"] = {**data["layout"], "page_size": 128}
    other = type(spec).model_validate(data)
    lay = L.compute(other)
    g = tma.cache_map_geometry(lay, 5)
    assert g.dims == (128, lay.row_bytes // 128, 128, 5) == (128, 4, 128, 5)
    assert g.strides == (128, lay.row_bytes, lay.page_bytes)


# ---------------------------------------------------------------------------------------------
# the value rule: Params.cache_map is a map only where the launch runs the TMA variant


def _args(path: str, *, target: str | None, tune: dict | None):
    spec = load_spec(SPECS / path)
    case = rc.make_case(spec, [5, 70], device="cpu", seed=3)
    a = ops_reader.check(spec, *case, require_cuda=False)
    return dataclasses.replace(a, target=target, tune=tune)


class FakeDriver:
    """cuda.bindings.driver's names kgen.tma uses, with a recording cuTensorMapEncodeTiled."""

    def __init__(self, result: int = 0):
        from cuda.bindings import driver

        self.real, self.result, self.calls = driver, result, []
        for name in ("cuuint64_t", "cuuint32_t", "CUtensorMapDataType", "CUtensorMapInterleave", "CUtensorMapSwizzle",
                     "CUtensorMapL2promotion", "CUtensorMapFloatOOBfill", "CUresult"):
            setattr(self, name, getattr(driver, name))

    def cuTensorMapEncodeTiled(self, *args):  # noqa: N802 - the driver's name
        self.calls.append(args)
        words = [len(self.calls), *range(100, 115)]  # 16 words, the call's number first
        return self.CUresult(self.result), types.SimpleNamespace(opaque=[self.cuuint64_t(w) for w in words])

    def cuGetErrorName(self, err):  # noqa: N802
        return 0, b"CUDA_ERROR_INVALID_VALUE"

    def cuGetErrorString(self, err):  # noqa: N802
        return 0, b"invalid argument"


@pytest.fixture
def fake_driver(monkeypatch):
    pytest.importorskip("cuda.bindings.driver")
    fake = FakeDriver()
    monkeypatch.setattr(tma, "driver", lambda: fake)
    monkeypatch.setattr(tma, "_memo", {})
    return fake


@pytest.mark.parametrize("path,target,tune", [
    (FP8, None, TMA),  # the CPU emulation: no cubin
    (FP8, "sm_90a", {"kReaderWgTma": 0}),
    (FP8, "sm_90", TMA),  # no wgmma
    (FP8, "sm_100a", TMA),
    (BF16, "sm_80", TMA),
    (FP8, "sm_90a", {**TMA, "kReaderWgmma": 0}),  # the mma.sync path
    (FP4, "sm_90a", TMA),  # a layout the TMA variant does not read
])
def test_no_map_unless_the_tma_variant_runs(fake_driver, path, target, tune):
    a = _args(path, target=target, tune=tune)
    values = a.values(encode=tma.encode_map)
    assert values[0] == NO_TENSOR_MAP and a.pack(tma.encode_map)[:128] == bytes(128)
    assert fake_driver.calls == []  # nothing asked of the driver


@pytest.mark.parametrize("tune", [TMA, None])  # None: the shipped default, the TMA variant where it reads
@pytest.mark.parametrize("path", [FP8, BF16])
def test_tma_variant_gets_the_encoded_map_of_the_cache(fake_driver, path, tune):
    a = _args(path, target="sm_90a", tune=tune)
    assert RL.reader_wg_tma(a.layout, tune) and RP.launch_tma(a)
    packed = a.pack(tma.encode_map)
    assert packed[:8] == (1).to_bytes(8, "little") and packed[8:16] == (100).to_bytes(8, "little")
    (call,) = fake_driver.calls
    d = fake_driver
    cache = a.tensors["cache"]
    g = tma.cache_map_geometry(a.layout, cache.shape[0])
    assert call[0] == d.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_UINT8 and call[1] == 4
    assert call[2] == cache.data_ptr()
    assert [int(x) for x in call[3]] == list(g.dims) and [int(x) for x in call[4]] == list(g.strides)
    assert [int(x) for x in call[5]] == list(g.box) and [int(x) for x in call[6]] == [1, 1, 1, 1]
    assert call[7:] == (d.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
                        d.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_128B,
                        d.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                        d.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE)
    # the pointers follow the map: q at 128
    assert int.from_bytes(packed[128:136], "little") == a.tensors["q"].data_ptr()


def test_map_is_memoized_per_cache_tensor(fake_driver):
    a = _args(FP8, target="sm_90a", tune=TMA)
    first = a.values(encode=tma.encode_map)[0]
    enc = tma.encode_map
    assert a.values(encode=enc)[0] is first and len(fake_driver.calls) == 1  # the same cache: no second encode
    other = dataclasses.replace(a, tensors={**a.tensors, "cache": a.tensors["cache"].clone()})
    assert other.values(encode=enc)[0] != first and len(fake_driver.calls) == 2  # another address: its own map
    fewer = a.tensors["cache"][:1]  # the same address, fewer pages: another geometry
    assert tma.encode_map(fewer, tma.cache_map_geometry(a.layout, 1)) != first and len(fake_driver.calls) == 3
    for i in range(tma.MEMO_MAX + 5):  # bounded
        t = torch.zeros(1 + i, a.layout.page_bytes, dtype=torch.uint8)
        tma.encode_map(t, tma.cache_map_geometry(a.layout, 1 + i))
    assert len(tma._memo) <= tma.MEMO_MAX


def test_empty_cache_has_no_map(fake_driver):
    a = _args(FP8, target="sm_90a", tune=TMA)
    empty = dataclasses.replace(a, tensors={**a.tensors, "cache": a.tensors["cache"][:0]})
    assert empty.values(encode=tma.encode_map)[0] == NO_TENSOR_MAP and fake_driver.calls == []


def test_refused_encode_names_the_cache(fake_driver):
    fake_driver.result = 1  # CUDA_ERROR_INVALID_VALUE
    a = _args(BF16, target="sm_90a", tune=TMA)
    with pytest.raises(ArgumentError, match=r"^cache: the driver cannot encode its tensor map "
                                            r"\(CUDA_ERROR_INVALID_VALUE: invalid argument\).*dims \[128, 2, 64, "):
        a.values(encode=tma.encode_map)


def test_missing_driver_library_is_an_argument_error(monkeypatch):
    def broken(*_a):
        raise RuntimeError("libcuda.so.1 not found")

    pytest.importorskip("cuda.bindings.driver")
    fake = FakeDriver()
    fake.cuTensorMapEncodeTiled = broken  # type: ignore[method-assign]
    monkeypatch.setattr(tma, "driver", lambda: fake)
    with pytest.raises(ArgumentError, match=r"^cache: .*RuntimeError: libcuda.so.1 not found"):
        tma.encode(0x1000, tma.cache_map_geometry(_lay(FP8), 2))


# ---------------------------------------------------------------------------------------------
# GPU: the driver encodes it


GPU = runtime.gpu_problem()


@pytest.mark.gpu
@pytest.mark.skipif(GPU is not None, reason=f"needs a CUDA GPU: {GPU}")
@pytest.mark.parametrize("path", [FP8, BF16])
def test_driver_encodes_the_cache_map(path):
    if torch.cuda.get_device_capability()[0] < 9:
        pytest.skip("tensor maps need compute capability 9.0 or higher")
    spec = load_spec(SPECS / path)
    case = rc.make_case(spec, [5, 70, 300], device="cuda", seed=3)
    a = dataclasses.replace(ops_reader.check(spec, *case), target="sm_90a", tune=TMA)
    got = a.values(encode=tma.encode_map)[0]
    assert len(got) == 128 and any(got)
    assert a.values(encode=tma.encode_map)[0] is got  # memoized
    assert tma.encode_map(case[2], tma.cache_map_geometry(a.layout, case[2].shape[0])) is got
    assert a.pack(tma.encode_map)[:128] == got and INDEXER_LOGITS.slots[0].field.name == "cache_map"
    # the driver checks what it is given: an address off its 16-B alignment is refused, named
    with pytest.raises(ArgumentError, match="^cache: the driver cannot encode its tensor map"):
        tma.encode(case[2].data_ptr() + 8, tma.cache_map_geometry(a.layout, case[2].shape[0]))
