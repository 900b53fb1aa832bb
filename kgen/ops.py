"""The registered torch ops (`torch.ops.kgen.*`) and the Python API over them.

    import kgen.ops   # registers the ops
    torch.ops.kgen.norm_rope_store("specs/dsv4.yaml::dsv4_indexer_fp8",
                                   x, weight, bias, freqs, positions, out_loc, cache)   # -> (), cache written

Schemas (docs/ops.md):
    kgen::norm_rope_store(str variant, Tensor x, Tensor? weight, Tensor? bias, Tensor? freqs,
                          Tensor? positions, Tensor out_loc, Tensor(a!) cache) -> ()
    kgen::indexer_logits(str variant, Tensor q, Tensor weights, Tensor cache, Tensor block_table,
                         Tensor seq_lens, int max_seq_len) -> Tensor

* CPU: the Torch reference (kgen.reference: the same bytes as the kernel). CUDA: the kernel, on
  torch's current stream, no device sync (so CUDA-graph capture records it). Meta/fake: shape checks
  only (torch.compile traces through it; `cache` is declared mutated, so it is functionalized).
* `variant` is a spec path or "family.yaml::variant_name", resolved ONCE per process into a
  `Variant` (spec, layout, per-device loaded kernel and prepacked launch): a call never re-reads or
  re-hashes a spec file (`forget()` drops the cache). A `Spec` object goes through the op under the
  name `variant_name(spec)` returns.
* Argument checks come from the kernel's ABI table (kgen/abi.py): the CUDA path runs a check
  generated from that table per variant (kgen/fastpath.py), and on any doubt the table's own
  `check`, which names the argument: ``x: expected float32 [N, 128], got bfloat16 [7, 128]``.
  Not checked (it would need a sync): `positions` inside freqs' rows (`check_bounds=True` in the
  Python API does it); `out_loc` outside [0, num_pages * page_size) is skipped by the kernel
  (numerics.md §7); duplicate slots race.
* Kernels come from the JIT path (kgen.compile: render + NVRTC, content-hash cached) or, when an AOT
  directory is set (`use_aot(dir)` or KGEN_AOT_DIR; written by `kgen compile ... --out DIR`), from
  its prebuilt cubins, with neither jinja2 nor NVRTC imported (kgen/aot.py).

Registration is plain `torch.library` (define + impl + register_fake), not `torch.library.custom_op`:
custom_op wraps every call in Python autograd, ADInplaceOrView and alias-check layers that cost
~25 us of host time per call (docs/ops.md; `kgen bench` records both floors), more than the kernel.
The op has no autograd formula (it writes uint8 bytes) and bumps the cache's version counter itself.
On the first CUDA load, `kgen.native` installs a C++ kernel at norm_rope_store's CUDA key that runs the
same table's check and the launch without entering Python (5.9-6.4 us per call instead of 13.6-14.9 in
the H200 host's fast phases); every call it declines goes to `torch.ops.kgen._norm_rope_store_checked`,
the Python kernel.
Another op is added with `define_op` (schema, fake, CPU impl) and `implement(name, "cuda", fn)`.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from . import fastpath
from .abi import NORM_ROPE_STORE, Args, ArgumentError, KernelAbi, Scalar
from .diagnostics import KgenError, Problem
from .layout import compute
from .spec import Spec

__all__ = ["ArgumentError", "Variant", "check_arguments", "define_op", "forget", "implement", "indexer_logits",
           "norm_rope_store", "prepare", "resolve", "resolve_spec", "use_aot", "variant_name"]

KERNEL_ABI = NORM_ROPE_STORE
NAMESPACE = "kgen"


# ---------------------------------------------------------------------------------------------
# spec files -> Spec (content-checked; the op itself resolves a string once, see `resolve`)


# (resolved path, variant name) -> (spec, sha256 of every file validating it read). A hit is reused
# only while all of those files keep their content: a family's included specs count too.
_path_cache: dict[tuple[str, str], tuple[Spec, dict[Path, str | None]]] = {}


def _sha256(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


def resolve_spec(variant: Spec | str | os.PathLike) -> Spec:
    """A Spec from a Spec, a spec path, or "family.yaml::name" (cached by the content of every file
    it was read from, never by mtimes)."""
    if isinstance(variant, Spec):
        return variant
    text = os.fspath(variant)
    path_s, _, name = text.partition("::")
    path = Path(path_s)
    try:
        path.stat()
    except OSError as e:
        raise KgenError([Problem("missing-file", f"{path}: cannot read the spec ({e.strerror})")],
                        exit_code=2) from None
    key = (str(path.resolve()), name)
    hit = _path_cache.get(key)
    if hit is not None and all(_sha256(f) == digest for f, digest in hit[1].items()):
        return hit[0]
    from .validate import validate_or_raise

    result = validate_or_raise(path)
    specs = [c.spec for c in result.variants]
    if name:
        chosen = [s for s in specs if s.name == name]
        if not chosen:
            raise ArgumentError(f"variant: {path} has no variant named '{name}' (it has: "
                                f"{', '.join(s.name for s in specs)})")
        spec = chosen[0]
    elif len(specs) == 1:
        spec = specs[0]
    else:
        raise ArgumentError(f"variant: {path} is a family of {len(specs)} variants "
                            f"({', '.join(s.name for s in specs)}); pick one",
                            fix=f"pass '{path}::{specs[0].name}' or a Spec")
    read = result.document.includes if result.document is not None else [path]
    _path_cache[key] = (spec, {f: _sha256(f) for f in read})
    return spec


def check_arguments(spec: Spec, *tensors, require_cuda: bool = True, **named) -> Args:
    """Check every argument against the spec through the kernel's ABI table (metadata only; the
    device check comes last). Tensors positionally in the kernel's order, or by name."""
    return KERNEL_ABI.check(spec, KERNEL_ABI.bind(tensors, named), require_cuda=require_cuda)


