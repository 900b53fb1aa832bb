"""kgen.abi: the one description of a kernel's parameter struct. Its C layout agrees with a C++
compiler's, the packed bytes are what the struct holds, the rendered struct is the table, and the
argument checks name the argument (alignment included)."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from kgen import abi as A
from kgen.abi import INDEXER_LOGITS, NORM_ROPE_STORE, KernelAbi, Scalar, Tensor, TensorMap
from kgen.render import abi_values, environment, render_variant
from strategies import ROOT

BF16 = ROOT / "specs" / "indexer_bf16.yaml"


def _table(*fields) -> KernelAbi:
    return KernelAbi(kernel="probe", version=3, fields=fields, grid=lambda a: (1, 32))


def _t(name: str) -> Tensor:
    return Tensor(name, "float", lambda s: "float32", lambda s, lay: ("N",), "[N]", lambda s, lay, d: "[N]")


def _s(name: str, kind: str) -> Scalar:
    return Scalar(name, kind, lambda d, lay: 0, name, source="a")


MIXED = _table(_s("a", "int32"), _t("p"), _s("b", "float32"), _s("c", "int32"), _s("d", "int64"), _s("e", "int32"))
MAP_BYTES = bytes(range(7, 7 + 128))
# a tensor map after a 4-B scalar: 60 B of padding before it, and the struct padded to 64 B
GEOMETRY = object()  # what the field describes; the launch stack's encoder turns it into bytes
MAPPED = _table(_s("a", "int32"), TensorMap("m", "p", "a map of p", lambda a: GEOMETRY), _t("p"), _s("b", "int64"))


def _encode(tensor, geometry) -> bytes:
    assert geometry is GEOMETRY and tensor is not None  # the field's source tensor and its geometry
    return MAP_BYTES
# the one definition of kgen::TensorMap, as the kernels and the CPU shim compile it
TENSOR_MAP_CXX = re.search(r"struct alignas\(64\) TensorMap \{.*?\};",
                           (ROOT / "templates/include/kgen/memory.cuh").read_text(), re.S).group(0)


def test_struct_layout_follows_the_c_rules():
    assert [(s.field.name, s.offset) for s in MIXED.slots] == [("a", 0), ("p", 8), ("b", 16), ("c", 20), ("d", 24),
                                                               ("e", 32)]
    assert MIXED.size == 40 and MIXED.alignment == 8  # padded to the largest member
    assert [(s.field.name, s.offset) for s in NORM_ROPE_STORE.slots][-2:] == [("num_tokens", 56), ("num_slots", 64)]
    assert NORM_ROPE_STORE.size == 72 and NORM_ROPE_STORE.param_sizes == (72,)


def test_tensor_map_field_is_128_bytes_aligned_to_64():
    assert [(s.field.name, s.offset, s.size) for s in MAPPED.slots] == [("a", 0, 4), ("m", 64, 128), ("p", 192, 8),
                                                                         ("b", 200, 8)]
    assert MAPPED.alignment == 64 and MAPPED.size == 256 and MAPPED.param_sizes == (256,)
    assert MAPPED.struct_format == "<i" + "x" * 60 + "128sQq" + "x" * 48
    assert MAPPED.cxx_fields()[1]["type"] == "kgen::TensorMap" and MAPPED.tensor_maps == (MAPPED.fields[1],)
    data = MAPPED.pack([-1, MAP_BYTES, 0x1122, 5])
    assert data[64:192] == MAP_BYTES and data[4:64] == bytes(60) and data[208:] == bytes(48)
    assert MAPPED.unpack(data)["m"] == MAP_BYTES
    buf = A.ParamBuffer(MAPPED, [-1, MAP_BYTES, 0x1122, 5])
    assert buf.bytes() == data and buf.address % 64 == 0  # the struct where cuda.h would align a CUtensorMap


def _mapped_args(geometry=None) -> A.Args:
    from kgen.resolve import resolve_spec

    table = _table(*(f if geometry is None or not isinstance(f, TensorMap)
                     else TensorMap(f.name, f.source, f.doc, geometry) for f in MAPPED.fields))
    spec = resolve_spec(BF16)
    from kgen.layout import compute

    class T:  # a tensor's data pointer
        def data_ptr(self):
            return 0x7F00

    return A.Args(table, spec, compute(spec), {"p": T()}, {}, {"a": 3, "b": 4})


def test_args_values_encode_tensor_maps():
    args = _mapped_args()
    assert args.values(encode=_encode) == (3, MAP_BYTES, 0x7F00, 4)
    assert args.values(lambda _n, _t: 0) == (3, bytes(128), 0, 4)  # no encoder: zeros (the CPU runners' params.bin)
    assert args.pack(_encode)[64:192] == MAP_BYTES
    assert _mapped_args(lambda a: None).values(encode=_encode)[1] == bytes(128)  # the launch reads no map
    with pytest.raises(A.KgenError, match="m: its encoder returned 100 bytes, a tensor map has 128"):
        args.values(encode=lambda t, g: bytes(100))  # struct would pad it silently: the ABI refuses it


def test_write_launch_files_zero_the_maps(tmp_path):
    args = _mapped_args()
    A.write_launch_files(args, tmp_path, {"p": b"0123456789abcdef"})
    packed = (tmp_path / "params.bin").read_bytes()
    assert len(packed) == 256 and packed[64:192] == bytes(128) and packed[192:200] == bytes(8)
    assert (tmp_path / "pointers.txt").read_text() == "192 p 0\n"


def test_pack_is_the_struct_bytes():
    import struct

    data = MIXED.pack([-1, 0x1122334455667788, 1.5, 7, -(2**40), 9])
    assert len(data) == MIXED.size
    assert data[0:4] == struct.pack("<i", -1) and data[4:8] == bytes(4)
    assert data[8:16] == struct.pack("<Q", 0x1122334455667788) and data[16:20] == struct.pack("<f", 1.5)
    assert data[24:32] == struct.pack("<q", -(2**40)) and data[36:40] == bytes(4)
    assert MIXED.unpack(data)["d"] == -(2**40)
    buf = A.ParamBuffer(MIXED, [1, 2, 3.0, 4, 5, 6])
    assert buf.bytes() == MIXED.pack([1, 2, 3.0, 4, 5, 6])
    import ctypes

    # what the driver reads: kernel_params is a void** whose one entry points at the struct
    assert ctypes.string_at(ctypes.c_void_p.from_address(buf.kernel_params).value, MIXED.size) == buf.bytes()


@pytest.mark.skipif(shutil.which("g++") is None, reason="no host C++ compiler")
@pytest.mark.parametrize("table", [MIXED, NORM_ROPE_STORE, MAPPED, INDEXER_LOGITS],
                         ids=["mixed", "norm_rope_store", "mapped", "indexer_logits"])
def test_a_cxx_compiler_agrees_with_the_layout(table, tmp_path):
    """The rendered struct and its static_asserts compile: the compiler lays the struct out as
    kgen.abi computes it. A wrong offset in the asserts does not compile."""
    env = environment()
    values = abi_values(table)
    body = env.get_template("abi/params.j2").render(abi=values)
    # the rendered asserts check member sizes (NVRTC 13.0 has no __builtin_offsetof); the host compiler
    # checks every offset of kgen.abi's table here too
    offsets = "".join(f"static_assert(__builtin_offsetof(cfg::Params, {s.field.name}) == {s.offset}, "
                      f"\"offset of {s.field.name}\");\n" for s in table.slots)
    src = ("namespace kgen { typedef int int32_t; typedef long long int64_t; typedef unsigned char uint8_t;\n"
           + TENSOR_MAP_CXX + " }\n"
           "struct cfg {\n  using In = float;\n" + body + "};\n" + offsets)
    f = tmp_path / "abi.cc"
    f.write_text(src)
    r = subprocess.run(["g++", "-std=c++17", "-fsyntax-only", str(f)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    last = table.slots[-1]
    f.write_text(src.replace(f"{last.field.name}) == {last.size}", f"{last.field.name}) == {last.size + 4}"))
    r = subprocess.run(["g++", "-std=c++17", "-fsyntax-only", str(f)], capture_output=True, text=True)
    assert r.returncode != 0 and f"size of {last.field.name}" in r.stderr


def test_rendered_kernel_takes_the_tables_struct():
    from kgen.ops import resolve_spec

    rv = render_variant(resolve_spec(BF16))
    config = rv.files[f"{rv.uri}/config.cuh"]
    fields = config.split("struct Params {", 1)[1].split("};", 1)[0]
    names = [line.split("//")[0].split()[-1].rstrip(";") for line in fields.strip().splitlines()]
    assert names == [f.name for f in NORM_ROPE_STORE.fields]
    assert f"kAbiVersion = {NORM_ROPE_STORE.version};" in config
    assert f"sizeof(Params) == {NORM_ROPE_STORE.size}" in config
    kernel_cu = rv.files[f"{rv.uri}/kernel.cu"]
    assert f"using KgenConfig = kgen_cfg::{rv.uri};" in kernel_cu
    assert "template __global__ void kgen::norm_rope_store<KgenConfig>(const __grid_constant__ KgenConfig::Params);" \
        in kernel_cu


def test_bind_names_and_positions():
    t = NORM_ROPE_STORE
    assert list(t.bind((1, 2), {"bias": 3, "freqs": 4, "positions": 5, "out_loc": 6, "cache": 7}).values()) == \
        [1, 2, 3, 4, 5, 6, 7]
    with pytest.raises(TypeError, match="no argument 'nope'"):
        t.bind((), {"nope": 1})
    with pytest.raises(TypeError, match="missing argument.*cache"):
        t.bind((1, 2, 3, 4, 5, 6), {})
    with pytest.raises(TypeError, match="given twice"):
        t.bind((1,), {"x": 1})


def test_misaligned_tensor_is_named():
    torch = pytest.importorskip("torch")
    from kgen.layout import compute
    from kgen.ops import check_arguments, resolve_spec

    spec = resolve_spec(BF16)
    pb = compute(spec).page_bytes
    n = 5
    args = dict(x=torch.randn(n, 128), weight=torch.ones(128), bias=None, freqs=torch.randn(10, 64),
                positions=torch.zeros(n, dtype=torch.int64), out_loc=torch.arange(n),
                cache=torch.zeros(2 * pb + 1, dtype=torch.uint8)[1:].view(2, pb))  # contiguous, 1 byte off
    assert args["cache"].is_contiguous()
    with pytest.raises(A.ArgumentError, match=r"^cache: its data is not 16-byte aligned"):
        check_arguments(spec, **args, require_cuda=False)
    args["cache"] = args["cache"].clone()
    c = check_arguments(spec, **args, require_cuda=False)
    assert (c.num_tokens, c.num_pages, c.num_slots) == (n, 2, 2 * 64)
    assert c.values()[-2:] == (n, 128) and c.grid() == (1, 128)  # one block of 4 warps (launch defaults)


def test_scalar_out_of_range_is_named():
    torch = pytest.importorskip("torch")
    from kgen.ops import resolve_spec

    spec = resolve_spec(BF16)

    class Meta:  # a tensor's metadata (too long for int32 num_tokens) without allocating it
        def __init__(self, dtype, shape):
            self.dtype, self.shape = dtype, shape

        def is_contiguous(self):
            return True

        def numel(self):
            return 0

    n = 2**31
    args = {"x": Meta(torch.float32, (n, 128)), "weight": torch.ones(128), "freqs": torch.randn(4, 64),
            "positions": Meta(torch.int64, (n,)), "out_loc": Meta(torch.int64, (n,)),
            "cache": torch.zeros(1, 16384, dtype=torch.uint8)}
    with pytest.raises(A.ArgumentError, match=r"^x: 2147483648 does not fit the kernel's int32 num_tokens"):
        NORM_ROPE_STORE.check(spec, NORM_ROPE_STORE.arguments(spec, args), require_cuda=False)
    args = {**args, "x": Meta(torch.float32, (n - 1, 128)), "positions": Meta(torch.int64, (n - 1,)),
            "out_loc": Meta(torch.int64, (n - 1,))}
    assert NORM_ROPE_STORE.check(spec, NORM_ROPE_STORE.arguments(spec, args), require_cuda=False).num_tokens == n - 1
