"""Load compiled variants onto the GPU and launch them on torch tensors, through cuda.core.

One job: turn a `Spec` into a launchable kernel on the current torch device.

    loaded = load(spec)          # arch check -> compile_variant (cached cubin) -> module load
    loaded.launch(args)          # args = kgen.abi table.check(...): one cuLaunchKernelEx on torch's stream
    run = loaded.prepare(args)   # packed once; run() launches again (benchmarks, CUDA graphs)

* The device's architecture is checked against the spec's `targets` *before* anything is
  compiled or loaded (`kgen.arch.check`, a pure function), so an unsupported GPU gets a message that
  names the device, its compute capability and the targets, never CUDA's "no kernel image".
* cuda.core's `Device` is made current on the same (primary) context torch uses, and launches go
  to `torch.cuda.current_stream()` (so they order with torch's work and are captured by CUDA graphs).
* The kernel takes one by-value Params struct (kgen/abi.py). cuda.core's `launch` cannot pass a
  struct, so the launch is cuda.bindings' cuLaunchKernelEx with the struct packed by kgen.abi (which
  also allows launch attributes such as PDL). Loaded kernels are cached per spec and per cubin.

torch and cuda.core are imported lazily: importing this module costs nothing.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import sys
import threading
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from . import arch as A
from .abi import KERNELS, NORM_ROPE_STORE, Args, KernelAbi, ParamBuffer, tune_key
from .aot import AotDir
from .compile import CompiledKernel, compile_rendered
from .diagnostics import KgenError, Problem
from .layout import Layout, compute, uses_pdl
from .render import render_kernel
from .resolve import spec_digest
from .spec import Spec
from .tma import encode_map

# ---------------------------------------------------------------------------------------------
# where a kernel's cubin comes from: the AOT directory when one is set, else the JIT path


_aot: dict[str, Any] = {}


def use_aot(directory: str | os.PathLike | None) -> None:
    """Load kernels from the prebuilt cubins of `directory` (`kgen compile ... --out DIR`) instead
    of compiling them; None: back to KGEN_AOT_DIR / the JIT path. Applies to kernels not yet loaded."""
    _aot.clear()
    _aot["dir"] = AotDir(Path(directory)) if directory is not None else None


def aot_dir() -> AotDir | None:
    """The AOT directory kernels come from (use_aot's, else KGEN_AOT_DIR's), or None: the JIT path."""
    if "dir" not in _aot:
        env = os.environ.get("KGEN_AOT_DIR")
        if env:
            use_aot(env)
        else:
            _aot["dir"] = None
    return _aot["dir"]


def kernel_binary(spec: Spec, arch: str, kabi: KernelAbi = NORM_ROPE_STORE,
                  tune: dict[str, int] | None = None) -> CompiledKernel:
    """The cubin of kernel `kabi` of `spec` for `arch` with `tune`: from the AOT directory when one is
    set (jinja2 and NVRTC are then never imported), else rendered and compiled (content-hash cached)."""
    aot = aot_dir()
    if aot is not None:
        return aot.find(spec, arch, kabi, tune)
    return compile_rendered(render_kernel(spec, kabi, tune), arch)


# ---------------------------------------------------------------------------------------------
# torch / cuda.core plumbing


def torch_or_none():
    try:
        import torch
    except Exception:  # noqa: BLE001 - a broken torch install is "no GPU" for kgen's purposes
        return None
    return torch


def gpu_problem() -> str | None:
    """None if a CUDA GPU is usable through torch, else a one-line reason."""
    torch = torch_or_none()
    if torch is None:
        return "torch is not installed (pip install 'kgen[torch]')"
    try:
        if not torch.cuda.is_available():
            build = torch.version.cuda or "CPU-only"
            return f"no CUDA GPU is visible to torch {torch.__version__} (build: {build})"
    except Exception as e:  # noqa: BLE001
        return f"torch cannot talk to CUDA: {e}"
    return None


def require_gpu() -> Any:
    """torch, or KgenError (exit 2) saying why there is no GPU."""
    reason = gpu_problem()
    if reason is not None:
        raise KgenError([Problem("no-gpu", f"{reason}; this needs an NVIDIA GPU (see docs/gpu.md)")],
                        exit_code=2)
    return torch_or_none()


_tls = threading.local()


def _cuda_core():
    try:
        import cuda.core as cc

        cc.ObjectCode  # noqa: B018 - cuda-core >= 1.0 exports everything at top level
        return cc
    except (ImportError, AttributeError):
        try:
            import cuda.core.experimental as cc  # cuda-core 0.x

            return cc
        except ImportError as e:
            raise KgenError([Problem("no-cuda-core", f"cuda-core is not importable ({e})",
                                     fix="pip install cuda-core (see pyproject.toml for the version)")],
                            exit_code=2) from None


def set_current_device(index: int):
    """Make cuda.core's Device `index` current on torch's (primary) context; cached per thread."""
    torch = torch_or_none()
    cur = getattr(_tls, "devices", None)
    if cur is None:
        cur = _tls.devices = {}
    if index in cur:
        dev = cur[index]
        if getattr(_tls, "current", None) != index:
            dev.set_current()
            _tls.current = index
        return dev
    torch.cuda.init()
    with torch.cuda.device(index):
        torch.cuda.current_stream(index)  # makes torch create/retain its primary context
    cc = _cuda_core()
    dev = cc.Device(index)
    dev.set_current()
    cur[index] = dev
    _tls.current = index
    return dev


_streams: dict[int, Any] = {}


def torch_stream():
    """cuda.core Stream wrapping torch.cuda.current_stream() (cached per handle)."""
    torch = torch_or_none()
    handle = int(torch.cuda.current_stream().cuda_stream)
    s = _streams.get(handle)
    if s is None:
        cc = _cuda_core()
        if handle == 0:  # torch's legacy default stream
            s = getattr(cc, "LEGACY_DEFAULT_STREAM", None) or cc.Stream.from_handle(0)
        else:
            s = cc.Stream.from_handle(handle)
        _streams[handle] = s
    return s


# ---------------------------------------------------------------------------------------------
# Loaded kernels


def _driver():
    """cuda.bindings' driver module (the launch path: cuLaunchKernelEx with a packed Params)."""
    try:
        from cuda.bindings import driver
    except ImportError as e:
        raise KgenError([Problem("no-cuda-core", f"cuda-bindings is not importable ({e})",
                                 fix="pip install cuda-bindings (see pyproject.toml for the version)")],
                        exit_code=2) from None
    return driver


