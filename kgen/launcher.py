"""The ops' launch stack: load a cubin through the CUDA driver and launch it from a prepacked buffer.

One job: turn (cubin bytes, symbol, device) into a callable that launches the kernel on a raw stream
handle at the lowest host cost Python allows: a 3-D grid, dynamic shared memory (opted in above 48 KB,
with the SM's largest carveout where the launch asks for it), programmatic dependent launch. Tensor maps
are encoded by kgen.tma through `driver()`; every op's kernel (kgen.ops.registry.KernelOp) launches here.
No cuda.core and no NVRTC are imported (cuda.core imports cuda.bindings.nvrtc at import time), so a
process serving prebuilt cubins (kgen.aot) needs neither the NVRTC wheel nor the CUDA headers.

* Loading (once per device): `cuda.bindings.driver`: the device's primary context (the one torch
  uses) is pushed, `cuModuleLoadData` + `cuModuleGetFunction` (the module is loaded eagerly, so a
  first launch inside CUDA-graph capture loads nothing), and the parameter sizes the cubin declares
  (`cuFuncGetParamInfo`) are returned for the caller's ABI check.
* Launching (every call): one buffer holds a `CUlaunchConfig` (grid, block, stream, launch
  attributes: programmatic dependent launch, a cluster dimension), the kernel's by-value Params struct (laid out by
  kgen.abi) and the one-entry `kernelParams` array pointing at it. A call writes the grid, the dynamic
  shared memory, the stream and the struct fields with one `struct.pack_into` and calls
  `cuLaunchKernelEx(config, f, kernelParams, NULL)`. The driver copies the parameters during the
  call, so the buffer is reused; a lock keeps two threads from interleaving pack and launch.

Backends for the driver call (KGEN_LAUNCHER), measured by `kgen bench` (`host_us_per_call`):
  "ctypes"   libcuda's cuLaunchKernelEx through ctypes: four pointer arguments (the default);
  "bindings" cuda.bindings.driver.cuLaunchKernelEx with its CUlaunchConfig object and the same
             prepacked kernelParams.
"""

from __future__ import annotations

import ctypes
import os
import struct
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .arch import CLUSTER_PORTABLE, DEFAULT_SHARED_BYTES
from .diagnostics import KgenError, Problem

BACKENDS = ("ctypes", "bindings")

# CUlaunchConfig (cuda.h): gridDim xyz, blockDim xyz, sharedMemBytes (7 x u32), pad, hStream, attrs,
# numAttrs (u32), pad. CUlaunchAttribute: id (u32), pad, a 64-byte value union.
_CONFIG = struct.Struct("<7I4xQQI4x")
_ATTR = struct.Struct("<I4x64s")
CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION = 6
CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION = 4
# a cluster attribute: id, pad, value.clusterDim (x, y, z), the rest of the union; packed per call (x = grid.x)
_CLUSTER_ATTR = "I4xIII52x"
CUDA_ERROR_INVALID_CONTEXT = 201


class LaunchError(KgenError):
    """The driver refused a load or a launch; the message names the call and the CUDA error."""

    def __init__(self, message: str, fix: str = ""):
        super().__init__([Problem("cuda-driver", message, fix=fix)], exit_code=1)


# ---------------------------------------------------------------------------------------------
# the launch buffer (pure: testable without a GPU)


