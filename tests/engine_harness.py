"""Import a released SGLang's own Python modules on a CPU machine that lacks its heavy dependencies.

Used in a fresh interpreter (it changes the import system for the whole process): by the
engine-in-the-loop test (tests/test_engines_loop.py) and by `scripts/engine_releases.py --trace`,
which records the files these imports read (the release tree keeps exactly those).

Two kinds of stand-ins, each listed with why below; nothing else is replaced, so an import of
anything not listed that is not installed fails the test by name:

- THIRD_PARTY: packages SGLang's files import that are not installed here (compiled extensions,
  GPU-only kernels, the serving stack). Each is replaced by a permissive module only when SGLang's
  own files import it and the interpreter cannot find it, so a machine that has one (triton on the
  GPU machine) imports the real one. Their attributes are inert objects: calling one of them from
  a code path under test fails loudly (`Inert` raises on use as a number or tensor).
- BOUNDARIES: SGLang modules whose import chain leads into model loading, the scheduler or the HTTP
  layer (transformers configs, pydantic protocol models). The code under test only names them (a
  type, an enum it reads from the batch the test builds), so they stop the chain there.

Package `__init__` files of SGLang run when a name they define is first read, not when a
submodule below them is imported (`sglang/__init__.py` patches transformers, `srt/configs`
registers every model config): importing `sglang.srt.mem_cache.deepseek_v4_memory_pool` runs that
module and what it imports, not the package aggregators above it.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import os
import sys
import types

THIRD_PARTY = {
    "triton": "GPU kernel compiler (Triton kernels are defined at import; none runs on the CPU paths)",
    "tvm_ffi": "compiled FFI of SGLang's JIT kernels",
    "sgl_kernel": "SGLang's compiled CUDA extension",
    "flashinfer": "GPU attention kernels",
    "torch_memory_saver": "CUDA allocator hook (compiled)",
    "pynvml": "NVIDIA management library binding (no driver here)",
    "msgspec": "compiled serializer; the server's IPC structs",
    "orjson": "compiled JSON codec of the server",
    "pybase64": "compiled base64 of the server's request path",
    "zmq": "the server's IPC sockets (distributed setup)",
    "psutil": "process/memory probing of the launcher",
    "requests": "HTTP client of the launcher and tests",
    "starlette": "HTTP server",
    "tqdm": "progress bars of weight loading",
    "dill": "pickles custom logit processors at import (stand-in: dumps returns b'')",
    "transformers": "model configs (the tests pass the numbers a config would)",
    "huggingface_hub": "model downloads",
    "sentencepiece": "tokenizer (compiled)",
    "torchvision": "multimodal processors",
    "torchcodec": "multimodal decoding (compiled)",
    "IPython": "debug helper",
}

BOUNDARIES = {
    "sglang.srt.model_executor.forward_batch_info": "the scheduler's batch: imports the whole request "
    "pipeline; the tests build the batch fields forward_c4_indexer reads",
    "sglang.srt.layers.linear": "weight-loading linear layers (quantization registry): the tests do not "
    "build the model's layers",
    "sglang.srt.configs.model_config": "the HF model config loader (transformers): the tests pass the "
    "numbers a config holds",
    "sglang.srt.models.deepseek_v2": "the model definition (scheduler, grammar backends, the OpenAI "
    "protocol): the tests drive the pool, compressor and indexer backends directly",
    # imported only where torch sees CUDA (fp8_kernel.py's `if _is_cuda:`), not kept in the release tree
    "sglang.kernels.ops.quantization.per_tensor_quant_fp8": "a JIT-compiled quantization kernel's wrapper, "
    "imported on CUDA machines: the paths under test quantize nothing through it",
    "sglang.kernels.ops.quantization.per_token_group_quant": "a JIT-compiled quantization kernel's wrapper, "
    "imported on CUDA machines: the paths under test quantize nothing through it",
    "sglang.kernels.ops.layernorm": "JIT-compiled norm kernels, imported by layernorm.py on CUDA machines: the "
    "tests pass the compressor's norm weights, no RMSNorm module runs",
}


# vLLM 0.33.0's imports of the modules its engine-in-the-loop test reads (tests/test_engines_vllm_loop.py);
# its own compiled extension vllm._C is optional there (vLLM logs and goes on without it)
VLLM_THIRD_PARTY = {
    "triton": "GPU kernel compiler (vLLM's Triton kernels are defined at import; none runs on the CPU paths)",
    "flashinfer": "GPU attention kernels",
    "regex": "compiled regular expressions (tokenizer and config parsing)",
    "cbor2": "compiled serializer of the prefix-cache hashes",
    "msgspec": "compiled serializer; the engine's IPC structs",
    "pybase64": "compiled base64 of the request path",
    "zmq": "the engine's IPC sockets (distributed setup)",
    "psutil": "process/memory probing of the launcher",
    "cpuinfo": "CPU feature probing of the platform detection",
    "uvloop": "the API server's event loop",
    "aiohttp": "HTTP client of the API server and connectors",
    "requests": "HTTP client of model downloads",
    "urllib3": "HTTP client of model downloads",
    "openai": "the OpenAI protocol models of the API server",
    "openai_harmony": "the harmony chat format of the API server",
    "prometheus_client": "the server's metrics",
    "cloudpickle": "pickles callables for the engine's workers",
    "cachetools": "caches of the input processors",
    "einops": "tensor reshapes of multimodal models",
    "safetensors": "weight files (weights loading is not under test)",
    "transformers": "model configs (the tests pass the numbers a config would)",
    "huggingface_hub": "model downloads",
    "torchcodec": "multimodal decoding (compiled)",
    "tqdm": "progress bars of weight loading",
}
STAND_INS = {"sglang": (THIRD_PARTY, BOUNDARIES), "vllm": (VLLM_THIRD_PARTY, {})}


class Inert:
    """An attribute of a stand-in: importable, subclassable, callable, usable as a decorator or
    context manager; any value read from it is another Inert."""

    def __init__(self, *args, **kwargs):
        pass

    def __call__(self, *args, **kwargs):
        if len(args) == 1 and not kwargs and isinstance(args[0], types.FunctionType):
            return args[0]  # a decorator: keep the decorated function
        return Inert()

    def __getattr__(self, name):
        if name.startswith("__") and name.endswith("__") and name not in ("__enter__", "__exit__"):
            raise AttributeError(name)
        return Inert()

    def __mro_entries__(self, bases):
        return (InertBase,)

    def __getitem__(self, key):
        return Inert()

    def __setitem__(self, key, value):
        pass

    def __iter__(self):
        return iter(())

    def __contains__(self, key):
        return False

    def __bool__(self):
        return False

    def __or__(self, other):
        return Inert()

    __ror__ = __or__

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


class InertBase:
    """The base class a stand-in's class becomes: fields from keywords (msgspec.Struct-like)."""

    def __init_subclass__(cls, **kwargs):
        pass

    def __init__(self, *args, **kwargs):
        names = [n for c in reversed(type(self).__mro__) for n in getattr(c, "__annotations__", {})]
        for name, value in zip(names, args):
            setattr(self, name, value)
        for name, value in kwargs.items():
            setattr(self, name, value)

    def __class_getitem__(cls, key):
        return cls