def current_stream_handle() -> int:
    """torch's current stream on the current device, as the driver's CUstream value."""
    return int(torch_or_none().cuda.current_stream().cuda_stream)


DEFAULT_SHARED_BYTES = 48 * 1024  # dynamic shared memory a launch gets without opting in


class LaunchError(KgenError, RuntimeError):
    """The driver refused a launch."""


class PreparedLaunch:
    """One call site of a loaded kernel: its Params packed once into a buffer that stays alive, the
    driver's launch config built once (its stream set again only when torch's current stream
    changes). Calling it is one cuLaunchKernelEx: a few microseconds of host time.

    `fill(args)` repacks the same buffer for new tensors of the same shape (the launch shape stays).
    `programmatic_stream_serialization` sets the PDL launch attribute (the kernel may then start
    while the previous kernel on the stream finishes; it must wait on griddepcontrol itself).
    """

    def __init__(self, loaded: LoadedKernel, args: Args, *, programmatic_stream_serialization: bool = False):
        drv = _driver()
        self._drv, self._loaded = drv, loaded
        self.args = args  # keeps the tensors alive as long as the launch can run
        self.grid, self.block = args.grid()
        self.params = ParamBuffer(args.abi, args.values(encode=encode_map))
        cfg = drv.CUlaunchConfig()
        grid = self.grid if isinstance(self.grid, tuple) else (self.grid, 1, 1)
        cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ = grid
        cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ = self.block, 1, 1
        cfg.sharedMemBytes = args.abi.shared_bytes(args)
        if cfg.sharedMemBytes > DEFAULT_SHARED_BYTES or args.abi.prefers_shared(args):
            loaded.allow_shared_bytes(cfg.sharedMemBytes, carveout=args.abi.prefers_shared(args))
        attrs = []
        if programmatic_stream_serialization:
            a = drv.CUlaunchAttribute()
            a.id = drv.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
            a.value.programmaticStreamSerializationAllowed = 1
            attrs.append(a)
        cfg.attrs = attrs
        cfg.numAttrs = len(attrs)
        self._cfg = cfg
        self._stream: int | None = None
        self._success = drv.CUresult.CUDA_SUCCESS

    def fill(self, args: Args) -> None:
        args = self._loaded._targeted(args)
        if args.grid() != (self.grid, self.block):
            raise ValueError("fill: another launch shape; prepare a new launch")
        self.params.fill(args.values(encode=encode_map))
        self.args = args

    def __call__(self, stream: int | None = None) -> None:
        handle = current_stream_handle() if stream is None else int(stream)
        if handle != self._stream:
            self._cfg.hStream = self._drv.CUstream(handle)
            self._stream = handle
        set_current_device(self._loaded.device_index)
        (err,) = self._drv.cuLaunchKernelEx(self._cfg, self._loaded.function, self.params.kernel_params, 0)
        if err != self._success:
            _, text = self._drv.cuGetErrorString(err)
            text = text.decode() if isinstance(text, bytes) else str(text)
            raise LaunchError([Problem("launch", f"{self._loaded.uri}: cuLaunchKernelEx failed: {err!r} ({text})",
                                       fix="a sticky CUDA error from earlier work also shows here")])


