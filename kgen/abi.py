"""The kernel ABI: one table per kernel, and everything derived from it.

A kgen kernel takes ONE parameter, a struct passed by value (`const __grid_constant__ Params p`, as
SGLang's kernels take one params struct). Its fields are described here, once, by a `KernelAbi`
table. From that table come:

* the C++ `struct Params` rendered into each variant's config (`cxx_fields`), with static_asserts on
  its size and every offset, so the compiler checks that C++ and this table agree;
* the explicit instantiation's signature (`cxx_parameter`);
* the packed argument buffer the launcher hands to the driver (`struct_format`, `ParamBuffer`): the
  same bytes, laid out by the C rules from the same table (`Args.values`: each field's value, a tensor
  map's encoded by its field's encoder);
* the argument checks of the Python op and `kgen test` (`KernelAbi.check`): dtype, shape, presence,
  contiguity, 16-byte alignment, device, each failure naming the argument;
* the loaded-kernel check (`KernelAbi.check_loaded`: one parameter of sizeof(Params) bytes) and the
  version recorded with every compiled cubin (`KernelAbi.manifest`);
* the CPU emulation of a launch (the CPU runners, tests/cpu_shim/run.cc for the writer and
  tests/reader_shim/run_reader.cc for the reader, read through tests/cpu_shim/launch_files.h a packed
  buffer and a pointer map written by `write_launch_files`, so they know nothing of any kernel's fields;
  tensor maps are zeros there: a CPU has no TMA).

A table field is a tensor (a pointer in the struct), a scalar, or a tensor map (a CUtensorMap: 128
opaque bytes, 64-B aligned, `kgen::TensorMap` in templates/include/kgen/memory.cuh, the driver's
description of a tensor a TMA copy reads). A tensor's shape mixes sizes the spec fixes (ints) and
symbolic sizes (strs such as "N") that the first tensor having them binds; scalars are computed from the
bound sizes; a tensor map's geometry comes from the checked arguments (the tensor it describes, the layout,
and the loaded cubin's target and tuning, which decide whether the kernel reads it: None, zeros, where it
does not), and the launch stack (kgen.tma) encodes it with the driver. A new kernel is one more table, no
new machinery.

This module imports nothing above the byte math (kgen.layout, kgen.reader_layout, kgen.reader_plan,
kgen.arch, kgen.spec): what a launch needs of the device (SMs, L2: kgen.arch.DeviceFacts) and of the
loaded cubin (its target and tuning) reaches it inside the checked arguments (`Args`). torch is never
imported: the checks read tensor metadata through duck typing.
"""

from __future__ import annotations

import ctypes
import struct
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from .arch import DeviceFacts
from .diagnostics import ArgumentError, KgenError, Problem
from .dtypes import DTYPES, torch_name
from .layout import PLAN_BYTES, Layout, compute, launch_shape
from .reader_layout import (
    READER_HEADS,
    READER_WG_TMA_MAP_BYTES,
    MapGeometry,
    cache_map_geometry,
    readable,
    reader_q_dtype,
)
from .reader_plan import launch_of, launch_tma, launch_wgmma, ring_tunes
from .spec import Spec
from .topk_plan import TOPK_CLUSTER_SIZES, topk_grid, topk_shared_bytes

ALIGNMENT = 16  # every tensor's data pointer: the kernel's widest vector load/store

# scalar kinds: C++ type in the struct, struct-module code, size (== alignment), value range
SCALARS: dict[str, tuple[str, str, int]] = {
    "int32": ("kgen::int32_t", "i", 4),
    "int64": ("kgen::int64_t", "q", 8),
    "float32": ("float", "f", 4),
}
INT_RANGE = {"int32": (-(2**31), 2**31 - 1), "int64": (-(2**63), 2**63 - 1)}
POINTER_BYTES = 8  # a device pointer (64-bit hosts only)
# a tensor map: CUtensorMap's bytes (layout.py's byte fact) and alignment (cuda.h declares it alignas(64);
# the driver and cp.async.bulk.tensor take only 64-B aligned maps, so the struct holding one is too)
TENSOR_MAP_BYTES = READER_WG_TMA_MAP_BYTES
TENSOR_MAP_ALIGN = 64
TENSOR_MAP_CXX = "kgen::TensorMap"
NO_TENSOR_MAP = bytes(TENSOR_MAP_BYTES)  # the value where the kernel reads no map

# torch dtype names of the spec's input dtypes (kgen.dtypes)
TORCH_DTYPE = {n: d.torch for n, d in DTYPES.items() if d.input and d.torch}
# C++ element type of a tensor whose dtype follows the spec's input dtype (the config's typedef)
INPUT_ELEMENT = "In"


Dim = int | str  # a size fixed by the spec, or a symbolic size bound by the first tensor with it


