"""The op layer's machinery, shared by every kernel's op: torch.library registration, variants resolved
once per process, and `KernelOp`, one kernel of one variant as an op runs it.

A `KernelOp` is driven by its kernel's ABI table (kgen.abi.KERNELS): the per-call path is the check
generated from that table (kgen.fastpath) and a per-(device, shape) entry holding everything that depends
only on the variant and the shape (the loaded cubin's launcher, the grid, the shared memory, the scalars,
the tensor maps' geometry); a call the entry does not cover takes the table's own check (the located
message), loads on first use, plans the launch and fills the entry. Every kernel launches through the
one launch stack (kgen.launcher); the cubin comes from kgen.runtime.kernel_binary (the AOT directory or
the JIT path).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Any

import torch

from .. import fastpath, launcher, native
from ..abi import INDEXER_LOGITS, KERNELS, NORM_ROPE_STORE, Args, ArgumentError, KernelAbi, Scalar, TensorMap, tune_key
from ..arch import check as check_arch
from ..arch import parse
from ..diagnostics import KgenError, Problem
from ..layout import compute, uses_pdl
from ..reader_plan import launch_tune
from ..resolve import forget as forget_specs
from ..resolve import resolve_spec, spec_digest
from ..runtime import _aot, aot_dir, device_facts, kernel_binary, kernel_facts
from ..spec import Spec
from ..tma import encode_map

NAMESPACE = "kgen"
KERNEL_ABI = NORM_ROPE_STORE


def _no_cuda(*_args: Any) -> int:
    raise KgenError([Problem("no-gpu", "this torch build has no CUDA: the op's CUDA path cannot run")], exit_code=2)


# torch's own accessors (what Inductor's generated code calls): the current stream's raw handle of a
# device, and the current device, each well under a microsecond
_raw_stream: Callable[[int], int] = getattr(torch._C, "_cuda_getCurrentRawStream", _no_cuda)
_current_device: Callable[[], int] = getattr(torch._C, "_cuda_getDevice", _no_cuda)
bump_version = torch.autograd.graph.increment_version


def _pdl(spec: Spec, arch: str) -> bool:
    """Whether the launch sets programmatic stream serialization: exactly when the kernel waits for
    its predecessor in-kernel, which the compiled target's arch decides (kgen.layout.uses_pdl; a
    launch with the attribute of a kernel that does not wait would race with the kernel before it)."""
    target = parse(arch)
    if target is None:
        return False
    return bool(uses_pdl(spec, (target[0], target[1])))


class _ParamInfo:
    """What `KernelAbi.check_loaded` reads of a loaded kernel: its parameters' (offset, size)."""

    def __init__(self, sizes: tuple[int, ...]):
        self.arguments_info = [(0, s) for s in sizes]


