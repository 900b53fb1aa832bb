"""kgen: YAML kernel specs -> verified fused norm/RoPE/quantize/paged-store CUDA kernels.

The public API, by stage (imported lazily: `import kgen` costs nothing, each name loads its module
on first use):

    spec      Spec, load_document, validate_path          a YAML file -> checked specs
    layout    compute (-> Layout)                          every byte offset of a page
    abi       NORM_ROPE_STORE, KernelAbi                   the kernel's one Params struct
    render    render_variant, render_paths                 jinja -> config, instantiation, host tables
    compile   compile_variant (-> CompiledKernel)          NVRTC -> cubin, content-hash cached
    run       load (-> LoadedKernel), norm_rope_store,     the checked op on torch tensors
              prepare, check_arguments
    read      indexer_logits_torch                         the read side's Torch path (DSA indexer logits)
    errors    KgenError, Problem

`python -m kgen` is the `kgen` command line.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"  # the one place: pyproject.toml reads it (tool.setuptools.dynamic)

_API = {
    "Spec": "kgen.spec",
    "load_document": "kgen.load",
    "validate_path": "kgen.validate",
    "compute": "kgen.layout",
    "Layout": "kgen.layout",
    "NORM_ROPE_STORE": "kgen.abi",
    "KernelAbi": "kgen.abi",
    "render_variant": "kgen.render",
    "render_paths": "kgen.render",
    "compile_variant": "kgen.compile",
    "CompiledKernel": "kgen.compile",
    "load": "kgen.runtime",
    "LoadedKernel": "kgen.runtime",
    "norm_rope_store": "kgen.ops",
    "prepare": "kgen.ops",
    "check_arguments": "kgen.ops",
    "indexer_logits_torch": "kgen.score",
    "KgenError": "kgen.diagnostics",
    "Problem": "kgen.diagnostics",
}

__all__ = ["__version__", *_API]


def __getattr__(name: str) -> Any:
    module = _API.get(name)
    if module is None:
        raise AttributeError(f"module 'kgen' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # the next access is a plain lookup
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_API})
