"""The native launch path of kgen's ops: `kgen/fastop.cpp`, built on first use, registered at the op's CUDA key.

One job: build (once per machine, torch build and source), load and feed the C++ kernel that checks
and launches a call of a kgen op (`torch.ops.kgen.norm_rope_store`, `torch.ops.kgen.indexer_logits`)
without entering Python (docs/ops.md, "Host cost": the Python kernel's boxing and ~30 attribute reads
cost more than the launch itself).

* Build: the machine's C++ compiler (`$CXX`, else c++/g++/clang++) against the headers and libraries
  torch ships (no CUDA toolkit, no ninja, no setuptools): about 5-15 s once, then cached as
  `$KGEN_CACHE_DIR/_native/fastop-<hash>.so` (hash of the source, torch's version and build, the
  compiler's path and `--version`). Written atomically; a failed build is remembered for the process,
  never retried per call.
* Fallback: without a compiler, with torch headers missing, a failed build, a CUDA entry point not
  found (cuLaunchKernelEx, cuCtxGetCurrent, torch's aoti_torch_get_current_cuda_stream), or
  KGEN_NATIVE=0, `install` returns None and says why (`status()`): the op keeps its Python CUDA
  kernel, correct and slower. Nothing is required at install time of kgen.
* Feeding: `Native.add_variant` sends a variant's argument table (from kgen.abi's: the one
  description; the op's result tensor and the int arguments that bind a size too), `set_cluster` whether
  its launches carry the cluster dimension (grid x, 1, 1), `set_device` the
  loaded CUfunction per device, `add_shape` each shape the checked path accepted (grid, shared memory,
  the cubin where it depends on the shape, the Params struct with its scalars packed), `add_map` a
  tensor map per source address. The C++ side declines anything else, and the call goes to the
  checked twin op (the Python implementation), which raises the located message or launches and adds
  the shape.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import threading
from pathlib import Path
from typing import Any

from .cache import cache_root

SOURCE = Path(__file__).with_name("fastop.cpp")
MAX_RANK = 8  # kMaxRank in fastop.cpp
BUILD_TIMEOUT_S = 300

_lock = threading.Lock()
_state: dict[str, Any] = {}


def status() -> str:
    """Why the native path is or is not in use ("" before the first attempt)."""
    return _state.get("status", "")


def _compiler() -> str | None:
    for name in (os.environ.get("CXX"), "c++", "g++", "clang++"):
        if name and shutil.which(name):
            return shutil.which(name)
    return None


def _torch_paths() -> tuple[Path, Path]:
    import torch

    root = Path(torch.__file__).parent
    return root / "include", root / "lib"


def _compiler_version(cxx: str) -> str:
    """`cxx --version` (the toolchain, not only its path, is part of the build key: an upgraded compiler
    at the same path rebuilds)."""
    try:
        return subprocess.run([cxx, "--version"], capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return ""


def _build_key(cxx: str) -> str:
    import torch

    h = hashlib.sha256(SOURCE.read_bytes())
    for part in (torch.__version__, str(getattr(torch.version, "git_version", "")), cxx, _compiler_version(cxx),
                 str(torch._C._GLIBCXX_USE_CXX11_ABI)):
        h.update(b"\0" + part.encode())
    return h.hexdigest()[:16]


def build() -> Path:
    """The compiled library (built now unless cached). Raises RuntimeError with the compiler's output."""

    cxx = _compiler()
    if cxx is None:
        raise RuntimeError("no C++ compiler (set CXX, or install g++)")
    include, lib = _torch_paths()
    if not (include / "torch" / "library.h").is_file():
        raise RuntimeError(f"torch's C++ headers are not installed ({include / 'torch' / 'library.h'} is missing)")
    out_dir = cache_root() / "_native"
    target = out_dir / f"fastop-{_build_key(cxx)}.so"
    if target.is_file():
        return target
    out_dir.mkdir(parents=True, exist_ok=True)
    import torch

    tmp = out_dir / f".tmp-{os.getpid()}-{threading.get_ident()}-{target.name}"
    abi = int(bool(torch._C._GLIBCXX_USE_CXX11_ABI))
    errors = []
    for std in ("-std=c++20", "-std=c++17"):  # torch >= 2.10 needs C++20; older headers take either
        cmd = [cxx, "-O2", std, "-shared", "-fPIC", f"-D_GLIBCXX_USE_CXX11_ABI={abi}", f"-I{include}",
               str(SOURCE), "-o", str(tmp), f"-L{lib}", "-lc10", "-ltorch_cpu", f"-Wl,-rpath,{lib}"]
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S)
        except (OSError, subprocess.TimeoutExpired) as e:
            errors.append(f"{std}: {e}")
            continue
        if r.returncode == 0:
            os.replace(tmp, target)
            return target
        errors.append(f"{std}: " + r.stderr.strip()[-1500:])
    tmp.unlink(missing_ok=True)
    raise RuntimeError("the C++ build failed: " + "\n".join(errors))