class KernelOp:
    """One kernel (`abi`) of one variant as its op runs it: spec, layout, ABI table, and per device and
    tuning the loaded kernel and its prepacked launch. `launch(*tensors)` is the CUDA implementation
    (tensors in the table's order)."""

    def __init__(self, key: str, spec: Spec, abi: KernelAbi = KERNEL_ABI, *, int_args: dict[str, int] | None = None,
                 op_name: str | None = None):
        self.key, self.spec, self.abi = key, spec, abi
        # the torch op whose schema lists this kernel's tensors (its native kernel's key): the kernel's name,
        # unless another op of that name composes kernels (indexer_topk: the reader, then this top-k)
        self.op_name = op_name or abi.kernel
        # the op's int arguments that give a symbolic size ({symbol: argument index}: the reader's max_seq_len)
        self.int_args = dict(int_args or {})
        self.layout = compute(spec)
        self.names = abi.tensor_names
        self._symbols = fastpath._symbols(abi, spec, self.layout)
        self._scalars = [f.name for f in abi.fields if isinstance(f, Scalar)]
        self._maps = [f for f in abi.fields if isinstance(f, TensorMap)]
        # (device, *symbolic sizes) -> (run, grid or None, shared bytes, *scalars, *map geometries)
        self._shapes: dict[tuple, tuple] = {}
        self._runs: dict[tuple[int, str], Callable[..., None]] = {}  # (device, tuning) -> run
        self.kernels: dict[int, dict] = {}  # device -> what was loaded last (arch, uri, registers, ...)
        self.loaded: dict[tuple[int, str], dict] = {}  # (device, tuning) -> what was loaded
        self._lock = threading.Lock()
        self._native: int | None = None  # this variant's table in the native kernel (kgen.native), once loaded
        # the per-call path: the generated check + the prepacked launch (False: take launch_checked)
        self.fast, self.fast_source = fastpath.build_launch(abi, spec, self.layout, self._shapes, _raw_stream,
                                                            _current_device, encode_map)
        self._check = fastpath.build_check(abi, spec, self.layout)  # (device, sizes, pointers) or None

    # ---- CUDA -------------------------------------------------------------------------------

    def launch(self, *tensors) -> None:
        """Check and launch on the tensors' device, on torch's current stream (asynchronous)."""
        if not self.fast(*tensors):
            self.launch_checked(tensors)

    def launch_checked(self, tensors: tuple) -> None:
        """The slow path: the ABI table's check (raises the located message), load on first use,
        remember this shape for the fast path, launch under a device guard."""
        args, entry = self._plan(tensors)
        run, grid, shared = entry[0], entry[1], entry[2]
        if grid is not None:
            dev = args.device.index if args.device else 0
            with torch.cuda.device(dev):
                run(grid, shared, _raw_stream(dev), *args.values(encode=encode_map))
            if self._native is not None and self._maps:
                self._native_maps(dev, tuple(args.dims[s] for s in self._symbols), tensors, entry)

    def launch_declined(self, *tensors) -> None:
        """A call the native kernel declined (kgen.native: an unknown shape, or a tensor map it does not
        hold yet, such as another layer's cache): launched from the Python entry when there is one (and
        the native kernel taught this call's tensor maps), else the checked path."""
        hit = self._check(*tensors) if self._native is not None else None
        if hit is not None:
            dev, sizes, _ = hit
            entry = self._shapes.get((dev, *sizes))
            if entry is not None and self.fast(*tensors):
                if self._maps:
                    self._native_maps(dev, sizes, tensors, entry)
                return
        self.launch_checked(tensors)
    def _plan(self, tensors: tuple, tune: dict[str, int] | None = None) -> tuple[Args, tuple]:
        """The checked arguments of `tensors` (for the cubin their shape runs) and their shape's entry,
        remembered for the fast path unless `tune` (kgen.reader_layout.READER_TUNING_DEFAULTS overrides:
        the bench's comparisons) picks another cubin than the op's."""
        dev = next(t for t in tensors if t is not None).get_device()
        facts = device_facts(dev) if dev >= 0 else None
        args = self.abi.check(self.spec, dict(zip(self.names, tensors)), layout=self.layout, device=facts)
        arch = self._arch(dev)
        base = tune
        tune = launch_tune(args, arch, base) if self.abi is INDEXER_LOGITS else None
        run, info = self._load(dev, arch, tune, args)
        args = Args(args.abi, args.spec, args.layout, args.tensors, args.dims, args.scalars, target=arch,
                    tune=tune, device=info["facts"] if facts is not None else None)  # the loaded function's
        blocks, threads = args.grid()
        if threads != info["block"]:  # the prepared buffer has the block size built in
            raise KgenError([Problem("kernel-abi", f"{self.spec.name}: the launch shape wants {threads} threads "
                                     f"per block, the prepared launch has {info['block']}")])
        grid = blocks if isinstance(blocks, tuple) else (int(blocks), 1, 1)
        empty = args.scalars.get("num_tokens", 1) <= 0 or 0 in grid
        shared = args.shared_bytes()
        if not empty and (shared > launcher.DEFAULT_SHARED_BYTES or self.abi.prefers_shared(args)):
            info["kernel"].allow_shared(shared, carveout=bool(self.abi.prefers_shared(args)), what=info["uri"])
        entry = (run, None if empty else grid, shared, *(args.scalars[s] for s in self._scalars),
                 *(m.geometry(args) for m in self._maps))
        if base is not None:
            return args, entry
        if len(self._shapes) >= fastpath.MAX_SHAPES:
            self._shapes.clear()
        key = (dev, *(args.dims[s] for s in self._symbols))
        self._shapes[key] = entry
        if self._native is not None:
            self._native_shape(key[1:], None if empty else grid, args, info)
        return args, entry

    def _arch(self, dev: int) -> str:
        cap = torch.cuda.get_device_capability(dev)
        name = torch.cuda.get_device_name(dev)
        return check_arch(cap, list(self.spec.targets), device_name=f"GPU {dev} ({name})", variant=self.spec.name)

    def _load(self, dev: int, arch: str, tune: dict[str, int] | None, args: Args) -> tuple[Callable[..., None], dict]:
        tkey = tune_key(tune)
        run = self._runs.get((dev, tkey))
        if run is not None:
            return run, self.loaded[(dev, tkey)]
        with self._lock:
            run = self._runs.get((dev, tkey))
            if run is not None:
                return run, self.loaded[(dev, tkey)]
            ck = kernel_binary(self.spec, arch, self.abi, tune)
            self.abi.check_manifest(getattr(ck, "abi", None), ck.uri)
            kernel = launcher.load_cubin(ck.cubin, ck.symbol, dev, what=ck.uri)
            if kernel.param_sizes is not None:  # None: the driver cannot say (older than 12.4)
                self.abi.check_loaded(_ParamInfo(kernel.param_sizes), ck.uri)
            targeted = Args(args.abi, args.spec, args.layout, args.tensors, args.dims, args.scalars, target=arch,
                            tune=tune, device=args.device)
            _, threads = targeted.grid()
            pdl = _pdl(self.spec, arch)
            prepared = launcher.PreparedLaunch(self.abi.struct_format, threads, pdl=pdl, cluster=self.abi.cluster_x)
            run = launcher.launcher(kernel, prepared, name=ck.uri)
            info = {"arch": arch, "uri": ck.uri, "tune": tkey, "block": threads, "pdl": pdl, "kernel": kernel,
                    "backend": getattr(run, "backend", None), "prepared": prepared,
                    "registers": kernel.attribute("NUM_REGS"), "aot": aot_dir() is not None,
                    "facts": kernel_facts(kernel, self.abi, args.device)}
            self.loaded[(dev, tkey)] = self.kernels[dev] = info
            self._native_device(dev, kernel, threads, pdl)
            self._runs[(dev, tkey)] = run
            return run, info

    # ---- the native kernel (kgen.native): fed what the checked path learnt -------------------

    @property
    def _per_shape_cubin(self) -> bool:
        """Does the cubin depend on the launch shape (the reader's ring per shape), not only the device?"""
        return self.abi is not KERNEL_ABI

    def _native_device(self, dev: int, kernel, threads: int, pdl: bool) -> None:
        nat = native_kernel(self.op_name)
        if nat is None:
            return
        if self._native is None:
            maps = [(s.offset, s.field.source) for s in self.abi.slots if isinstance(s.field, TensorMap)]
            names = list(self.abi.tensor_names)
            self._native = nat.add_variant(
                self.key, self._native_table(), len(self._symbols), self.abi.size, fastpath.ALIGNMENT,
                int_args={arg: self._symbols.index(sym) for sym, arg in self.int_args.items()},
                keyed_by_device=self._per_shape_cubin, map_offset=maps[0][0] if maps else -1,
                map_source=names.index(maps[0][1]) if maps else -1)
            if self._native is None:
                return
            if self.abi.cluster_x:
                nat.set_cluster(self._native, True)
        nat.set_device(self._native, dev, kernel.function, kernel.context, (threads, 1, 1), pdl)

    def _native_table(self) -> list[dict]:
        """The argument table the native kernel checks, from the ABI table: the op's schema lists the
        kernel's tensors in the ABI's order after the variant (op argument i + 1 is tensor i), except the
        one the op allocates and returns (the ABI's `output`), which is no argument."""
        offsets = {s.field.name: s.offset for s in self.abi.slots}
        table = []
        arg = 1
        for f in self.abi.tensors:
            present = f.present(self.spec)
            dims = [d if isinstance(d, int) else -1 - self._symbols.index(d)
                    for d in f.shape(self.spec, self.layout)] if present else []
            output = f.name == self.abi.output
            table.append({"arg": -1 if output else arg, "present": present, "dtype": f.dtype(self.spec) if present
                          else "", "dims": dims, "offset": offsets[f.name], "output": output})
            arg += 0 if output else 1
        return table

    def _native_shape(self, key: tuple, grid: tuple[int, int, int] | None, args: Args, info: dict) -> None:
        nat = native_kernel(self.op_name)
        if nat is None or self._native is None:
            return
        params = self.abi.pack(args.values(lambda _n, _t: 0))  # scalars packed, pointers and maps per call
        per_shape = self._per_shape_cubin
        kernel = info["kernel"]
        nat.add_shape(self._native, key, grid or (0, 0, 0), args.shared_bytes(), params,
                      device=kernel.device_index if per_shape else -1,
                      function=kernel.function if per_shape else 0, context=kernel.context if per_shape else 0,
                      block=(info["block"], 1, 1), pdl=info["pdl"],
                      uses_map=any(m.geometry(args) is not None for m in self._maps))

    def _native_maps(self, dev: int, sizes: tuple, tensors: tuple, entry: tuple) -> None:
        """Teach the native kernel the tensor maps of this call (per source address)."""
        nat = native_kernel(self.op_name)
        if nat is None or self._native is None:
            return
        by_name = dict(zip(self.names, tensors))
        for m, geometry in zip(self._maps, entry[3 + len(self._scalars):]):
            if geometry is not None:
                t = by_name[m.source]
                nat.add_map(self._native, sizes, dev, int(t.data_ptr()), encode_map(t, geometry))

    def prepared(self, *tensors, tune: dict[str, int] | None = None) -> Callable[[], None]:
        """Check once, load, pack once: `run()` launches the same arguments on torch's current stream
        (the raw launcher: benchmarks, CUDA-graph capture); `tune` as in `_plan`. `run.grid` is the launch's
        (x, y, z) blocks as planned for the device (a benchmark records it), None where nothing launches."""
        args, entry = self._plan(tensors, tune)
        run, grid, shared = entry[0], entry[1], entry[2]
        if grid is None:
            def launch_prepared() -> None:
                pass
        else:
            dev = args.device.index if args.device else 0
            values = args.values(encode=encode_map)
            stream = _raw_stream

            def launch_prepared() -> None:
                _ = args  # keeps the tensors alive as long as the launcher
                run(grid, shared, stream(dev), *values)

        launch_prepared.grid = None if grid is None else tuple(grid)  # type: ignore[attr-defined]
        return launch_prepared

    # ---- CPU and fake ------------------------------------------------------------------------

    def check_cpu(self, tensors: tuple) -> Args:
        """The table's check for the CPU implementation: every present tensor on the CPU (a meta or CUDA
        tensor among them is an ArgumentError naming it: the reference would write nothing or fail)."""
        for name, t in zip(self.names, tensors):
            if t is not None and hasattr(t, "device") and t.device.type != "cpu":
                raise ArgumentError(f"{name}: on {t.device}, but the CPU implementation runs on CPU tensors: all "
                                    "arguments must share one device", fix=f"pass {name}.cpu()")
        return self.abi.check(self.spec, dict(zip(self.names, tensors)), require_cuda=False, layout=self.layout)

    def check_fake(self, tensors: tuple) -> None:
        """Shape checks on fake/meta tensors (no data pointers), symbolic sizes kept symbolic; every tensor
        on one device (a meta tensor among CPU tensors lands here too: named, not a silent no-op)."""
        same_device(dict(zip(self.names, tensors)))
        fastpath.fake_check(self.abi, self.spec, self.layout, dict(zip(self.names, tensors)))