def _check_bounds(c: Args) -> None:
    freqs, positions = c.tensors["freqs"], c.tensors["positions"]
    if positions is None or c.num_tokens == 0:
        return
    if c.spec.positions.source == "decode_plan":  # the positions the plan gives (reference.plan_positions)
        from .reference import plan_positions

        positions = plan_positions(c.spec, positions)[0]
    elif c.spec.positions.source == "compress_plan":  # reference.compress_plan_slots
        from .reference import compress_plan_slots

        positions = compress_plan_slots(c.spec, positions, c.tensors["out_loc"])[0]
    lo, hi = int(positions.min()), int(positions.max())
    if lo < 0 or hi >= freqs.shape[0]:
        raise ArgumentError(f"positions: values in [{lo}, {hi}] but freqs has {freqs.shape[0]} rows "
                            f"(valid: [0, {freqs.shape[0] - 1}])")


# ---------------------------------------------------------------------------------------------
# AOT directory


_aot: dict[str, Any] = {}


def use_aot(directory: str | os.PathLike | None) -> None:
    """Load kernels from the prebuilt cubins of `directory` (`kgen compile ... --out DIR`) instead
    of compiling them; None: back to KGEN_AOT_DIR / the JIT path. Applies to kernels not yet loaded."""
    _aot.clear()
    if directory is not None:
        from .aot import AotDir

        _aot["dir"] = AotDir(Path(directory))
    else:
        _aot["dir"] = None


def aot_dir():
    if "dir" not in _aot:
        env = os.environ.get("KGEN_AOT_DIR")
        if env:
            use_aot(env)
        else:
            _aot["dir"] = None
    return _aot["dir"]


def _cubin(spec: Spec, arch: str) -> tuple[bytes, str, dict | None, str]:
    """(cubin, mangled symbol, ABI manifest it was built for, uri): prebuilt or JIT-compiled."""
    aot = aot_dir()
    if aot is not None:
        k = aot.find(spec, arch)
        return k.cubin, k.symbol, k.abi, k.uri
    from .compile import compile_variant

    ck = compile_variant(spec, arch)
    return ck.cubin, ck.symbol, getattr(ck, "abi", None), ck.uri