@dataclass
class LoadedKernel:
    spec: Spec
    layout: Layout
    arch: str
    device_index: int
    device_name: str
    compiled: Any  # kgen.compile.CompiledKernel
    kernel: Any  # cuda.core Kernel
    object_code: Any = None
    abi: KernelAbi = NORM_ROPE_STORE
    tune: dict[str, int] | None = None  # the reader's tuning overrides it was rendered with (the bench's)
    _shared_allowed: tuple[int, bool] = (DEFAULT_SHARED_BYTES, False)

    @property
    def uri(self) -> str:
        return self.compiled.uri

    @cached_property
    def device_facts(self) -> A.DeviceFacts:
        return device_facts(self.device_index)

    @cached_property
    def function(self) -> Any:
        """The kernel as the driver launches it (cuda.core's CUkernel handle, as a CUfunction)."""
        handle = getattr(self.kernel, "handle", None)  # cuda-core >= 0.3; older ones: _handle
        return _driver().CUfunction(int(handle if handle is not None else self.kernel._handle))

    @property
    def pdl(self) -> bool:
        """The launch lets the kernel start before its predecessor ends (it waits in-kernel): the
        compiled target's arch decides, as it decided the kernel's griddepcontrol."""
        major, minor, _ = A.parse(self.arch) or (0, 0, "")
        return uses_pdl(self.spec, (major, minor))

    def prepare(self, args: Args, *, programmatic_stream_serialization: bool | None = None) -> PreparedLaunch:
        """A launch of `args` (checked by `self.abi`) to call later, any number of times. PDL by default
        exactly when the kernel waits for its predecessor (`pdl`); False forces a plain launch."""
        args = self._targeted(args)
        pss = self.pdl if programmatic_stream_serialization is None else programmatic_stream_serialization
        if pss and not self.pdl:
            raise ValueError(f"{self.uri}: a PDL launch of a kernel that does not wait for its predecessor "
                             "(launch.pdl off or an arch before sm_90) would race with it")
        return PreparedLaunch(self, args, programmatic_stream_serialization=pss)

    def _targeted(self, args: Args) -> Args:
        """`args` with this cubin's target, which decides the launch shape of an arch-dependent path."""
        if args.target == self.arch and args.tune == self.tune and args.device is not None:
            return args
        return dataclasses.replace(args, target=self.arch, tune=self.tune, device=self.device_facts)

    def launch(self, args: Args, stream: int | None = None) -> None:
        """Launch on `stream` (a CUstream value; default: torch's current stream). N == 0: nothing."""
        if args.scalars.get("num_tokens", 1) <= 0:
            return
        self.prepare(args)(stream)

    def allow_shared_bytes(self, nbytes: int, *, carveout: bool = False) -> None:
        """Opt the kernel in to `nbytes` of dynamic shared memory (above the 48 KB every kernel may use)
        and, with `carveout`, ask for the largest shared-memory carveout of the SM (several such CTAs
        per SM); once per setting. A refusal is a LaunchError naming the size."""
        want = (max(nbytes, self._shared_allowed[0]), carveout or self._shared_allowed[1])
        if want == self._shared_allowed:
            return
        drv = _driver()
        attrs = [(drv.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, want[0])]
        if want[1]:
            attrs.append((drv.CUfunction_attribute.CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT, 100))
        for attr, value in attrs:
            (err,) = drv.cuFuncSetAttribute(self.function, attr, int(value))
            if err != drv.CUresult.CUDA_SUCCESS:  # a context-less CUkernel handle: set it for this device
                (err,) = drv.cuKernelSetAttribute(attr, int(value), drv.CUkernel(int(self.function)),
                                                  drv.CUdevice(self.device_index))
            if err != drv.CUresult.CUDA_SUCCESS:
                _, text = drv.cuGetErrorString(err)
                text = text.decode() if isinstance(text, bytes) else str(text)
                raise LaunchError([Problem("launch", f"{self.uri}: {attr.name} = {value} refused: {err!r} ({text})")])
        self._shared_allowed = want

    def registers(self) -> int | None:
        try:
            regs = self.kernel.attributes.num_regs
            return int(regs() if callable(regs) else regs)
        except Exception:  # noqa: BLE001
            return getattr(self.compiled, "registers", None)