class _StandIn(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return Inert()


class Harness(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def __init__(self, root: str, package: str = "sglang", third_party: dict | None = None,
                 boundaries: dict | None = None):
        self.root = os.path.abspath(root)
        self.package = package  # the engine's top-level package (tests/test_engines_vllm_loop.py: vllm)
        self.third_party = THIRD_PARTY if third_party is None else third_party
        self.boundaries = BOUNDARIES if boundaries is None else boundaries
        self.stubbed: set[str] = set()

    # -- stand-ins -------------------------------------------------------------------------------
    def _from_engine(self) -> bool:
        frame = sys._getframe(2)
        while frame is not None and ("importlib" in frame.f_code.co_filename
                                     or frame.f_code.co_filename.startswith("<frozen")):
            frame = frame.f_back
        return frame is not None and frame.f_code.co_filename.startswith(self.root)

    def find_spec(self, name, path, target=None):
        top = name.split(".")[0]
        if top == self.package:
            return self._engine_spec(name)
        if top in self.stubbed or (top in self.third_party and self._from_engine() and not self._installed(top)):
            self.stubbed.add(top)
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def _installed(self, top: str) -> bool:
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            if finder.find_spec(top, None) is not None:
                return True
        return False

    def create_module(self, spec):
        if spec.name.split(".")[0] == self.package and spec.name not in self.boundaries and spec.origin is not None:
            return None
        module = _StandIn(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module):
        if isinstance(module, _StandIn):
            if module.__name__ == "dill":
                module.dumps = lambda obj, *a, **k: b""
                module.loads = lambda data, *a, **k: None
            return
        self._lazy_package(module)

    # -- SGLang's own modules ----------------------------------------------------------------------
    def _engine_spec(self, name: str):
        boundary = next((b for b in self.boundaries if name == b or name.startswith(b + ".")), None)
        if boundary is not None:  # a boundary, or a module below one
            self.stubbed.add(boundary)
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        where = os.path.join(self.root, *name.split("."))
        init = os.path.join(where, "__init__.py")
        if not os.path.isfile(init):
            if not os.path.isdir(where) and any(b.startswith(name + ".") for b in self.boundaries):
                # the package above a boundary, not kept in the tree: an empty package
                return importlib.machinery.ModuleSpec(name, self, is_package=True)
            return None  # a plain module: the path finder loads it from the tree
        spec = importlib.machinery.ModuleSpec(name, self, is_package=True, origin=init)
        spec.submodule_search_locations = [where]
        spec.has_location = True
        return spec

    @staticmethod
    def _lazy_package(module) -> None:
        init = module.__spec__.origin
        ran = []

        def __getattr__(name):
            if name.startswith("__") and name != "__all__":
                raise AttributeError(name)
            here = os.path.dirname(init)
            if os.path.isfile(os.path.join(here, name + ".py")) or os.path.isfile(
                    os.path.join(here, name, "__init__.py")):
                return importlib.import_module(f"{module.__name__}.{name}")
            if not ran:
                ran.append(True)
                del module.__dict__["__getattr__"]
                with open(init, encoding="utf-8") as f:
                    exec(compile(f.read(), init, "exec"), module.__dict__)
                if name in module.__dict__:
                    return module.__dict__[name]
            raise AttributeError(f"module {module.__name__!r} has no attribute {name!r}")

        module.__getattr__ = __getattr__
        module.__file__ = init


def install(root: str, package: str = "sglang", third_party: dict | None = None,
            boundaries: dict | None = None) -> Harness:
    """Make `root` (the directory holding the engine's package, `sglang` unless named) importable
    with the stand-ins. torch's own probes of triton run first, so that torch sees the machine as
    it is."""
    import torch
    import torch._inductor.compile_fx  # noqa: F401  (imports triton if the machine has it)
    import torch.utils._triton as torch_triton
    import torch.utils.flop_counter  # noqa: F401

    torch_triton.has_triton_package()
    torch_triton.has_triton()
    harness = Harness(root, package, third_party, boundaries)
    sys.path.insert(0, harness.root)
    sys.meta_path.insert(0, harness)
    return harness


def loaded_files(root: str) -> list[str]:
    """The files of the tree that the interpreter has read so far (relative to `root`)."""
    base = os.path.abspath(root)
    out = set()
    for module in list(sys.modules.values()):
        path = getattr(module, "__file__", None)
        if isinstance(path, str) and os.path.abspath(path).startswith(base + os.sep):
            out.add(os.path.relpath(os.path.abspath(path), base))
    return sorted(out)