class Native:
    """The loaded library, installed on one op (`kgen_native_install`); its methods feed the C++ tables."""

    def __init__(self, path: Path):
        self.path = path
        self.lib = lib = ctypes.CDLL(str(path))
        ptr, cint, i64, u32 = ctypes.c_void_p, ctypes.c_int, ctypes.c_int64, ctypes.c_uint32
        i32p, i64p = ctypes.POINTER(ctypes.c_int32), ctypes.POINTER(ctypes.c_int64)
        lib.kgen_native_error.restype = ctypes.c_char_p
        lib.kgen_native_dtype.argtypes, lib.kgen_native_dtype.restype = [ctypes.c_char_p], cint
        lib.kgen_native_install.argtypes = [ctypes.c_char_p] * 4 + [ptr, ptr, ptr]
        lib.kgen_native_install.restype = ptr
        lib.kgen_native_add_variant.argtypes = [ptr, ctypes.c_char_p, cint, i32p, i32p, i32p, i32p, i64p, i64p, i32p,
                                                cint, i64, i64, cint, i32p, i32p, cint, i64, cint]
        lib.kgen_native_add_variant.restype = ptr
        lib.kgen_native_set_device.argtypes = [ptr, ptr, cint, ptr, ptr, u32, u32, u32, cint]
        lib.kgen_native_add_shape.argtypes = [ptr, ptr, i64p, cint, u32, u32, u32, u32, ctypes.c_char_p, ptr, ptr,
                                              u32, u32, u32, cint, cint]
        lib.kgen_native_set_cluster.argtypes = [ptr, ptr, cint]
        lib.kgen_native_add_map.argtypes = [ptr, ptr, i64p, cint, ptr, ctypes.c_char_p]
        lib.kgen_native_forget.argtypes = [ptr]
        lib.kgen_native_counts.argtypes = [ptr, i64p]
        lib.kgen_native_install_chain.argtypes = [ctypes.c_char_p] * 4 + [ptr, ptr, cint, i32p, cint, i32p, cint, i64,
                                                                          i64]
        lib.kgen_native_install_chain.restype = ptr
        lib.kgen_native_chain_counts.argtypes = [ptr, i64p]
        self.op: int | None = None

    def install(self, namespace: str, op: str, checked: str, dispatch_key: str, launch: int, stream: int,
                context: int | None) -> None:
        h = self.lib.kgen_native_install(namespace.encode(), op.encode(), checked.encode(), dispatch_key.encode(),
                                         launch, stream, context)
        if not h:
            raise RuntimeError(f"kgen_native_install: {self.lib.kgen_native_error().decode()}")
        self.op = h

    def dtype_code(self, name: str) -> int:
        return int(self.lib.kgen_native_dtype(name.encode()))

    def add_variant(self, key: str, table: list[dict], num_syms: int, params_size: int, alignment: int, *,
                    int_args: dict[int, int] | None = None, keyed_by_device: bool = False, map_offset: int = -1,
                    map_source: int = -1) -> int | None:
        """`table`: per tensor {arg, present, dtype (torch name), dims (int or symbol index as -1 - k),
        offset, output (allocated and returned, optional)}; `int_args`: {argument index: symbol index} of
        the int arguments that bind a size; `keyed_by_device`: shapes are per device (their cubin depends
        on the shape); the tensor map at `map_offset` describes tensor `map_source`. None when the C++
        side cannot hold it (the variant stays on the Python path)."""
        n = len(table)
        codes = [self.dtype_code(t["dtype"]) if t["present"] else 0 for t in table]
        if any(c < 0 for c in codes) or any(len(t["dims"]) > MAX_RANK for t in table):
            return None
        dims: list[int] = []
        for t in table:
            dims += list(t["dims"]) + [0] * (MAX_RANK - len(t["dims"]))
        i32s, i64 = ctypes.c_int32 * n, ctypes.c_int64
        ints = sorted((int_args or {}).items())
        i32k = ctypes.c_int32 * max(1, len(ints))
        h = self.lib.kgen_native_add_variant(
            self.op, key.encode(), n, i32s(*(t["arg"] for t in table)), i32s(*(int(t["present"]) for t in table)),
            i32s(*codes), i32s(*(len(t["dims"]) for t in table)), (i64 * len(dims))(*dims),
            (i64 * n)(*(t["offset"] for t in table)), i32s(*(int(t.get("output", False)) for t in table)), num_syms,
            params_size, alignment, len(ints), i32k(*(a for a, _ in ints)), i32k(*(k for _, k in ints)),
            int(keyed_by_device), map_offset, map_source)
        return h or None

    def set_cluster(self, variant: int, cluster_x: bool) -> None:
        """Launch the variant with the cluster dimension (grid x, 1, 1) (kgen.abi.KernelAbi.cluster_x)."""
        self.lib.kgen_native_set_cluster(self.op, variant, int(cluster_x))

    def set_device(self, variant: int, device: int, function: int, context: int, block: tuple[int, int, int],
                   pdl: bool) -> None:
        self.lib.kgen_native_set_device(self.op, variant, device, function, context, *block, int(pdl))

    def add_shape(self, variant: int, syms: tuple[int, ...], grid: tuple[int, int, int], shared_bytes: int,
                  params: bytes, *, device: int = -1, function: int = 0, context: int = 0,
                  block: tuple[int, int, int] = (0, 0, 0), pdl: bool = False, uses_map: bool = False) -> None:
        """A shape the checked path accepted; `function` (0: the device's) the cubin it runs; `uses_map`:
        its cubin reads the tensor map, so a call launches natively only once add_map taught the map of
        its source tensor (a cubin that reads none, such as the fp4 reader's, launches with the slot zero)."""
        self.lib.kgen_native_add_shape(self.op, variant, (ctypes.c_int64 * max(1, len(syms)))(*syms), device, *grid,
                                       shared_bytes, params, function or None, context or None, *block, int(pdl),
                                       int(uses_map))

    def add_map(self, variant: int, syms: tuple[int, ...], device: int, address: int, data: bytes) -> None:
        """The tensor map of a registered shape for the source tensor at `address`."""
        self.lib.kgen_native_add_map(self.op, variant, (ctypes.c_int64 * max(1, len(syms)))(*syms), device, address,
                                     data)

    def forget(self) -> None:
        self.lib.kgen_native_forget(self.op)

    def counts(self) -> tuple[int, int]:
        """(calls launched natively, calls that went to the checked twin)."""
        out = (ctypes.c_int64 * 2)()
        self.lib.kgen_native_counts(self.op, out)
        return int(out[0]), int(out[1])