# ---------------------------------------------------------------------------------------------
# variants: resolved once per process


def _no_cuda(*_args: Any) -> int:
    raise KgenError([Problem("no-gpu", "this torch build has no CUDA: the op's CUDA path cannot run")], exit_code=2)


# torch's own accessors (what Inductor's generated code calls): the current stream's raw handle of a
# device, and the current device, each well under a microsecond
_raw_stream: Callable[[int], int] = getattr(torch._C, "_cuda_getCurrentRawStream", _no_cuda)
_current_device: Callable[[], int] = getattr(torch._C, "_cuda_getDevice", _no_cuda)
_bump_version = torch.autograd.graph.increment_version


def _pdl(spec: Spec, arch: str) -> bool:
    """Whether the launch sets programmatic stream serialization: exactly when the kernel waits for
    its predecessor in-kernel, which the compiled target's arch decides (kgen.layout.uses_pdl; a
    launch with the attribute of a kernel that does not wait would race with the kernel before it)."""
    from .arch import parse
    from .layout import uses_pdl

    target = parse(arch)
    if target is None:
        return False
    return bool(uses_pdl(spec, (target[0], target[1])))


class _ParamInfo:
    """What `KernelAbi.check_loaded` reads of a loaded kernel: its parameters' (offset, size)."""

    def __init__(self, sizes: tuple[int, ...]):
        self.arguments_info = [(0, s) for s in sizes]


