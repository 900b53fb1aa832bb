"""The installed CUDA toolchain: where libnvrtc and the cudart headers are, which architectures NVRTC
can target, and the fingerprint of everything outside kgen that changes what NVRTC produces (part of
every compile cache key). Asked without importing cuda-python.

`kgen validate` must stay fast and free of CUDA imports, yet the `targets` rule should ask NVRTC
itself which architectures it supports. libnvrtc is loaded with ctypes (10-20 ms); its answer is
recorded in the kgen cache directory (`KGEN_CACHE_DIR`), keyed by the library's path, size and the
version of the wheel that installed it - what is installed, never a modification time. Where no
libnvrtc is installed the rule falls back to a built-in list and says so.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import importlib.util
import json
import os
from pathlib import Path

from .files import write_atomic
from .resources import cache_root
from .source import read_regular

# NVRTC 13.x's list, used only when no libnvrtc can be found.
FALLBACK_ARCHS = (75, 80, 86, 87, 88, 89, 90, 100, 103, 110, 120, 121)
PROBE_RECORD = "nvrtc_archs.json"  # in the cache root
_DISTS = ("nvidia_cuda_nvrtc", "nvidia_cuda_runtime", "cuda_core", "cuda_bindings")


def _site_roots() -> list[Path]:
    spec = importlib.util.find_spec("nvidia")
    if spec is None or not spec.submodule_search_locations:
        return []
    return [Path(p) for p in spec.submodule_search_locations]


def nvrtc_library() -> Path | None:
    """Path of the libnvrtc shipped by the nvidia-cuda-nvrtc wheel, found without importing it."""
    for root in _site_roots():
        for lib in sorted(root.glob("cu*/lib/libnvrtc.so*")) + sorted(root.glob("cuda_nvrtc/lib/libnvrtc.so*")):
            if "builtins" not in lib.name and "alt" not in lib.name:
                return lib
    return None


@functools.lru_cache(maxsize=1)
def dist_versions() -> dict[str, str]:
    """{distribution: version} of the wheels that make up the toolchain, read from *.dist-info
    directory names (no importlib.metadata: it is slow to import)."""
    found: dict[str, str] = {}
    dirs = {p.parent for p in _site_roots()}
    cuda_spec = importlib.util.find_spec("cuda")
    if cuda_spec is not None and cuda_spec.submodule_search_locations:
        dirs |= {Path(p).parent for p in cuda_spec.submodule_search_locations}
    for d in sorted(dirs):
        try:
            names = os.listdir(d)
        except OSError:
            continue
        for n in names:
            if n.endswith(".dist-info"):
                dist, _, ver = n[: -len(".dist-info")].partition("-")
                if dist.lower() in _DISTS:
                    found.setdefault(dist.lower(), ver)
    return found


# ---------------------------------------------------------------------------------------------
# which architectures NVRTC supports (the targets rule, --arch)


def _probe_file() -> Path | None:
    if os.environ.get("KGEN_NO_PROBE_CACHE"):
        return None
    return cache_root() / PROBE_RECORD


def probe_key(lib: Path) -> str | None:
    """What identifies the library's content without reading 100 MB: its real path, its size and the
    version of the wheel that installed it. None (no record) when no wheel claims it."""
    version = dist_versions().get("nvidia_cuda_nvrtc")
    if version is None:
        return None
    return f"{lib.resolve()}:{lib.stat().st_size}:nvidia-cuda-nvrtc=={version}"


def _read_probe(key: str) -> tuple[frozenset[int], str] | None:
    """The recorded probe of this very library, if any (a special file or garbage is ignored)."""

    f = _probe_file()
    try:
        data = json.loads(read_regular(f, 1 << 16)) if f is not None else None
        if isinstance(data, dict) and data.get("key") == key:
            return frozenset(int(x) for x in data["archs"]), str(data["source"])
    except (OSError, ValueError, KeyError, TypeError):
        pass
    return None


def _write_probe(key: str, archs: frozenset[int], source: str) -> None:

    f = _probe_file()
    if f is None:
        return
    try:  # atomic: concurrent runs never read half a file
        write_atomic(f, json.dumps({"key": key, "archs": sorted(archs), "source": source}))
    except OSError:
        pass  # an unwritable cache only costs the probe next time


@functools.lru_cache(maxsize=1)
def supported_archs() -> tuple[frozenset[int], str]:
    """(compute capabilities NVRTC can target, who said so). Recorded per library (see the module
    docstring): loading the library costs 10-20 ms of every `kgen validate`."""
    lib_path = nvrtc_library()
    if lib_path is not None:
        try:
            key = probe_key(lib_path)
        except OSError:
            key = None
        cached = _read_probe(key) if key is not None else None
        if cached is not None:
            return cached
        probed = _probe(lib_path)
        if probed is not None:
            if key is not None:
                _write_probe(key, *probed)
            return probed
    return frozenset(FALLBACK_ARCHS), "kgen's built-in list (NVRTC not found)"


def _probe(lib_path: Path, *, loaded_only: bool = False) -> tuple[frozenset[int], str] | None:
    """(architectures, "NVRTC major.minor") of the library at `lib_path`; `loaded_only`: of the one this process
    already loaded under that name (a bare soname), if any."""
    try:
        mode = os.RTLD_NOLOAD | os.RTLD_LAZY if loaded_only else ctypes.DEFAULT_MODE
        lib = ctypes.CDLL(str(lib_path), mode=mode)
        n = ctypes.c_int()
        if lib.nvrtcGetNumSupportedArchs(ctypes.byref(n)) == 0 and n.value > 0:
            arr = (ctypes.c_int * n.value)()
            if lib.nvrtcGetSupportedArchs(arr) == 0:
                major, minor = ctypes.c_int(), ctypes.c_int()
                lib.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor))
                return frozenset(arr), f"NVRTC {major.value}.{minor.value}"
    except OSError:
        pass
    return None


@functools.lru_cache(maxsize=1)
def nvrtc_version() -> str:
    """The version of the NVRTC that compiles, asked of the library, never of the probe record: compile cache keys
    depend on it. cuda-python takes a libnvrtc the process already loaded under the wheel's soname before the
    wheel's own file, so an LD_PRELOAD (scripts/nvrtc_image.sh: the device image's 13.0 in place of the pinned
    13.5) compiles with another NVRTC than the wheel's; keyed by the wheel's, such a compile found the pinned
    NVRTC's cubins and compiled nothing. Asked here without importing cuda-python (a cache hit never does)."""
    lib = nvrtc_library()
    probed = (_probe(Path(lib.name), loaded_only=True) or _probe(lib)) if lib is not None else None
    return probed[1] if probed is not None else supported_archs()[1]