class Chain:
    """Two native ops' fast paths behind one op (kgen_native_install_chain): one dispatch for both."""

    def __init__(self, lib: ctypes.CDLL, handle: int):
        self.lib, self.handle = lib, handle

    def counts(self) -> tuple[int, int]:
        """(calls that ran natively, calls that went to the chain's checked twin)."""
        out = (ctypes.c_int64 * 2)()
        self.lib.kgen_native_chain_counts(self.handle, out)
        return int(out[0]), int(out[1])


def chain(first: Native, second: Native, namespace: str, op: str, checked: str, dispatch_key: str,
          first_args: list[int], second_args: list[int], int_range: tuple[int, int, int] | None = None) -> Chain:
    """Install the chain `namespace::op` (checked twin `checked`): `first`'s then `second`'s fast path, their
    arguments as the op's argument indices (-1 in `second_args`: `first`'s result); `int_range` (argument, lo,
    hi): an int argument checked before anything launches. Raises RuntimeError where the C++ side refuses."""
    if first.path != second.path or first.op is None or second.op is None:
        raise RuntimeError("a chain's ops must be installed from one library")
    a, b = ctypes.c_int32 * max(1, len(first_args)), ctypes.c_int32 * max(1, len(second_args))
    arg, lo, hi = int_range or (-1, 0, 0)
    h = first.lib.kgen_native_install_chain(namespace.encode(), op.encode(), checked.encode(), dispatch_key.encode(),
                                            first.op, second.op, len(first_args), a(*first_args), len(second_args),
                                            b(*second_args), arg, lo, hi)
    if not h:
        raise RuntimeError(f"kgen_native_install_chain: {first.lib.kgen_native_error().decode()}")
    return Chain(first.lib, h)