_by_spec: dict[tuple, LoadedKernel] = {}  # (spec, device, kernel, tuning)
_by_uri: dict[tuple[str, str, int, str], LoadedKernel] = {}  # (uri, arch, device, sha256 of the cubin)
_lock = threading.Lock()


def spec_key(spec: Spec) -> str:
    return spec_digest(spec)


def device_info(index: int | None = None) -> dict:
    torch = require_gpu()
    idx = torch.cuda.current_device() if index is None else index
    props = torch.cuda.get_device_properties(idx)
    cap = (props.major, props.minor)
    return {"index": idx, "name": props.name, "capability": f"{cap[0]}.{cap[1]}", "arch": A.name(cap),
            "sm_count": props.multi_processor_count, "total_memory": props.total_memory,
            "l2_bytes": getattr(props, "L2_cache_size", None)}


_facts: dict[int, A.DeviceFacts] = {}


def device_facts(index: int) -> A.DeviceFacts:
    """What a launch plan needs of torch CUDA device `index` (SMs, L2 bytes; 0 where torch does not say),
    asked once per device."""
    facts = _facts.get(index)
    if facts is None:
        props = require_gpu().cuda.get_device_properties(index)
        facts = _facts[index] = A.DeviceFacts(index=index, sm_count=int(props.multi_processor_count),
                                              l2_bytes=int(getattr(props, "L2_cache_size", 0) or 0))
    return facts


