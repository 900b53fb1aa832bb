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


@functools.lru_cache(maxsize=1)
def supported_archs() -> tuple[frozenset[int], str]:
    """(compute capabilities NVRTC can target, who said so)."""
    lib_path = nvrtc_library()
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
    return frozenset(FALLBACK_ARCHS), "kgen's built-in list (NVRTC not found)"


@functools.lru_cache(maxsize=1)
def nvrtc_version() -> str:
    return supported_archs()[1]
