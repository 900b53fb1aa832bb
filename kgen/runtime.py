"""Load compiled kernels onto the GPU and launch them on torch tensors, through the one launch stack.

One job: turn a `Spec` (and a kernel of the registry, kgen.abi.KERNELS) into a launchable kernel on a
torch device.

    loaded = load(spec)          # arch check -> kernel_binary (AOT dir or cached cubin) -> module load
    loaded.launch(args)          # args = kgen.abi table.check(...): one cuLaunchKernelEx on torch's stream
    run = loaded.prepare(args)   # packed once; run() launches again (benchmarks, CUDA graphs)

* The device's architecture is checked against the spec's `targets` *before* anything is
  compiled or loaded (`kgen.arch.check`, a pure function), so an unsupported GPU gets a message that
  names the device, its compute capability and the targets, never CUDA's "no kernel image".
* Loading and launching are kgen.launcher's (the driver, on the device's primary context torch uses;
  launches go to torch's current stream, so they order with torch's work and CUDA graphs capture them):
  the grid, the dynamic shared memory and its opt-in, PDL and the tensor maps (kgen.tma) are encoded
  once there for every kernel and every caller, the ops included.
* Where a cubin comes from: `kernel_binary` (the AOT directory when one is set, else the JIT path).
  Loaded kernels are cached per spec and per cubin. What a launch plan needs of a device (SMs, L2) is
  `device_facts`, asked once per device.

torch is imported lazily: importing this module costs nothing of it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import arch as A
from . import launcher
from .abi import KERNELS, NORM_ROPE_STORE, Args, KernelAbi, tune_key
from .aot import AotDir
from .compile import CompiledKernel, compile_rendered
from .diagnostics import KgenError, Problem
from .launcher import LaunchError as LaunchError  # re-exported: what a refused load or launch raises
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


def current_stream_handle() -> int:
    """torch's current stream on the current device, as the driver's CUstream value."""
    return int(torch_or_none().cuda.current_stream().cuda_stream)


def _torch_context(index: int) -> None:
    """Make torch create (retain) device `index`'s primary context, the one the driver loads into."""
    torch = torch_or_none()
    torch.cuda.init()
    with torch.cuda.device(index):
        torch.cuda.current_stream(index)


DEFAULT_SHARED_BYTES = launcher.DEFAULT_SHARED_BYTES


class PreparedLaunch:
    """One call site of a loaded kernel: its Params packed once (tensor maps encoded), its launch buffer
    and launcher built once (kgen.launcher). Calling it is one cuLaunchKernelEx on `stream` (default:
    torch's current stream): a few microseconds of host time.

    `fill(args)` repacks for new tensors of the same shape (the launch shape stays).
    `programmatic_stream_serialization` sets the PDL launch attribute (the kernel may then start
    while the previous kernel on the stream finishes; it must wait on griddepcontrol itself).
    """

    def __init__(self, loaded: LoadedKernel, args: Args, *, programmatic_stream_serialization: bool = False):
        self._loaded = loaded
        self.args = args  # keeps the tensors alive as long as the launch can run
        blocks, self.block = args.grid()
        self.grid = blocks if isinstance(blocks, tuple) else (int(blocks), 1, 1)
        self.shared_bytes = args.shared_bytes()
        carveout = bool(args.abi.prefers_shared(args))
        if self.shared_bytes > DEFAULT_SHARED_BYTES or carveout:
            loaded.allow_shared_bytes(self.shared_bytes, carveout=carveout)
        self.pdl = programmatic_stream_serialization
        self.buffer = launcher.PreparedLaunch(args.abi.struct_format, self.block, pdl=self.pdl,
                                               cluster=args.abi.cluster_x)
        self._run = launcher.launcher(loaded.kernel, self.buffer, name=loaded.uri)
        self.values = args.values(encode=encode_map)

    def fill(self, args: Args) -> None:
        args = self._loaded._targeted(args)
        blocks, block = args.grid()
        grid = blocks if isinstance(blocks, tuple) else (int(blocks), 1, 1)
        if (grid, block) != (self.grid, self.block):
            raise ValueError("fill: another launch shape; prepare a new launch")
        self.values = args.values(encode=encode_map)
        self.args = args

    def __call__(self, stream: int | None = None) -> None:
        handle = current_stream_handle() if stream is None else int(stream)
        torch = torch_or_none()
        idx = self._loaded.device_index
        if torch.cuda.current_device() == idx:
            self._run(self.grid, self.shared_bytes, handle, *self.values)
            return
        with torch.cuda.device(idx):  # the kernel's module lives in that device's context
            self._run(self.grid, self.shared_bytes, handle, *self.values)