def install_chain(namespace: str, op: str, checked: str, first: str, second: str, first_args: list[int],
                  second_args: list[int], int_range: tuple[int, int, int] | None = None) -> Chain | None:
    """The chain at `namespace::op`'s CUDA key over the native kernels of the ops `first` and `second` (installed
    already: install()), once per process; None where either has none (status() says why) or the C++ side refused."""
    slot = f"chain:{namespace}::{op}"
    with _lock:
        if slot in _state:
            return _state[slot]
        a, b = _state.get(f"native:{namespace}::{first}"), _state.get(f"native:{namespace}::{second}")
        got = None
        if a is not None and b is not None:
            try:
                got = chain(a, b, namespace, op, checked, "CUDA", first_args, second_args, int_range)
            except RuntimeError as e:
                _state["chain_status"] = str(e)[:2000]
        _state[slot] = got
        return got


def _cuda_entry_points() -> tuple[int, int, int]:
    """(cuLaunchKernelEx, torch's current-stream getter, cuCtxGetCurrent) as addresses."""
    _, lib = _torch_paths()
    cuda = ctypes.CDLL("libcuda.so.1")
    torch_cuda = ctypes.CDLL(str(lib / "libtorch_cuda.so"))
    addr = [ctypes.cast(f, ctypes.c_void_p).value for f in
            (cuda.cuLaunchKernelEx, torch_cuda.aoti_torch_get_current_cuda_stream, cuda.cuCtxGetCurrent)]
    return int(addr[0] or 0), int(addr[1] or 0), int(addr[2] or 0)


def install(namespace: str, op: str, checked: str) -> Native | None:
    """The native kernel at `namespace::op`'s CUDA key (once per process and op), or None (status() says
    why). A failed build is remembered for every op."""
    with _lock:
        slot = f"native:{namespace}::{op}"
        if slot in _state:
            return _state[slot]
        native = None
        if os.environ.get("KGEN_NATIVE", "1") == "0":
            _state["status"] = "off (KGEN_NATIVE=0)"
        elif _state.get("failed"):
            pass
        else:
            try:
                native = Native(build())
                native.install(namespace, op, checked, "CUDA", *_cuda_entry_points())
                _state["status"] = f"on ({native.path.name})"
            except (RuntimeError, OSError, AttributeError) as e:
                native = None
                _state["status"] = f"off: {e}"[:2000]
                _state["failed"] = True
        _state[slot] = native
        return native


def installed() -> list[Native]:
    """The native kernels installed so far (kgen.ops.forget drops their variants)."""
    return [v for k, v in _state.items() if k.startswith("native:") and v is not None]


def installed_chain(namespace: str, op: str) -> Chain | None:
    """The chain installed at `namespace::op`, if any."""
    return _state.get(f"chain:{namespace}::{op}")


def install_for_tests(namespace: str, op: str, checked: str, dispatch_key: str, launch: int, stream: int,
                      context: int | None) -> Native:
    """A separate instance on a test op (e.g. at the CPU key with stub entry points): tests/test_native.py."""
    native = Native(build())
    native.install(namespace, op, checked, dispatch_key, launch, stream, context)
    return native