class PreparedLaunch:
    """A kernel's launch buffer, one ctypes buffer that lives as long as this object:
    [CUlaunchConfig][Params struct][launch attribute][kernelParams: one pointer, to the struct], or with
    `cluster` [CUlaunchConfig][PDL attribute, with pdl][cluster attribute][Params struct][kernelParams].

    `params_format` is the struct-module format of the kernel's by-value Params struct (kgen.abi's
    `KernelAbi.struct_format`: the one description of its layout). `cluster`: a launch with grid.x > 1 has the
    cluster dimension (grid.x, 1, 1) (kgen.abi.KernelAbi.cluster_x), written by the same pack as the grid; one
    with grid.x = 1 none (a plain launch: the kernel's one-CTA rows)."""

    def __init__(self, params_format: str, block: int, *, pdl: bool = False, cluster: bool = False):
        self.block, self.pdl, self.cluster = int(block), bool(pdl), bool(cluster)
        params = struct.Struct(params_format)
        self.params_size = params.size
        fmt = params_format.lstrip("<=@!>")
        if cluster:  # the attributes between the config and the struct: packed with them (72 B each)
            attr_at = _CONFIG.size
            num_attrs = 1 + int(pdl)
            params_at = attr_at + num_attrs * _ATTR.size  # 128 or 200: multiples of 8
            ptrs_at = params_at + -(-params.size // 8) * 8
            head = ("I4xi60x" if pdl else "") + _CLUSTER_ATTR
            self._head = ((CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION, 1) if pdl else ())
        else:
            params_at = _CONFIG.size  # 56: a multiple of 8, so the struct keeps its alignment
            attr_at = params_at + -(-params.size // 8) * 8
            ptrs_at = attr_at + _ATTR.size
            num_attrs = int(pdl)
            head = ""
            self._head = ()
        self.buffer = ctypes.create_string_buffer(ptrs_at + 8)
        base = ctypes.addressof(self.buffer)
        self.config_address, self.params_address = base, base + ptrs_at
        self._params_at = params_at
        if pdl and not cluster:  # value.programmaticStreamSerializationAllowed = 1
            _ATTR.pack_into(self.buffer, attr_at, CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION,
                            struct.pack("<i", 1))
        struct.pack_into("<Q", self.buffer, ptrs_at, base + params_at)
        # config (and the attributes of a cluster launch) and Params are adjacent: one pack per call writes the
        # grid, the constant block dims, the shared memory, the attributes, the stream and every struct field
        self._static = (self.block, 1, 1)
        self._attrs = (base + attr_at if num_attrs else 0, num_attrs)
        self._pack = struct.Struct(_CONFIG.format + head + fmt).pack_into

    def pack(self, grid: tuple[int, int, int], shared: int, stream: int, *values) -> None:
        """Write one launch's grid, dynamic shared bytes, stream and struct field values into the buffer."""
        if self.cluster:
            n = self.pdl + (grid[0] > 1)
            self._pack(self.buffer, 0, *grid, *self._static, shared, stream, self._attrs[0] if n else 0, n,
                       *self._head, CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION, grid[0], 1, 1, *values)
        else:
            self._pack(self.buffer, 0, *grid, *self._static, shared, stream, *self._attrs, *values)

    def attributes(self) -> list[tuple[int, bytes]]:
        """The launch attributes as the last pack left them, (id, value bytes) each (tests)."""
        fields = self.config_fields()
        at, n = fields[8], fields[9]
        return [_ATTR.unpack_from(self.buffer, at - self.config_address + i * _ATTR.size) for i in range(n)]

    def config_fields(self) -> tuple:
        """(grid xyz, block xyz, shared bytes, stream, attrs address, number of attrs) as packed."""
        return _CONFIG.unpack_from(self.buffer, 0)

    def param_bytes(self) -> bytes:
        return ctypes.string_at(self.config_address + self._params_at, self.params_size)

    def kernel_params(self) -> tuple[int, ...]:
        """The kernelParams array: where the driver reads the (one) parameter."""
        return struct.unpack_from("<Q", self.buffer, self.params_address - self.config_address)


# ---------------------------------------------------------------------------------------------
# the driver


_lock = threading.Lock()
_state: dict[str, Any] = {}


def driver():
    """cuda.bindings.driver, initialised once."""
    drv = _state.get("driver")
    if drv is None:
        try:
            from cuda.bindings import driver as drv
        except ImportError as e:
            raise LaunchError(f"cuda-bindings is not importable ({e})",
                              fix="pip install cuda-bindings (see pyproject.toml for the version)") from None
        _check(drv, drv.cuInit(0)[0], "cuInit")
        _state["driver"] = drv
    return drv


def _error_text(drv, err) -> str:
    try:
        name = drv.cuGetErrorName(err)[1].decode()
        text = drv.cuGetErrorString(err)[1].decode()
        return f"{name}: {text}"
    except Exception:  # noqa: BLE001 - a message is a nicety
        return str(err)


def _check(drv, err, what: str) -> None:
    if int(err) != 0:
        raise LaunchError(f"{what} failed: {_error_text(drv, err)}")


@dataclass
class DriverKernel:
    """A kernel loaded on one device's primary context."""

    device_index: int
    function: int  # CUfunction handle
    param_sizes: tuple[int, ...] | None  # as the cubin declares them (None: the driver cannot say)
    _keep: tuple = ()  # module, function and context objects: the module stays loaded for the process
    _shared: tuple[int, bool] = (DEFAULT_SHARED_BYTES, False)  # what allow_shared set so far

    def allow_shared(self, nbytes: int, *, carveout: bool = False, what: str = "kernel") -> None:
        """Opt the kernel in to `nbytes` of dynamic shared memory (above the 48 KB every kernel may use)
        and, with `carveout`, ask for the SM's largest shared-memory carveout (several such CTAs per SM);
        once per setting. A refusal is a LaunchError naming the size."""
        want = (max(int(nbytes), self._shared[0]), carveout or self._shared[1])
        if want == self._shared:
            return
        drv = driver()
        attrs = [(drv.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, want[0])]
        if want[1]:
            attrs.append((drv.CUfunction_attribute.CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT, 100))
        for attr, value in attrs:
            (err,) = drv.cuFuncSetAttribute(self._keep[1], attr, int(value))
            if int(err) != 0:
                raise LaunchError(f"{what}: {attr.name} = {value} refused ({_error_text(drv, err)})",
                                  fix="the launch asks for more shared memory than this GPU gives a block")
        self._shared = want

    def clusters_at_once(self, size: int) -> int:
        """How many clusters of `size` CTAs run at once on the device, each CTA as large as the function's launch
        bounds allow (MAX_THREADS_PER_BLOCK; no dynamic shared memory): the driver's cuOccupancyMaxActiveClusters,
        which knows that a cluster runs within one GPC. A size past the portable 8 is first allowed on the function
        (its non-portable attribute, set here). 0 where the driver refuses either or cannot say: the plan then keeps
        to portable clusters within the SM count, so no launch depends on an answer the driver did not give."""
        block = self.attribute("MAX_THREADS_PER_BLOCK")
        if not block:
            return 0
        drv = driver()
        pushed = False
        try:
            fn = self._keep[1]
            pushed = int(drv.cuCtxPushCurrent(self._keep[2])[0]) == 0  # the module's context, whatever is current
            attr = drv.CUfunction_attribute.CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED
            if int(size) > CLUSTER_PORTABLE and int(drv.cuFuncSetAttribute(fn, attr, 1)[0]) != 0:
                return 0
            cfg = drv.CUlaunchConfig()
            cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ = int(size), 1, 1
            cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ = int(block), 1, 1
            cfg.sharedMemBytes = 0
            dim = drv.CUlaunchAttribute()
            dim.id = drv.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
            dim.value.clusterDim.x, dim.value.clusterDim.y, dim.value.clusterDim.z = int(size), 1, 1
            cfg.attrs, cfg.numAttrs = [dim], 1
            err, count = drv.cuOccupancyMaxActiveClusters(fn, cfg)
            return int(count) if int(err) == 0 else 0
        except Exception:  # noqa: BLE001 - a driver or binding without the call: no wide clusters
            return 0
        finally:
            if pushed:
                drv.cuCtxPopCurrent()

    @property
    def context(self) -> int:
        """The primary context's handle (CUcontext) the module was loaded in."""
        return int(self._keep[2])

    def make_current(self) -> None:
        """Make the device's primary context current on this thread (a thread that never made a
        CUDA runtime call has none; torch's own calls would set the same one)."""
        drv = driver()
        _check(drv, drv.cuCtxSetCurrent(self._keep[2])[0], "cuCtxSetCurrent")

    def attribute(self, name: str) -> int | None:
        """A CUfunction attribute, e.g. 'NUM_REGS' (None if the driver cannot say)."""
        drv = driver()
        try:
            attr = getattr(drv.CUfunction_attribute, f"CU_FUNC_ATTRIBUTE_{name}")
            err, value = drv.cuFuncGetAttribute(attr, self._keep[1])
            return int(value) if int(err) == 0 else None
        except Exception:  # noqa: BLE001
            return None


def load_cubin(cubin: bytes, symbol: str, device_index: int, *, what: str = "kernel") -> DriverKernel:
    """Load `cubin` on device `device_index`'s primary context and find `symbol` (mangled) in it."""
    drv = driver()
    with _lock:
        err, dev = drv.cuDeviceGet(device_index)
        _check(drv, err, f"cuDeviceGet({device_index})")
        err, ctx = drv.cuDevicePrimaryCtxRetain(dev)
        _check(drv, err, f"cuDevicePrimaryCtxRetain({device_index})")
        _check(drv, drv.cuCtxPushCurrent(ctx)[0], "cuCtxPushCurrent")
        try:
            err, module = drv.cuModuleLoadData(cubin)
            if int(err) != 0:
                raise LaunchError(f"{what}: the driver cannot load its cubin on device {device_index} "
                                  f"(cuModuleLoadData: {_error_text(drv, err)})",
                                  fix="check the cubin's arch against the GPU (kgen compile --arch)")
            err, fn = drv.cuModuleGetFunction(module, symbol.encode() if isinstance(symbol, str) else symbol)
            if int(err) != 0:
                raise LaunchError(f"{what}: the cubin has no kernel named {symbol!r} "
                                  f"(cuModuleGetFunction: {_error_text(drv, err)})")
            sizes = _param_sizes(drv, fn)
        finally:
            drv.cuCtxPopCurrent()
    return DriverKernel(device_index, int(fn), sizes, (module, fn, ctx))


def _param_sizes(drv, fn) -> tuple[int, ...] | None:
    """Sizes of the kernel's parameters from the cubin (cuFuncGetParamInfo, CUDA >= 12.4 drivers)."""
    get = getattr(drv, "cuFuncGetParamInfo", None)
    if get is None:
        return None
    sizes = []
    for i in range(1024):
        try:
            err, _offset, size = get(fn, i)
        except Exception:  # noqa: BLE001 - an old driver: the check is a nicety
            return None
        if int(err) != 0:
            break
        sizes.append(int(size))
    return tuple(sizes)


def _libcuda():
    lib = _state.get("libcuda")
    if lib is None:
        # PyDLL: the call keeps the GIL (a launch takes ~2 us; releasing and retaking it costs more)
        lib = ctypes.PyDLL("libcuda.so.1")
        fn = lib.cuLaunchKernelEx
        fn.restype = ctypes.c_int
        fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
        _state["libcuda"] = lib
    return lib


def launcher(kernel: DriverKernel, launch: PreparedLaunch, *, backend: str | None = None,
             name: str = "kernel") -> Callable[..., None]:
    """`run(grid (x, y, z), shared bytes, stream, *param_values)`: pack and launch `kernel` (LaunchError on failure)."""
    backend = backend or os.environ.get("KGEN_LAUNCHER", "ctypes")
    if backend not in BACKENDS:
        raise LaunchError(f"KGEN_LAUNCHER={backend!r}: expected one of {', '.join(BACKENDS)}")
    pack = launch.pack
    lock = threading.Lock()
    fn, cfg, params = kernel.function, launch.config_address, launch.params_address

    if backend == "ctypes":
        try:
            call = _libcuda().cuLaunchKernelEx
        except (OSError, AttributeError):  # no loadable libcuda.so.1 here: the bindings' own handle
            return launcher(kernel, launch, backend="bindings", name=name)

        # the pack inlined (one Python call less per launch): config fields, then the struct's
        pack_into, buf, (block, _, _), (attrs_at, num_attrs) = (launch._pack, launch.buffer, launch._static,
                                                                 launch._attrs)
        def failed(err: int, grid: tuple[int, int, int], shared: int, stream: int, values: tuple) -> None:
            if err == CUDA_ERROR_INVALID_CONTEXT:  # no current context on this thread: set it, once
                kernel.make_current()
                with lock:
                    pack(grid, shared, stream, *values)
                    err = call(cfg, fn, params, None)
            if err:
                _raise_launch(name, err, grid, launch.block)

        if launch.cluster:
            head, pdl_n = launch._head, int(launch.pdl)

            def run_cluster(grid: tuple[int, int, int], shared: int, stream: int, *values) -> None:
                n = pdl_n + (grid[0] > 1)
                with lock:
                    pack_into(buf, 0, *grid, block, 1, 1, shared, stream, attrs_at if n else 0, n, *head,
                              CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION, grid[0], 1, 1, *values)
                    err = call(cfg, fn, params, None)
                if err:
                    failed(err, grid, shared, stream, values)

            run_cluster.backend = "ctypes"  # type: ignore[attr-defined]
            return run_cluster

        def run(grid: tuple[int, int, int], shared: int, stream: int, *values) -> None:
            with lock:
                pack_into(buf, 0, *grid, block, 1, 1, shared, stream, attrs_at, num_attrs, *values)
                err = call(cfg, fn, params, None)
            if err:
                failed(err, grid, shared, stream, values)

        run.backend = "ctypes"  # type: ignore[attr-defined]
        return run

    drv = driver()
    cu_launch_ex, cu_fn = drv.cuLaunchKernelEx, kernel._keep[1]
    cfg_obj = drv.CUlaunchConfig()  # cuda.bindings' own struct: the grid and stream set per call
    cfg_obj.gridDimY = cfg_obj.gridDimZ = cfg_obj.blockDimY = cfg_obj.blockDimZ = 1
    cfg_obj.blockDimX = launch.block
    attrs = []
    cluster_attr = None
    if launch.cluster:  # clusterDim.x = grid.x per call, where grid.x > 1
        cluster_attr = drv.CUlaunchAttribute()
        cluster_attr.id = drv.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
        cluster_attr.value.clusterDim.y = cluster_attr.value.clusterDim.z = 1
    if launch.pdl:
        a = drv.CUlaunchAttribute()
        a.id = drv.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
        a.value.programmaticStreamSerializationAllowed = 1
        attrs.append(a)
    cfg_obj.attrs, cfg_obj.numAttrs = attrs, len(attrs)
    streams: dict[int, Any] = {}

    def run_bindings(grid: tuple[int, int, int], shared: int, stream: int, *values) -> None:
        with lock:
            pack(grid, shared, stream, *values)
            s = streams.get(stream)
            if s is None:
                s = streams[stream] = drv.CUstream(stream)
            (cfg_obj.gridDimX, cfg_obj.gridDimY, cfg_obj.gridDimZ), cfg_obj.hStream = grid, s
            cfg_obj.sharedMemBytes = shared
            if cluster_attr is not None:
                cluster_attr.value.clusterDim.x = grid[0]
                now = attrs + [cluster_attr] if grid[0] > 1 else attrs
                cfg_obj.attrs, cfg_obj.numAttrs = now, len(now)
            err = cu_launch_ex(cfg_obj, cu_fn, params, 0)[0]
        if int(err) == CUDA_ERROR_INVALID_CONTEXT:
            kernel.make_current()
            with lock:
                pack(grid, shared, stream, *values)
                err = cu_launch_ex(cfg_obj, cu_fn, params, 0)[0]
        if int(err):
            _raise_launch(name, err, grid, launch.block)

    run_bindings.backend = "bindings"  # type: ignore[attr-defined]
    return run_bindings


def _raise_launch(name: str, err, grid: tuple[int, int, int], block: int) -> None:
    drv = driver()
    raise LaunchError(f"{name}: kernel launch failed ({_error_text(drv, drv.CUresult(int(err)))}; "
                      f"grid {grid}, block {block})")