class Variant:
    """One variant as the op runs it: spec, layout, ABI table, and per device the loaded kernel and
    its prepacked launch. `launch(*tensors)` is the CUDA implementation."""

    def __init__(self, key: str, spec: Spec, abi: KernelAbi = KERNEL_ABI):
        self.key, self.spec, self.abi = key, spec, abi
        self.layout = compute(spec)
        self.names = abi.tensor_names
        self._symbols = fastpath._symbols(abi, spec, self.layout)
        self._scalars = [f.name for f in abi.fields if isinstance(f, Scalar)]
        self._shapes: dict[tuple, tuple] = {}  # symbolic sizes -> (grid or 0, *scalars)
        self._runs: dict[int, Callable[..., None]] = {}  # device -> run(grid, stream, *values)
        self.kernels: dict[int, dict] = {}  # device -> what was loaded (arch, uri, registers, ...)
        self._lock = threading.Lock()
        self._native: int | None = None  # this variant's table in the native kernel (kgen.native), once loaded
        # the per-call path: the generated check + the prepacked launch (False: take launch_checked)
        self.fast, self.fast_source = fastpath.build_launch(abi, spec, self.layout, self._shapes, self._runs,
                                                            _raw_stream, _current_device)

    # ---- CUDA -------------------------------------------------------------------------------

    def launch(self, *tensors) -> None:
        """Check and launch on the tensors' device, on torch's current stream (asynchronous)."""
        if not self.fast(*tensors):
            self.launch_checked(tensors)

    def launch_checked(self, tensors: tuple) -> None:
        """The slow path: the ABI table's check (raises the located message), load on first use,
        remember this shape for the fast path, launch under a device guard."""
        args = self.abi.check(self.spec, dict(zip(self.names, tensors)), layout=self.layout)
        dev = next(t for t in tensors if t is not None).get_device()
        run = self._runs.get(dev) or self._load(dev, args)
        grid = self._grid(dev, args)
        entry = (grid, *(args.scalars[s] for s in self._scalars))
        if len(self._shapes) >= fastpath.MAX_SHAPES:
            self._shapes.clear()
        key = tuple(args.dims[s] for s in self._symbols)
        self._shapes[key] = entry
        if self._native is not None:
            self._native_shape(key, grid, args)
        if grid:
            with torch.cuda.device(dev):
                run(grid, _raw_stream(dev), *args.values())

    def _grid(self, dev: int, args: Args) -> int:
        """Blocks of the launch; 0 when there is nothing to do (N == 0: the op is a no-op)."""
        blocks, threads = args.grid()
        if threads != self.kernels[dev]["block"]:  # the prepared buffer has the block size built in
            raise KgenError([Problem("kernel-abi", f"{self.spec.name}: the launch shape wants {threads} threads "
                                     f"per block, the prepared launch has {self.kernels[dev]['block']}")])
        return blocks if args.scalars.get("num_tokens", 1) > 0 else 0

    def _load(self, dev: int, args: Args) -> Callable[..., None]:
        from . import launcher
        from .arch import check as check_arch

        with self._lock:
            run = self._runs.get(dev)
            if run is not None:
                return run
            cap = torch.cuda.get_device_capability(dev)
            name = torch.cuda.get_device_name(dev)
            arch = check_arch(cap, list(self.spec.targets), device_name=f"GPU {dev} ({name})", variant=self.spec.name)
            cubin, symbol, recorded, uri = _cubin(self.spec, arch)
            self.abi.check_manifest(recorded, uri)
            kernel = launcher.load_cubin(cubin, symbol, dev, what=uri)
            if kernel.param_sizes is not None:  # None: the driver cannot say (older than 12.4)
                self.abi.check_loaded(_ParamInfo(kernel.param_sizes), uri)
            _, threads = args.grid()
            pdl = _pdl(self.spec, arch)
            prepared = launcher.PreparedLaunch(self.abi.struct_format, threads, pdl=pdl)
            run = launcher.launcher(kernel, prepared, name=uri)
            self.kernels[dev] = {"arch": arch, "uri": uri, "block": threads, "pdl": pdl, "kernel": kernel,
                                 "backend": getattr(run, "backend", None),
                                 "prepared": prepared, "registers": kernel.attribute("NUM_REGS"),
                                 "aot": aot_dir() is not None}
            self._native_device(dev, kernel, threads, pdl)
            self._runs[dev] = run
            return run

    # ---- the native kernel (kgen.native): fed what the checked path learnt -------------------

    def _native_device(self, dev: int, kernel, threads: int, pdl: bool) -> None:
        native = _native_kernel() if self.abi is KERNEL_ABI else None
        if native is None:
            return
        if self._native is None:
            self._native = native.add_variant(self.key, self._native_table(), len(self._symbols),
                                              self.abi.size, fastpath.ALIGNMENT)
            if self._native is None:
                return
        native.set_device(self._native, dev, kernel.function, kernel.context, (threads, 1, 1), pdl)

    def _native_table(self) -> list[dict]:
        """The argument table the native kernel checks, from the ABI table (op argument i + 1 is the
        kernel's tensor i: the op's schema lists them in the ABI's order after the variant)."""
        offsets = {s.field.name: s.offset for s in self.abi.slots}
        table = []
        for i, f in enumerate(self.abi.tensors):
            present = f.present(self.spec)
            dims = [d if isinstance(d, int) else -1 - self._symbols.index(d)
                    for d in f.shape(self.spec, self.layout)] if present else []
            table.append({"arg": i + 1, "present": present, "dtype": f.dtype(self.spec) if present else "",
                          "dims": dims, "offset": offsets[f.name]})
        return table

    def _native_shape(self, key: tuple, grid: int, args: Args) -> None:
        native = _native_kernel()
        if native is None or self._native is None:
            return
        params = self.abi.pack(args.values(lambda _n, _t: 0))  # scalars packed, pointers written per call
        native.add_shape(self._native, key, (grid, 1, 1) if grid else (0, 0, 0), int(self.abi.shared_bytes(args)),
                         params)

    def prepared(self, *tensors) -> Callable[[], None]:
        """Check once, load, pack once: `run()` launches the same arguments on torch's current stream
        (the raw launcher: benchmarks, CUDA-graph capture)."""
        args = self.abi.check(self.spec, dict(zip(self.names, tensors)), layout=self.layout)
        dev = next(t for t in tensors if t is not None).get_device()
        run = self._runs.get(dev) or self._load(dev, args)
        grid = self._grid(dev, args)
        if not grid:
            return lambda: None
        values = args.values()
        stream = _raw_stream

        def launch_prepared() -> None:
            _ = args  # keeps the tensors alive as long as the launcher
            run(grid, stream(dev), *values)

        return launch_prepared

    # ---- CPU and fake ------------------------------------------------------------------------

    def check_cpu(self, tensors: tuple) -> Args:
        args = self.abi.check(self.spec, dict(zip(self.names, tensors)), require_cuda=False, layout=self.layout)
        for name, t in zip(self.names, tensors):
            if t is not None and t.device.type != "cpu":
                raise ArgumentError(f"{name}: on {t.device}, but the other arguments are on the CPU: all arguments "
                                    "must share one device")
        return args

    def check_fake(self, tensors: tuple) -> None:
        """Shape checks on fake/meta tensors (no data pointers), symbolic sizes kept symbolic."""
        fastpath.fake_check(self.abi, self.spec, self.layout, dict(zip(self.names, tensors)))