def same_device(tensors: dict[str, Any]) -> None:
    """Every present tensor on the device of the first (else an ArgumentError naming the odd one)."""
    first = None
    for name, t in tensors.items():
        if t is None or not hasattr(t, "device"):
            continue
        if first is None:
            first = (name, t.device)
        elif t.device != first[1]:
            raise ArgumentError(f"{name}: on {t.device}, but {first[0]} is on {first[1]}: all arguments must share "
                                "one device", fix=f"pass every tensor on {first[1]}")


Variant = KernelOp  # the writer's op object under its earlier name (kgen.ops.resolve returns it)

_variants: dict[str, KernelOp] = {}  # variant string -> the writer's KernelOp
_kernel_ops: dict[tuple[str, str], KernelOp] = {}  # (variant string, kernel) -> KernelOp of other kernels
_spec_ids: dict[int, tuple[Spec, str]] = {}  # id(spec) -> (spec, its variant name): the Spec kept alive
_resolve_lock = threading.Lock()
SPEC_PREFIX = "spec:"


def variant_name(variant: Spec | str | os.PathLike) -> str:
    """The string the op takes for `variant`: a path as given; a Spec registered under
    "spec:<name>:<sha256 of its fields, 16 hex>" (so random specs run through the op too)."""
    if isinstance(variant, str):
        return variant
    if isinstance(variant, Spec):
        hit = _spec_ids.get(id(variant))
        if hit is not None and hit[0] is variant:
            return hit[1]
        key = f"{SPEC_PREFIX}{variant.name}:{spec_digest(variant)[:16]}"
        with _resolve_lock:
            if key not in _variants:
                _variants[key] = KernelOp(key, variant)
            _spec_ids[id(variant)] = (variant, key)
        return key
    return os.fspath(variant)