@dataclass(frozen=True)
class Tensor:
    """A pointer field: a tensor argument of the kernel."""

    name: str
    element: str  # C++ element type in the struct ("In" = the config's input type)
    dtype: Callable[[Spec], str]  # torch dtype name
    shape: Callable[[Spec, Layout], tuple[Dim, ...]]
    doc: str  # the shape as a C++ comment reads it
    # what the message shows for the shape ("[N, 128]"); `dims` holds the sizes bound so far
    shape_text: Callable[[Spec, Layout, Mapping[str, int]], str]
    detail: Callable[[Spec, Layout], str] = lambda s, lay: ""  # appended when the rank is right
    present: Callable[[Spec], bool] = lambda s: True  # else the argument must be None (nullptr)
    absent_why: Callable[[Spec], str] = lambda s: ""
    written: bool = False  # the kernel writes through it (not const)

    @property
    def kind(self) -> str:
        return "pointer"


@dataclass(frozen=True)
class Scalar:
    """A value field, computed from the sizes the tensors bound."""

    name: str
    type: str  # a key of SCALARS
    value: Callable[[Mapping[str, int], Layout], int | float]
    doc: str
    source: str  # the tensor whose size it comes from (named when it does not fit)

    @property
    def kind(self) -> str:
        return self.type


@dataclass(frozen=True)
class TensorMap:
    """An opaque field: a CUtensorMap describing (part of) the tensor `source`, which the kernel's TMA
    copies read. `geometry(args)` is what the map describes for checked arguments (None where the launch
    the arguments' target and tuning pick reads no map: its bytes are then zeros); the launch stack
    encodes it (`Args.values(encode=...)`, kgen.tma)."""

    name: str
    source: str  # the tensor it describes (named when it cannot be encoded)
    doc: str
    geometry: Callable[[Args], MapGeometry | None]

    @property
    def kind(self) -> str:
        return "tensor_map"


Field = Tensor | Scalar | TensorMap


@dataclass(frozen=True)
class Slot:
    """A field's place in the packed struct."""

    field: Field
    offset: int
    size: int
    code: str  # struct-module code
    align: int  # the member's alignment (a scalar's or pointer's is its size)


def _storage(f: Field) -> tuple[int, int, str]:
    """(size, alignment, struct-module code) of a field's member."""
    if isinstance(f, Tensor):
        return POINTER_BYTES, POINTER_BYTES, "Q"
    if isinstance(f, TensorMap):
        return TENSOR_MAP_BYTES, TENSOR_MAP_ALIGN, f"{TENSOR_MAP_BYTES}s"
    _, code, size = SCALARS[f.type]
    return size, size, code


@dataclass
class Args:
    """Checked arguments of one call: the tensors (None where absent), the sizes they bound, and
    the scalars computed from them. `args.num_tokens` reads a scalar or a bound size by name."""

    abi: KernelAbi
    spec: Spec
    layout: Layout
    tensors: dict[str, Any]
    dims: dict[str, int]
    scalars: dict[str, int | float]
    # the loaded cubin's target (kgen.runtime sets it): a kernel whose launch shape depends on the
    # path its arch compiled (the reader's wgmma path on sm_90a) reads it; None: the portable path
    target: str | None = None
    tune: dict[str, int] | None = None  # the tuning the loaded kernel was rendered with (None: the default)
    device: DeviceFacts | None = None  # the GPU the launch runs on (kgen.runtime sets it; None: none)

    def __getattr__(self, name: str) -> Any:
        d = self.__dict__
        if "scalars" in d and name in d["scalars"]:
            return d["scalars"][name]
        if "dims" in d and name in d["dims"]:
            return d["dims"][name]
        raise AttributeError(name)

    def values(self, pointer: Callable[[str, Any], int] | None = None, *,
               encode: Callable[[Any, MapGeometry], bytes] | None = None) -> tuple:
        """The struct's values in field order: a tensor's data pointer (0 for None), each scalar, each
        tensor map's bytes (`encode(tensor, geometry)`'s, the launch stack's encoder; without one, or
        where the launch reads no map: zeros, e.g. for a launch no GPU runs)."""
        ptr = pointer or (lambda _n, t: 0 if t is None else int(t.data_ptr()))
        out: list[Any] = []
        for f in self.abi.fields:
            if isinstance(f, Tensor):
                out.append(ptr(f.name, self.tensors[f.name]))
            elif isinstance(f, TensorMap):
                out.append(self.tensor_map(f, encode) if encode is not None else NO_TENSOR_MAP)
            else:
                out.append(self.scalars[f.name])
        return tuple(out)

    def tensor_map(self, f: TensorMap, encode: Callable[[Any, MapGeometry], bytes]) -> bytes:
        """The encoded bytes of the tensor-map field `f` (its length checked: the struct module would pad
        or cut a wrong one silently)."""
        geometry = f.geometry(self)
        if geometry is None:
            return NO_TENSOR_MAP
        data = encode(self.tensors[f.source], geometry)
        if len(data) != TENSOR_MAP_BYTES:
            raise KgenError([Problem("kernel-abi", f"{f.name}: its encoder returned {len(data)} bytes, a tensor "
                                     f"map has {TENSOR_MAP_BYTES}")])
        return data

    def pack(self, encode: Callable[[Any, MapGeometry], bytes] | None = None) -> bytes:
        return self.abi.pack(self.values(encode=encode))

    def grid(self) -> tuple[Any, int]:
        return self.abi.grid(self)

    def shared_bytes(self) -> int:
        """The launch's dynamic shared memory, refused (a located error, never a failed launch) where it passes
        what one block of the device may opt in to."""
        n = int(self.abi.shared_bytes(self))
        if self.device is not None and n > self.device.block_shared_bytes:
            cc = self.device.capability
            raise KgenError([Problem("kernel-abi", f"{self.spec.name}: {self.abi.kernel} wants {n} B of shared "
                                     f"memory per block for this shape; a block of sm_{cc} (GPU {self.device.index}) "
                                     f"may opt in to {self.device.block_shared_bytes} B",
                                     fix="run it on a GPU with more shared memory per block")])
        return n