@dataclass
class LoadedKernel:
    spec: Spec
    layout: Layout
    arch: str
    device_index: int
    device_name: str
    compiled: Any  # kgen.compile.CompiledKernel (JIT or from the AOT directory)
    kernel: launcher.DriverKernel
    abi: KernelAbi = NORM_ROPE_STORE
    tune: dict[str, int] | None = None  # the reader's tuning overrides it was rendered with
    facts: A.DeviceFacts | None = None  # its device's, as this function's plan reads them (kernel_facts)

    @property
    def uri(self) -> str:
        return self.compiled.uri

    @property
    def function(self) -> int:
        """The CUfunction handle the driver launches."""
        return self.kernel.function

    @property
    def device_facts(self) -> A.DeviceFacts:
        return self.facts or device_facts(self.device_index)

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
        """`args` with this cubin's target, tuning and device, which decide the launch shape."""
        if args.target == self.arch and args.tune == self.tune and args.device is not None:
            return args
        return dataclasses.replace(args, target=self.arch, tune=self.tune, device=self.device_facts)

    def launch(self, args: Args, stream: int | None = None) -> None:
        """Launch on `stream` (a CUstream value; default: torch's current stream). N == 0: nothing."""
        if args.scalars.get("num_tokens", 1) <= 0:
            return
        self.prepare(args)(stream)

    def allow_shared_bytes(self, nbytes: int, *, carveout: bool = False) -> None:
        """Opt the kernel in to `nbytes` of dynamic shared memory (kgen.launcher.DriverKernel.allow_shared)."""
        self.kernel.allow_shared(nbytes, carveout=carveout, what=self.uri)

    def registers(self) -> int | None:
        regs = self.kernel.attribute("NUM_REGS")
        return regs if regs is not None else getattr(self.compiled, "registers", None)


class _ParamInfo:
    """What `KernelAbi.check_loaded` reads of a loaded kernel: its parameters' (offset, size)."""

    def __init__(self, sizes: tuple[int, ...]):
        self.arguments_info = [(0, s) for s in sizes]


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
    """What a launch plan needs of torch CUDA device `index` (SMs, L2 bytes: 0 where torch does not say, the
    compute capability), asked once per device."""
    facts = _facts.get(index)
    if facts is None:
        props = require_gpu().cuda.get_device_properties(index)
        facts = _facts[index] = A.DeviceFacts(index=index, sm_count=int(props.multi_processor_count),
                                              l2_bytes=int(getattr(props, "L2_cache_size", 0) or 0),
                                              capability=int(props.major) * 10 + int(props.minor))
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
            loaded = _by_uri[ukey] = load_compiled(spec, ck, idx, kabi, tune, arch=arch, device_name=name)
        _by_spec[skey] = loaded
        return loaded


def load_compiled(spec: Spec, ck: Any, device_index: int, kabi: KernelAbi = NORM_ROPE_STORE,
                  tune: dict[str, int] | None = None, *, arch: str | None = None,
                  device_name: str = "") -> LoadedKernel:
    """A compiled kernel `ck` (kgen.compile.CompiledKernel) loaded on device `device_index`, its recorded
    ABI and its parameters checked against `kabi` (not cached: `load` caches)."""
    _torch_context(device_index)
    kabi.check_manifest(getattr(ck, "abi", None), ck.uri)
    kernel = launcher.load_cubin(ck.cubin, ck.symbol, device_index, what=ck.uri)
    if kernel.param_sizes is not None:  # None: the driver cannot say (older than 12.4)
        kabi.check_loaded(_ParamInfo(kernel.param_sizes), ck.uri)
    return LoadedKernel(spec=spec, layout=compute(spec), arch=arch or ck.arch, device_index=device_index,
                        device_name=device_name, compiled=ck, kernel=kernel, abi=kabi,
                        tune=dict(tune) if tune else None, facts=kernel_facts(kernel, kabi, device_facts(device_index)))


def kernel_facts(kernel: launcher.DriverKernel, abi: KernelAbi, facts: A.DeviceFacts | None) -> A.DeviceFacts | None:
    """`facts` as the plan of `abi`'s loaded `kernel` reads them, asked once per loaded function: how many clusters of
    each size the kernel may take (KernelAbi.cluster_sizes) run at once, the driver's answers for it
    (kgen.arch.DeviceFacts.cluster_counts); unchanged for a kernel without clusters or a device without them."""
    if facts is None or not abi.cluster_sizes or not facts.clusters:
        return facts
    counts = tuple((size, kernel.clusters_at_once(size)) for size in abi.cluster_sizes)
    return dataclasses.replace(facts, cluster_counts=counts)


def clear_cache() -> None:
    """Forget loaded kernels (tests)."""
    _by_spec.clear()
    _by_uri.clear()