def resolve(variant: Spec | str | os.PathLike) -> KernelOp:
    """The writer's KernelOp of a variant string (resolved on first use, then cached for the process)."""
    key = variant_name(variant)
    v = _variants.get(key)
    if v is not None:
        return v
    if key.startswith(SPEC_PREFIX):
        raise ArgumentError(f"variant: {key!r} names a Spec this process never registered",
                            fix="pass kgen.ops.variant_name(spec)")
    spec = resolve_spec(key)
    with _resolve_lock:
        v = _variants.get(key)
        if v is None:
            v = _variants[key] = KernelOp(key, spec)
    return v


def kernel_op(variant: Spec | str | os.PathLike, kernel: str, *, int_args: dict[str, int] | None = None,
              op_name: str | None = None) -> KernelOp:
    """The KernelOp of kernel `kernel` (a kgen.abi.KERNELS name) of a variant (cached for the process);
    `int_args` as KernelOp's."""
    key = variant_name(variant)
    hit = _kernel_ops.get((key, kernel))
    if hit is not None:
        return hit
    spec = resolve(key).spec
    with _resolve_lock:
        op = _kernel_ops.get((key, kernel))
        if op is None:
            op = _kernel_ops[(key, kernel)] = KernelOp(key, spec, KERNELS[kernel], int_args=int_args,
                                                                  op_name=op_name)
    return op