@dataclass(frozen=True)
class KernelAbi:
    """One kernel of the registry (`KERNELS`): its Params fields, its launch shape, and what the pipeline
    needs to build it: which specs have it (`exists`), the tunings `kgen compile` and the AOT directory
    build of it (`tunings`), its C++ names (`name_expression`, `symbol`) and its cache name (`uri`).
    kgen.render renders it by `kernel`; kgen.compile, kgen.aot and kgen.runtime take the table."""

    kernel: str  # the kernel template's name in namespace kgen
    version: int  # bumped whenever a field changes: recorded with every cubin, checked on load
    fields: tuple[Field, ...]
    grid: Callable[[Args], tuple[Any, int]]  # (blocks: an int or (x, y, z), threads per block) of a launch
    namespace: str = "kgen_cfg"  # the C++ namespace of the config struct the kernel is instantiated with
    doc: str = ""
    # blocks may also be a (x, y, z) tuple; dynamic shared memory of a launch (bytes)
    shared_bytes: Callable[[Args], int] = lambda a: 0
    # the launch wants the SM's largest shared-memory carveout (several CTAs of large staging per SM)
    prefers_shared: Callable[[Args], bool] = lambda a: False
    exists: Callable[[Spec], bool] = lambda s: True  # does a spec have this kernel (the reader: readable)
    # every tuning of a spec's kernel a launch may load (None: the shipped default): built ahead of time
    tunings: Callable[[Spec], list[dict[str, int] | None]] = lambda s: [None]
    writes: str = ""  # the tensor argument the kernel writes in place (its version is bumped), if any
    output: str = ""  # the tensor argument the op allocates and returns, if any
    # launched with the cluster dimension (grid.x, 1, 1) where grid.x > 1 (thread-block clusters, sm_90+): a
    # CTA's rank in its cluster is blockIdx.x (kgen.launcher, kgen/fastop.cpp set it from each launch's grid)
    cluster_x: bool = False
    # the cluster sizes (CTAs) a launch may take (with cluster_x): the launch stack asks the driver how many clusters
    # of each run at once on the loaded function (a size past the portable 8 allowed on it first), which the plan
    # reads (kgen.arch.DeviceFacts.cluster_counts)
    cluster_sizes: tuple[int, ...] = ()

    # ---- names -------------------------------------------------------------------------------

    def name_expression(self, uri: str) -> str:
        """The C++ expression naming the instantiation NVRTC compiles (its symbol's source)."""
        return f"kgen::{self.kernel}<{self.namespace}::{uri}>"

    def symbol(self, uri: str) -> str:
        """The mangled name of `name_expression(uri)` (Itanium ABI: `void kgen::<kernel><ns::uri>(ns::uri::Params)`),
        recomputed from the names alone: the AOT loader never trusts a recorded one."""
        n = lambda t: f"{len(t)}{t}"  # noqa: E731 - a source name
        return f"_ZN{n('kgen')}{n(self.kernel)}IN{n(self.namespace)}{n(uri)}EEEvNT_{n('Params')}E"

    def uri(self, variant: str) -> str:
        """The kernel's name in the compile cache and the AOT directory (the writer's is the variant's)."""
        return variant if self.kernel == NORM_ROPE_STORE_KERNEL else f"{variant}.{self.kernel}"

    # ---- layout of the struct (the C rules: natural alignment, padded to the largest) ----------

    @cached_property
    def slots(self) -> tuple[Slot, ...]:
        out, offset = [], 0
        for f in self.fields:
            size, align, code = _storage(f)
            offset = -(-offset // align) * align
            out.append(Slot(f, offset, size, code, align))
            offset += size
        return tuple(out)

    @cached_property
    def alignment(self) -> int:
        """alignof(Params): its most aligned member's."""
        return max(s.align for s in self.slots)

    @cached_property
    def size(self) -> int:
        """sizeof(Params)."""
        last = self.slots[-1]
        return -(-(last.offset + last.size) // self.alignment) * self.alignment

    @cached_property
    def struct_format(self) -> str:
        """The struct module's format of the packed Params (explicit padding, little-endian)."""
        fmt, at = "<", 0
        for s in self.slots:
            fmt += "x" * (s.offset - at) + s.code
            at = s.offset + s.size
        return fmt + "x" * (self.size - at)

    @cached_property
    def packer(self) -> struct.Struct:
        return struct.Struct(self.struct_format)

    def pack(self, values: Sequence) -> bytes:
        return self.packer.pack(*values)

    def unpack(self, data: bytes) -> dict[str, int | float | bytes]:
        return dict(zip((f.name for f in self.fields), self.packer.unpack(data)))

    @property
    def param_sizes(self) -> tuple[int, ...]:
        """What the driver reports for the kernel's parameters: one struct."""
        return (self.size,)

    @property
    def tensors(self) -> tuple[Tensor, ...]:
        return tuple(f for f in self.fields if isinstance(f, Tensor))

    @property
    def tensor_names(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.tensors)

    @property
    def tensor_maps(self) -> tuple[TensorMap, ...]:
        return tuple(f for f in self.fields if isinstance(f, TensorMap))

    def manifest(self) -> dict:
        """What a compiled cubin records about the ABI it was built for (checked when loaded)."""
        return {"kernel": self.kernel, "version": self.version, "params_bytes": self.size}

    # ---- C++ ---------------------------------------------------------------------------------

    def cxx_fields(self) -> list[dict]:
        """Rows of the rendered `struct Params`: C++ declaration, name, offset, comment."""
        rows = []
        for s in self.slots:
            f = s.field
            if isinstance(f, Tensor):
                cxx = f"{'' if f.written else 'const '}{element_cxx(f.element)}*"
            elif isinstance(f, TensorMap):
                cxx = TENSOR_MAP_CXX
            else:
                cxx = SCALARS[f.type][0]
            rows.append({"type": cxx, "name": f.name, "offset": s.offset, "size": s.size, "doc": f.doc})
        return rows

    def cxx_parameter(self, config: str) -> str:
        """The kernel's one parameter, as the explicit instantiation must spell it."""
        return f"const __grid_constant__ {config}::Params"

    # ---- argument checks ---------------------------------------------------------------------

    def bind(self, args: Sequence, kwargs: Mapping[str, Any]) -> dict[str, Any]:
        """Tensor arguments given positionally (in table order) and/or by name -> {name: tensor}."""
        names = self.tensor_names
        if len(args) > len(names):
            raise TypeError(f"{self.kernel} takes {len(names)} tensors ({', '.join(names)}), got {len(args)}")
        out = dict(zip(names, args))
        for k, v in kwargs.items():
            if k not in names:
                raise TypeError(f"{self.kernel} has no argument {k!r} (it takes {', '.join(names)})")
            if k in out:
                raise TypeError(f"{self.kernel}: argument {k!r} given twice")
            out[k] = v
        missing = [n for n in names if n not in out]
        if missing:
            raise TypeError(f"{self.kernel}: missing argument(s) {', '.join(missing)}")
        return {n: out[n] for n in names}

    def arguments(self, spec: Spec, available: Mapping[str, Any]) -> dict[str, Any]:
        """From a dict holding (at least) every present tensor: {name: tensor or None} in table
        order, None where the spec has no such argument."""
        return {f.name: available.get(f.name) if f.present(spec) else None for f in self.tensors}

    def check(self, spec: Spec, tensors: Mapping[str, Any], *, require_cuda: bool = True,
              layout: Layout | None = None, device: DeviceFacts | None = None) -> Args:
        """Check every tensor against the spec (metadata only: no CUDA call, no sync) and compute the
        scalars. The device check comes last, so every other check runs on CPU tensors."""
        lay = layout or compute(spec)
        dims: dict[str, int] = {}
        for f in self.tensors:
            t = tensors.get(f.name)
            if not f.present(spec):
                _expect_none(f.name, t, f.absent_why(spec))
                continue
            _check_tensor(f, t, spec, lay, dims)
        scalars: dict[str, int | float] = {}
        for s in self.fields:
            if isinstance(s, Scalar):
                v = s.value(dims, lay)
                bounds = INT_RANGE.get(s.type)
                if bounds is not None and not bounds[0] <= v <= bounds[1]:
                    raise ArgumentError(f"{s.source}: {v} does not fit the kernel's {s.type} {s.name}")
                scalars[s.name] = v
        present = {f.name: (tensors.get(f.name) if f.present(spec) else None) for f in self.tensors}
        if require_cuda:
            check_devices(present)
        return Args(self, spec, lay, present, dims, scalars, device=device)

    def check_loaded(self, kernel: Any, uri: str) -> None:
        """The loaded kernel takes exactly one parameter of sizeof(Params) bytes (else KgenError).
        Skipped where the driver or cuda.core cannot report parameters."""
        try:
            info = kernel.arguments_info
            sizes = tuple(int(p.size if hasattr(p, "size") else p[1]) for p in info)
        except Exception:  # noqa: BLE001 - needs a recent driver / cuda-core; a nicety
            return
        if sizes != self.param_sizes:
            raise KgenError([Problem(
                "kernel-abi", f"{uri}: the kernel takes {len(sizes)} parameter(s) of sizes {list(sizes)} but kgen "
                f"launches one {self.kernel} Params struct of {self.size} bytes (ABI version {self.version})",
                fix="re-render and recompile; the cubin was built for another ABI")])

    def check_manifest(self, recorded: Mapping | None, uri: str) -> None:
        """A cubin's recorded ABI (`manifest()` at compile time) matches this table (else KgenError)."""
        if recorded is None or dict(recorded) == self.manifest():
            return
        raise KgenError([Problem(
            "kernel-abi", f"{uri}: the cubin was built for ABI {dict(recorded)} but this kgen launches "
            f"{self.manifest()}", fix="recompile the variant with this kgen")])


def tune_key(tune: Mapping[str, int] | None) -> str:
    """A tuning as text ("" for the default): the AOT manifest's and the cubin file name's."""
    return ",".join(f"{k}={int(v)}" for k, v in sorted(tune.items())) if tune else ""


def element_cxx(element: str) -> str:
    return element if element == INPUT_ELEMENT or "::" in element or element == "float" else f"kgen::{element}"


# ---------------------------------------------------------------------------------------------
# tensor checks (duck-typed torch metadata)


def _dtype_name(dtype: Any) -> str:
    return str(dtype).removeprefix("torch.")


def _shape_str(shape) -> str:
    return "[" + ", ".join(str(s) for s in shape) + "]"


def _expect_none(name: str, t: Any, why: str) -> None:
    if t is not None:
        raise ArgumentError(f"{name}: must be None ({why}), got {_dtype_name(getattr(t, 'dtype', type(t)))} "
                            f"{_shape_str(getattr(t, 'shape', ()))}")


def _check_tensor(f: Tensor, t: Any, spec: Spec, lay: Layout, dims: dict[str, int]) -> None:
    dtype = f.dtype(spec)
    want = f.shape(spec, lay)
    text = f.shape_text(spec, lay, dims)
    if t is None:
        raise ArgumentError(f"{f.name}: expected a tensor {dtype} {text}, got None")
    if not hasattr(t, "dtype") or not hasattr(t, "shape"):
        raise ArgumentError(f"{f.name}: expected a torch tensor {dtype} {text}, got {type(t).__name__}")
    got_dtype, got_shape = _dtype_name(t.dtype), tuple(int(s) for s in t.shape)
    if len(got_shape) == len(want):
        detail = f.detail(spec, lay)
        text = f"{text} {detail}" if detail else text
        bound = {d: g for d, g in zip(want, got_shape) if isinstance(d, str) and d not in dims}
    else:
        bound = {}
    shape_ok = len(got_shape) == len(want) and all(
        g == (w if isinstance(w, int) else dims.get(w, bound.get(w))) for w, g in zip(want, got_shape))
    if got_dtype != dtype or not shape_ok:
        raise ArgumentError(f"{f.name}: expected {dtype} {text}, got {got_dtype} {_shape_str(got_shape)}")
    if not t.is_contiguous():
        raise ArgumentError(f"{f.name}: expected a contiguous tensor, got strides {tuple(t.stride())} for shape "
                            f"{_shape_str(got_shape)}", fix=f"pass {f.name}.contiguous()")
    if t.numel() and int(t.data_ptr()) % ALIGNMENT:
        raise ArgumentError(f"{f.name}: its data is not {ALIGNMENT}-byte aligned (address {int(t.data_ptr()):#x}; "
                            "a view into the middle of a tensor?)", fix=f"pass {f.name}.clone()")
    dims.update(bound)


def check_devices(tensors: Mapping[str, Any]) -> None:
    """Every present tensor on one CUDA device."""
    dev = None
    for name, t in tensors.items():
        if t is None:
            continue
        d = t.device
        if d.type != "cuda":
            raise ArgumentError(f"{name}: expected a CUDA tensor, got one on {d}", fix=f"pass {name}.cuda()")
        if dev is None:
            dev = (name, d)
        elif d != dev[1]:
            raise ArgumentError(f"{name}: on {d}, but {dev[0]} is on {dev[1]}: all arguments must share one GPU")


# ---------------------------------------------------------------------------------------------
# the packed parameter buffer a launch hands to the driver


class ParamBuffer:
    """One call site's packed Params, kept alive and reused: `fill(values)` packs in place (about a
    microsecond), `kernel_params` is the `void**` cuLaunchKernel(Ex) takes (one pointer: to the struct).
    The struct sits at alignof(Params) in its buffer (64 B with a tensor map: the alignment cuda.h gives
    a CUtensorMap on the host too)."""

    def __init__(self, abi: KernelAbi, values: Sequence | None = None):
        self.abi = abi
        self._storage = ctypes.create_string_buffer(abi.size + abi.alignment)
        base = ctypes.addressof(self._storage)
        self._at = -base % abi.alignment
        self.address = base + self._at
        self._argv = (ctypes.c_void_p * 1)(self.address)
        self.kernel_params = ctypes.addressof(self._argv)
        self._pack_into = abi.packer.pack_into
        if values is not None:
            self.fill(values)

    def fill(self, values: Sequence) -> None:
        self._pack_into(self._storage, self._at, *values)

    def bytes(self) -> bytes:
        return ctypes.string_at(self.address, self.abi.size)


# ---------------------------------------------------------------------------------------------
# the CPU emulation of a launch (tests/cpu_shim/launch_files.h reads these files for both CPU runners)


def cpu_launch_files(args: Args, directory, buffers: Mapping[str, bytes]) -> list[str]:
    """Write what the writer's CPU runner (tests/cpu_shim/run.cc) needs to emulate the launch of `args`
    in `directory`: the packed Params (`params.bin`, pointers 0), one file per tensor (its bytes;
    empty = nullptr) and `pointers.txt` (`offset name written` per tensor field: where the runner
    patches in the host address of that file's copy, and which buffers it writes back as
    `<name>.out`; tensor maps are zeros: a CPU runner has no TMA). Returns the runner's arguments after
    the directory: blocks, threads per block."""
    write_launch_files(args, directory, buffers)
    blocks, threads = args.grid()
    return [str(blocks), str(threads)]


def write_launch_files(args: Args, directory, buffers: Mapping[str, bytes]) -> None:
    """The files of `cpu_launch_files` alone, for a runner that takes its own launch shape (the reader's
    3-D grid)."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    (d / "params.bin").write_bytes(args.abi.pack(args.values(lambda _n, _t: 0)))
    lines = []
    for s in args.abi.slots:
        if isinstance(s.field, Tensor):
            name = s.field.name
            data = buffers.get(name, b"") if args.tensors.get(name) is not None else b""
            (d / name).write_bytes(data)
            lines.append(f"{s.offset} {name} {int(s.field.written)}")
    (d / "pointers.txt").write_text("\n".join(lines) + "\n")


# ---------------------------------------------------------------------------------------------
# the tables


def _in_dtype(spec: Spec) -> str:
    return TORCH_DTYPE[spec.input_dtype]


def _rope(spec: Spec) -> bool:
    return spec.rope.dim > 0


def _plan(spec: Spec) -> bool:
    return spec.positions.source != "array"


_PLAN_ROWS = {"decode_plan": "a DecodePlan per token", "compress_plan": "a CompressPlan per compressed key"}


NORM_ROPE_STORE_KERNEL = "norm_rope_store"
NORM_ROPE_STORE = KernelAbi(
    kernel=NORM_ROPE_STORE_KERNEL,
    version=1,
    namespace="kgen_cfg",
    writes="cache",
    doc="norm -> RoPE -> (Hadamard) -> quantize -> paged store of N tokens",
    fields=(
        Tensor("x", INPUT_ELEMENT, _in_dtype, lambda s, lay: ("N", s.head_dim), "[N, head_dim]",
               lambda s, lay, d: f"[N, {s.head_dim}]"),
        Tensor("weight", INPUT_ELEMENT, _in_dtype, lambda s, lay: (s.head_dim,), "[head_dim]; nullptr without norm",
               lambda s, lay, d: f"[{s.head_dim}] ({s.norm.kind} weight)",
               present=lambda s: s.norm.kind != "none", absent_why=lambda s: "norm is none"),
        Tensor("bias", INPUT_ELEMENT, _in_dtype, lambda s, lay: (s.head_dim,), "[head_dim]; layernorm only",
               lambda s, lay, d: f"[{s.head_dim}] (layernorm bias)",
               present=lambda s: s.norm.kind == "layernorm",
               absent_why=lambda s: f"only layernorm has a bias; norm is {s.norm.kind}"),
        Tensor("freqs", "float", lambda s: "float32", lambda s, lay: ("max_pos", s.rope.dim),
               "[max_pos, rope_dim] (cos, sin) pairs; nullptr without RoPE",
               lambda s, lay, d: f"[max_pos, {s.rope.dim}]",
               detail=lambda s, lay: "(cos, sin interleaved per pair)",
               present=_rope, absent_why=lambda s: "rope.dim is 0"),
        # with positions.source decode_plan / compress_plan: SGLang's DecodePlan / CompressPlan rows in its
        # place (the kernel reads 16-B vectors through the same pointer; docs/numerics.md §0)
        Tensor("positions", "int64_t", lambda s: "uint8" if _plan(s) else "int64",
               lambda s, lay: ("N", PLAN_BYTES[s.positions.source]) if _plan(s) else ("N",),
               "[N] (decode_plan, compress_plan: [N, 16] plan rows); nullptr without RoPE",
               lambda s, lay, d: (f"[N, {PLAN_BYTES[s.positions.source]}] ({_PLAN_ROWS[s.positions.source]}) "
                                  f"with N = {d.get('N')}" if _plan(s) else f"[N] with N = {d.get('N')}"),
               present=_rope, absent_why=lambda s: "rope.dim is 0"),
        Tensor("out_loc", "int64_t", lambda s: "int64", lambda s, lay: ("N",),
               "[N] slots; < 0 or >= num_slots: skipped", lambda s, lay, d: f"[N] with N = {d.get('N')}"),
        Tensor("cache", "uint8_t", lambda s: "uint8", lambda s, lay: ("num_pages", lay.page_bytes),
               "[num_pages, page_bytes]", lambda s, lay, d: f"[num_pages, {lay.page_bytes}]",
               detail=lambda s, lay: f"({lay.page_bytes_formula()})", written=True),
        Scalar("num_tokens", "int32", lambda d, lay: d["N"], "N", source="x"),
        Scalar("num_slots", "int64", lambda d, lay: lay.slots(d["num_pages"]), "num_pages * page_size",
               source="cache"),
    ),
    grid=lambda a: launch_shape(a.spec, int(a.scalars["num_tokens"])),
)



def _reader_q_dtype(spec: Spec) -> str:
    return torch_name(reader_q_dtype(spec))


def _reader_cache_map(a: Args) -> MapGeometry | None:
    """The cache's key region where the launch runs the TMA variant (the loaded cubin's target and tuning),
    else None (other archs, the cp.async variant, the CPU emulation: the kernel reads no map). An empty
    cache has no key to read and no map either (the driver encodes no empty dimension)."""
    cache = a.tensors["cache"]
    if not launch_tma(a) or not cache.shape[0]:
        return None
    return cache_map_geometry(a.layout, int(cache.shape[0]))


# the paged cache's block table, as the reader and indexer_topk_slots read it
_BLOCK_TABLE = Tensor("block_table", "int32_t", lambda s: "int32", lambda s, lay: ("B", "max_pages"),
                      "[B, max_pages] page of key s: block_table[b, s / page_size]",
                      lambda s, lay, d: f"[B, max_pages] with B = {d.get('B')}")
_MAX_PAGES = Scalar("max_pages", "int32", lambda d, lay: d["max_pages"], "block_table columns", source="block_table")

INDEXER_LOGITS = KernelAbi(
    kernel="indexer_logits",
    version=2,
    namespace="kgen_reader",
    exists=readable,
    tunings=lambda s: ring_tunes(s, None),
    output="logits",
    doc="sum_h w * relu(q_h . key) over a paged key cache read in place (the read side)",
    fields=(
        # first: the one 64-B aligned member at offset 0 leaves no padding before the pointers
        TensorMap("cache_map", "cache", "the key region of cache's pages (TMA variant; else zeros)",
                  _reader_cache_map),
        Tensor("q", "uint8_t", _reader_q_dtype, lambda s, lay: ("B", "next_n", READER_HEADS, s.head_dim),
               "[B, next_n, heads, head_dim]: fp8 e4m3 for fp8 keys, else bf16",
               lambda s, lay, d: f"[B, next_n, {READER_HEADS}, {s.head_dim}]"),
        Tensor("weights", "float", lambda s: "float32", lambda s, lay: ("rows", READER_HEADS),
               "[B * next_n, heads]", lambda s, lay, d: f"[B * next_n, {READER_HEADS}]"),
        Tensor("cache", "uint8_t", lambda s: "uint8", lambda s, lay: ("num_pages", lay.page_bytes),
               "[num_pages, page_bytes]", lambda s, lay, d: f"[num_pages, {lay.page_bytes}]",
               detail=lambda s, lay: f"({lay.page_bytes_formula()})"),
        _BLOCK_TABLE,
        Tensor("seq_lens", "int32_t", lambda s: "int32", lambda s, lay: ("B",), "[B]",
               lambda s, lay, d: f"[B] with B = {d.get('B')}"),
        Tensor("logits", "float", lambda s: "float32", lambda s, lay: ("rows", "max_seq_len"),
               "[B * next_n, max_seq_len] fp32 out", lambda s, lay, d: f"[{d.get('rows')}, max_seq_len]",
               written=True),
        Scalar("num_pages", "int64", lambda d, lay: d["num_pages"], "pages of the cache", source="cache"),
        Scalar("batch", "int32", lambda d, lay: d["B"], "B", source="q"),
        Scalar("next_n", "int32", lambda d, lay: d["next_n"], "query tokens per sequence", source="q"),
        _MAX_PAGES,
        Scalar("max_seq_len", "int32", lambda d, lay: d["max_seq_len"], "logits columns", source="logits"),
    ),
    grid=lambda a: launch_of(a)[:2],
    shared_bytes=lambda a: launch_of(a)[2],
    prefers_shared=launch_wgmma,
)


def _topk_grid(a) -> tuple[tuple[int, int, int], int]:
    """The top-k launch on the device the arguments were checked for: its clusters no more than the driver said run
    at once (the SMs' count where it gave none), none before sm_90 (no device: arguments checked for no GPU, the
    plan's sm_90 limits)."""
    d = a.device
    limits = {} if d is None else {"sm_count": d.sm_count, "clusters": d.clusters, "at_once": d.clusters_at_once}
    return topk_grid(int(a.dims["rows"]), int(a.dims["max_seq_len"]), **limits)


def _topk_shared_bytes(a) -> int:
    """The launch's shared memory: a cluster CTA's slice is held there where the device's block has room for it."""
    limit = {} if a.device is None else {"shared_limit": a.device.block_shared_bytes}
    return topk_shared_bytes(int(a.dims["max_seq_len"]), _topk_grid(a)[0][0], **limit)


# the top-k kernels' inputs and scalars (`output`: the tensor whose columns are k)
_TOPK_INPUTS = (
    Tensor("logits", "float", lambda s: "float32", lambda s, lay: ("rows", "max_seq_len"),
           "[B * next_n, max_seq_len] the reader's fp32 logits", lambda s, lay, d: "[B * next_n, max_seq_len]"),
    Tensor("seq_lens", "int32_t", lambda s: "int32", lambda s, lay: ("B",), "[B]",
           lambda s, lay, d: f"[B] with B = {d.get('B')}"),
)


def _topk_scalars(output: str) -> tuple[Scalar, ...]:
    return (Scalar("batch", "int32", lambda d, lay: d["B"], "B", source="seq_lens"),
            Scalar("next_n", "int32", lambda d, lay: d["rows"] // max(d["B"], 1), "query rows per sequence",
                   source="logits"),
            Scalar("max_seq_len", "int32", lambda d, lay: d["max_seq_len"], "logits columns", source="logits"),
            Scalar("k", "int32", lambda d, lay: d["K"], "keys selected per row", source=output))


# the read side's top-k over the reader's logits (kgen.topk_plan: its launch; docs/reader.md, "Top-k")
INDEXER_TOPK = KernelAbi(
    kernel="indexer_topk",
    version=2,  # 2: the grid (cluster, rows, 1) with the cluster dimension (grid.x, 1, 1)
    namespace="kgen_topk",
    exists=readable,
    output="indices",
    doc="the k largest visible logits of each query row (radix select), as int32 key indices",
    fields=(
        *_TOPK_INPUTS,
        Tensor("indices", "int32_t", lambda s: "int32", lambda s, lay: ("rows", "K"),
               "[B * next_n, k] int32 out: key indices, -1 past a row's visible keys",
               lambda s, lay, d: f"[{d.get('rows')}, k]", written=True),
        *_topk_scalars("indices"),
    ),
    grid=_topk_grid,
    shared_bytes=_topk_shared_bytes,
    cluster_x=True,
    cluster_sizes=TOPK_CLUSTER_SIZES,
)

# indexer_topk whose output is each selected key's cache slot through the block table (SGLang's topk_transform_paged,
# fused): the same selection (kgen::topk::select_row), then the row's indices mapped in place (topk::map_to_slots)
INDEXER_TOPK_SLOTS = KernelAbi(
    kernel="indexer_topk_slots",
    version=1,
    namespace="kgen_topk_slots",
    exists=readable,
    output="slots",
    doc="indexer_topk's selection as int32 cache slots: block_table[b, i / page_size] * page_size + i % page_size",
    fields=(
        *_TOPK_INPUTS,
        _BLOCK_TABLE,
        Tensor("slots", "int32_t", lambda s: "int32", lambda s, lay: ("rows", "K"),
               "[B * next_n, k] int32 out: cache slots (-1: past a row's keys, no page)",
               lambda s, lay, d: f"[{d.get('rows')}, k]", written=True),
        *_topk_scalars("slots"),
        _MAX_PAGES,
    ),
    grid=_topk_grid,
    shared_bytes=_topk_shared_bytes,
    cluster_x=True,
    cluster_sizes=TOPK_CLUSTER_SIZES,
)

KERNELS: dict[str, KernelAbi] = {a.kernel: a for a in (NORM_ROPE_STORE, INDEXER_LOGITS, INDEXER_TOPK,
                                                       INDEXER_TOPK_SLOTS)}