_variants: dict[str, Variant] = {}
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
        digest = hashlib.sha256(variant.model_dump_json().encode()).hexdigest()[:16]
        key = f"{SPEC_PREFIX}{variant.name}:{digest}"
        with _resolve_lock:
            if key not in _variants:
                _variants[key] = Variant(key, variant)
            _spec_ids[id(variant)] = (variant, key)
        return key
    return os.fspath(variant)


def resolve(variant: Spec | str | os.PathLike) -> Variant:
    """The Variant of a variant string (resolved on first use, then cached for the process)."""
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
            v = _variants[key] = Variant(key, spec)
    return v


def forget() -> None:
    """Drop every resolved variant and loaded kernel (tests; a changed spec file in a long process)."""
    with _resolve_lock:
        _variants.clear()
        _spec_ids.clear()
        _path_cache.clear()
    _aot.clear()
    native = _native_kernel(install=False)
    if native is not None:
        native.forget()


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


# ---- norm_rope_store ----------------------------------------------------------------------------


def _norm_rope_store_cuda(variant, x, weight, bias, freqs, positions, out_loc, cache) -> None:
    v = _variants.get(variant) or resolve(variant)
    if not v.fast(x, weight, bias, freqs, positions, out_loc, cache):
        v.launch_checked((x, weight, bias, freqs, positions, out_loc, cache))
    _bump_version(cache)  # the kernel wrote it behind autograd's back


def _norm_rope_store_cpu(variant, x, weight, bias, freqs, positions, out_loc, cache) -> None:
    from . import reference

    v = _variants.get(variant) or resolve(variant)
    v.check_cpu((x, weight, bias, freqs, positions, out_loc, cache))
    reference.norm_rope_store(v.spec, x, weight, bias, freqs, positions, out_loc, cache)


def _norm_rope_store_fake(variant, x, weight, bias, freqs, positions, out_loc, cache) -> None:
    resolve(variant).check_fake((x, weight, bias, freqs, positions, out_loc, cache))


def _native_kernel(install: bool = True):
    """kgen.native's kernel at norm_rope_store's CUDA key (installed on the first CUDA load), or None."""
    from . import native

    if not install and native.status() == "":
        return None
    return native.install(NAMESPACE, "norm_rope_store", "_norm_rope_store_checked")


NORM_ROPE_STORE_SCHEMA = ("(str variant, Tensor x, Tensor? weight, Tensor? bias, Tensor? freqs, Tensor? positions, "
                          "Tensor out_loc, Tensor(a!) cache) -> ()")
norm_rope_store_op = define_op("norm_rope_store", NORM_ROPE_STORE_SCHEMA, fake=_norm_rope_store_fake,
                               cpu=_norm_rope_store_cpu, cuda=_norm_rope_store_cuda)