def forget() -> None:
    """Drop every resolved variant and loaded kernel (tests; a changed spec file in a long process)."""
    with _resolve_lock:
        _variants.clear()
        _kernel_ops.clear()
        _spec_ids.clear()
    forget_specs()
    _aot.clear()
    for nat in native.installed():
        nat.forget()


# ---------------------------------------------------------------------------------------------
# registration


_lib = torch.library.Library(NAMESPACE, "FRAGMENT")  # noqa: TOR901 - the one Library of kgen's ops


def define_op(name: str, schema: str, *, fake: Callable, cpu: Callable | None = None,
              cuda: Callable | None = None) -> Any:
    """Define `torch.ops.kgen.<name>` with `schema` (e.g. "(str variant, Tensor x) -> Tensor"), its
    fake implementation (shapes only, for torch.compile/export) and the device implementations
    given (more later with `implement`). Returns the op's default overload."""
    _lib.define(name + schema, tags=(torch.Tag.pt2_compliant_tag,))
    torch.library.register_fake(f"{NAMESPACE}::{name}", fake, lib=_lib)
    for device, fn in (("cpu", cpu), ("cuda", cuda)):
        if fn is not None:
            implement(name, device, fn)
    return getattr(getattr(torch.ops, NAMESPACE), name).default


def implement(name: str, device: str, fn: Callable) -> None:
    """Register `fn` as the `device` ("cpu" or "cuda") implementation of `torch.ops.kgen.<name>`."""
    _lib.impl(name, fn, {"cpu": "CPU", "cuda": "CUDA"}[device])


def native_kernel(kernel: str = KERNEL_ABI.kernel, install: bool = True):
    """kgen.native's kernel at the CUDA key of `kernel`'s op (installed on its first CUDA load), or None.
    The op's Python CUDA implementation stays registered under `_<kernel>_checked`: every call the
    native kernel declines goes there."""
    if not install and native.status() == "":
        return None
    return native.install(NAMESPACE, kernel, f"_{kernel}_checked")


_native_kernel = native_kernel  # the name tests and earlier callers use