# ---------------------------------------------------------------------------------------------
# headers and the fingerprint compile cache keys include


@functools.lru_cache(maxsize=1)
def cudart_include_dir() -> Path | None:
    """The directory holding cuda_bf16.h / cuda_fp8.h (the nvidia-cuda-runtime wheel's include dir)."""
    for root in _site_roots():
        for cand in sorted(root.glob("cu*/include")) + [root / "cuda_runtime" / "include"]:
            if (cand / "cuda_bf16.h").is_file():
                return cand
    try:  # not a wheel layout we know: ask cuda.pathfinder (slower; also finds a CUDA toolkit)
        from cuda.pathfinder import find_nvidia_header_directory

        found = find_nvidia_header_directory("cudart")
        return Path(found) if found else None
    except Exception:  # noqa: BLE001 - no headers is reported by the compile itself
        return None


def _hash_tree(root: Path) -> str:
    h = hashlib.sha256()
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(filenames):
            p = Path(dirpath, name)
            h.update(str(p.relative_to(root)).encode() + b"\0")
            try:
                h.update(hashlib.sha256(p.read_bytes()).digest())
            except OSError:
                h.update(b"?")
    return h.hexdigest()


@functools.lru_cache(maxsize=1)
def toolchain_fingerprint() -> dict:
    """Everything outside kgen that changes what NVRTC produces: NVRTC's own version, the versions
    of the wheels that ship libnvrtc, the cudart headers and cuda-python, and - where the cudart
    headers do not come from a wheel - their whole directory, names and contents. Once per process."""
    fp: dict = {"nvrtc": nvrtc_version(), "dists": dist_versions()}
    inc = cudart_include_dir()
    fp["cudart_include"] = None if inc is None else inc.name
    if inc is not None and "nvidia_cuda_runtime" not in fp["dists"]:
        fp["cudart_tree"] = _hash_tree(inc)  # headers not from the wheel: hash them all
    return fp