# the Python CUDA implementation under its own name: the native kernel (kgen.native), once installed at
# norm_rope_store's CUDA key, hands every call it declines to it (the located messages live here)
define_op("_norm_rope_store_checked", NORM_ROPE_STORE_SCHEMA, fake=_norm_rope_store_fake, cuda=_norm_rope_store_cuda)


# ---- indexer_logits: the read side (CPU = kgen.score's Torch path; CUDA = kgen.indexer's kernel) ----


def _indexer_logits_cpu(variant, q, weights, cache, block_table, seq_lens, max_seq_len):
    from .score import indexer_logits_torch

    return indexer_logits_torch(resolve(variant).spec, q, weights, cache, block_table, seq_lens, max_seq_len)


def _indexer_logits_cuda(variant, q, weights, cache, block_table, seq_lens, max_seq_len):
    from .indexer import cuda_impl  # the read side's kernel (kgen.indexer, docs/ops.md)

    return cuda_impl(variant, q, weights, cache, block_table, seq_lens, max_seq_len)


def _indexer_logits_fake(variant, q, weights, cache, block_table, seq_lens, max_seq_len):
    spec = resolve(variant).spec
    if q.dim() != 4 or q.shape[3] != spec.head_dim:
        raise ArgumentError(f"q: expected [B, next_n, H, {spec.head_dim}], got {list(q.shape)}")
    return q.new_empty((q.shape[0] * q.shape[1], max_seq_len), dtype=torch.float32)


INDEXER_LOGITS_SCHEMA = ("(str variant, Tensor q, Tensor weights, Tensor cache, Tensor block_table, "
                         "Tensor seq_lens, int max_seq_len) -> Tensor")
indexer_logits_op = define_op("indexer_logits", INDEXER_LOGITS_SCHEMA, fake=_indexer_logits_fake,
                              cpu=_indexer_logits_cpu, cuda=_indexer_logits_cuda)


# ---------------------------------------------------------------------------------------------
# the Python API


def norm_rope_store(variant: Spec | str | os.PathLike, x, weight, bias, freqs, positions, out_loc, cache, *,
                    check_bounds: bool = False) -> None:
    """Normalize, rotate, (Hadamard), quantize and store `x` into the paged `cache` at `out_loc`,
    through `torch.ops.kgen.norm_rope_store`: asynchronous on torch's current stream (CUDA), the
    reference on CPU tensors. N == 0 is a no-op (after the checks). `check_bounds=True` also checks
    `positions` against freqs' rows (one device sync)."""
    key = variant_name(variant)
    if check_bounds:
        v = resolve(key)
        _check_bounds(v.abi.check(v.spec, dict(zip(v.names, (x, weight, bias, freqs, positions, out_loc, cache))),
                                  require_cuda=False, layout=v.layout))
    norm_rope_store_op(key, x, weight, bias, freqs, positions, out_loc, cache)


def indexer_logits(variant: Spec | str | os.PathLike, q, weights, cache, block_table, seq_lens,
                   max_seq_len: int):
    """fp32 [B * next_n, max_seq_len] logits through `torch.ops.kgen.indexer_logits`."""
    return indexer_logits_op(variant_name(variant), q, weights, cache, block_table, seq_lens, int(max_seq_len))


def prepare(variant: Spec | str | os.PathLike, x, weight, bias, freqs, positions, out_loc, cache, *,
            check_bounds: bool = False) -> Callable[[], None]:
    """Check once and return a zero-argument launcher (the raw launcher: benchmarks, CUDA-graph
    capture). It keeps the tensors alive and launches on torch's current stream at call time."""
    v = resolve(variant)
    tensors = (x, weight, bias, freqs, positions, out_loc, cache)
    if check_bounds:
        _check_bounds(check_arguments(v.spec, *tensors))
    return v.prepared(*tensors)
