"""What the installed CUDA toolchain can do, asked without importing cuda-python.

`kgen validate` must stay fast and free of CUDA imports, yet the `targets` rule should ask NVRTC
itself which architectures it supports. libnvrtc is loaded with ctypes (a few ms); where it is not
installed the rule falls back to a built-in list and says so.
"""

from __future__ import annotations

import ctypes
import functools
import importlib.util
from pathlib import Path

# NVRTC 13.x's list, used only when no libnvrtc can be found.
FALLBACK_ARCHS = (75, 80, 86, 87, 88, 89, 90, 100, 103, 110, 120, 121)


def nvrtc_library() -> Path | None:
    """Path of the libnvrtc shipped by the nvidia-cuda-nvrtc wheel, found without importing it."""
    spec = importlib.util.find_spec("nvidia")
    if spec is None or not spec.submodule_search_locations:
        return None
    for root in spec.submodule_search_locations:
        for lib in sorted(Path(root).glob("cu*/lib/libnvrtc.so*")) + sorted(Path(root).glob("cuda_nvrtc/lib/libnvrtc.so*")):
            if "builtins" not in lib.name and "alt" not in lib.name:
                return lib
    return None


def _cache_file() -> Path | None:
    import os

    if os.environ.get("KGEN_NO_PROBE_CACHE"):
        return None
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "kgen" / "nvrtc_archs.json"


def _probe_key(lib: Path) -> str:
    st = lib.stat()
    return f"{lib.resolve()}:{st.st_size}:{st.st_mtime_ns}"


def _read_probe(lib: Path) -> tuple[frozenset[int], str] | None:
    """The last probe of this very library file (same path, size and mtime), if recorded."""
    import json

    f = _cache_file()
    try:
        data = json.loads(f.read_text()) if f is not None else None
        if data and data.get("key") == _probe_key(lib):
            return frozenset(int(x) for x in data["archs"]), str(data["source"])
    except (OSError, ValueError, KeyError, TypeError):
        pass
    return None


def _write_probe(lib: Path, archs: frozenset[int], source: str) -> None:
    import json
    import os
    import tempfile

    f = _cache_file()
    if f is None:
        return
    try:
        f.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=f.parent, suffix=".tmp")
        with os.fdopen(fd, "w") as out:
            json.dump({"key": _probe_key(lib), "archs": sorted(archs), "source": source}, out)
        os.replace(tmp, f)  # atomic: concurrent runs never read half a file
    except OSError:
        pass  # a read-only home only costs the probe next time


@functools.lru_cache(maxsize=1)
def supported_archs() -> tuple[frozenset[int], str]:
    """(compute capabilities NVRTC can target, who said so). The answer of a given libnvrtc file
    is recorded in ~/.cache/kgen (keyed by its path, size and mtime): loading the library costs
    ~10-20 ms of every `kgen validate`."""
    lib_path = nvrtc_library()
    if lib_path is not None:
        cached = _read_probe(lib_path)
        if cached is not None:
            return cached
        probed = _probe(lib_path)
        if probed is not None:
            _write_probe(lib_path, *probed)
            return probed
    return frozenset(FALLBACK_ARCHS), "kgen's built-in list (NVRTC not found)"


def _probe(lib_path: Path) -> tuple[frozenset[int], str] | None:
    if lib_path is not None:
        try:
            lib = ctypes.CDLL(str(lib_path))
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
    """Asked of the library itself, never of the probe record: compile cache keys depend on it."""
    lib = nvrtc_library()
    probed = _probe(lib) if lib is not None else None
    return probed[1] if probed is not None else supported_archs()[1]