def device_arch(spec: Spec, device_index: int | None = None) -> str:
    """The target `spec`'s kernels compile for on a torch device (default: the current one): the
    device's compute capability checked against spec.targets (kgen.arch.check, whose located error a
    GPU the spec does not target raises). Nothing is compiled or loaded."""
    torch = require_gpu()
    idx = torch.cuda.current_device() if device_index is None else device_index
    cap = tuple(torch.cuda.get_device_capability(idx))
    return A.check(cap, list(spec.targets), device_name=f"GPU {idx} ({torch.cuda.get_device_name(idx)})",
                   variant=spec.name)


def load(spec: Spec, device_index: int | None = None, *, verbose: bool = False,
         kernel: str = NORM_ROPE_STORE.kernel, tune: dict[str, int] | None = None) -> LoadedKernel:
    """The kernel of `spec` loaded on a torch device (default: the current one).

    Order: GPU present -> arch check against spec.targets -> compile_variant (cache hit: no NVRTC)
    -> module load. Cached in-process per (spec, device, kernel, tune) and per (uri, arch, device, cubin):
    a spec with the same name but other content never gets another spec's kernel. `tune`: the reader's
    kgen.reader_layout.READER_TUNING_DEFAULTS overrides it is rendered with (kgen.reader_plan's per-shape
    ring, the bench).
    """
    torch = require_gpu()
    idx = torch.cuda.current_device() if device_index is None else device_index
    skey = (spec_key(spec), idx, kernel, tuple(sorted(tune.items())) if tune else ())
    hit = _by_spec.get(skey)
    if hit is not None:
        return hit
    with _lock:
        hit = _by_spec.get(skey)
        if hit is not None:
            return hit
        name = torch.cuda.get_device_name(idx)
        arch = device_arch(spec, idx)
        kabi = KERNELS[kernel]
        if kabi is NORM_ROPE_STORE and tune:
            raise ValueError(f"{kernel} has no tuning (got {tune_key(tune)})")
        ck = kernel_binary(spec, arch, kabi, tune)
        if verbose or not getattr(ck, "cached", True):
            sys.stderr.write(f"kgen: {spec.name} for {arch}: "
                             f"{'cache hit' if getattr(ck, 'cached', False) else 'compiled'}"
                             f" in {getattr(ck, 'seconds', 0.0):.2f} s\n")
        # The uri is only the spec's name: two different specs of one name (hypothesis draws "a"
        # again and again) have different cubins, and launching one's kernel on the other's
        # tensors reads and writes outside them. So a loaded module is shared only by the same cubin.
        ukey = (ck.uri, arch, idx, hashlib.sha256(ck.cubin).hexdigest())
        loaded = _by_uri.get(ukey)
        if loaded is None:
            set_current_device(idx)
            function, oc = _load_kernel(ck)
            kabi.check_manifest(getattr(ck, "abi", None), ck.uri)
            kabi.check_loaded(function, ck.uri)
            loaded = LoadedKernel(spec=spec, layout=compute(spec), arch=arch, device_index=idx,
                                  device_name=name, compiled=ck, kernel=function, object_code=oc, abi=kabi,
                                  tune=dict(tune) if tune else None)
            _by_uri[ukey] = loaded
        _by_spec[skey] = loaded
        return loaded


def _load_kernel(ck) -> tuple[Any, Any]:
    cc = _cuda_core()
    symbol = ck.symbol.decode() if isinstance(ck.symbol, bytes) else ck.symbol
    name_expr = getattr(ck, "name_expression", None)
    if name_expr:
        oc = cc.ObjectCode.from_cubin(ck.cubin, symbol_mapping={name_expr: symbol})
        try:
            return oc.get_kernel(name_expr), oc
        except Exception:  # noqa: BLE001 - fall back to the mangled name below
            pass
    oc = cc.ObjectCode.from_cubin(ck.cubin)
    return oc.get_kernel(symbol), oc


def clear_cache() -> None:
    """Forget loaded kernels (tests)."""
    _by_spec.clear()
    _by_uri.clear()
