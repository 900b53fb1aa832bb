"""What the GPU commands (`kgen test`, `kgen bench`) share: their start (`start_gpu_command`: usage
checks, the validated specs, a GPU present), compiling a batch of variants for this GPU up front
(`precompile`), and one `kgen test` case (`run_case`: the kernel and the Torch reference on the same
inputs, then the whole-cache comparison of kgen.compare).

For every case (variant, N): `kgen.inputs.make_inputs` (random rows with outlier channels, random
positions, shuffled out_loc with skipped slots, a poisoned cache larger than needed); the kernel
writes cache A, the reference (torch, on the same device) writes cache B, both starting from the
same poisoned bytes; `compare_caches(A, B)`.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from .abi import NORM_ROPE_STORE
from .arch import check as check_arch
from .compare import Comparison, compare_caches
from .compile import compile_rendered
from .diagnostics import KgenError, Problem
from .render import render_variant
from .runtime import gpu_problem
from .spec import Spec
from .validate import validate_paths


def usage_error(command: str, message: str) -> KgenError:
    return KgenError([Problem("usage", f"kgen {command}: {message}")], exit_code=2)


def start_gpu_command(command: str, paths: list[Path], tokens: list[int] | None, *, min_tokens: int,
                      paths_optional: bool = False) -> list[Spec]:
    """The start of `kgen test` / `kgen bench`, in this order: usage (paths given, every --tokens at
    least `min_tokens`), every path validated (kgen.validate.validate_paths), a usable GPU. Returns the
    specs; raises KgenError (exit 2 for usage and no GPU) before any GPU work, so the command's
    `--json` error document (kgen.cli.run_reporting) is all it prints."""

    if not paths and not paths_optional:
        raise usage_error(command, "give spec/family paths")
    if tokens is not None and any(t < min_tokens for t in tokens):
        raise usage_error(command, f"--tokens must be >= {min_tokens}")
    specs = validate_paths(paths).specs()
    reason = gpu_problem()
    if reason is not None:
        raise KgenError([Problem("no-gpu", f"kgen {command}: no GPU: {reason}. Nothing was run; run it on a GPU "
                                 "machine (docs/gpu.md)")], exit_code=2)
    return specs


def kernel_args(spec: Spec, inputs: dict) -> tuple:
    """The kernel's tensors from `kgen.inputs.make_inputs`, in the ABI's order (kgen.abi: x, ..., cache
    last), None where the spec has none: the positional arguments of the op and of the reference."""
    return tuple(NORM_ROPE_STORE.arguments(spec, inputs).values())


def spec_yaml(spec: Spec) -> str:
    """The spec as a YAML document (non-default fields), to paste into a file and replay."""
    import io

    from ruamel.yaml import YAML

    y = YAML(typ="safe", pure=True)
    y.default_flow_style = False
    y.sort_base_mapping_type_on_output = False  # type: ignore[assignment]  # ruamel types it None
    y.width = 4096  # one line per string: a wrapped plain scalar leaves trailing blanks (`git diff --check`)
    buf = io.StringIO()
    y.dump(spec.model_dump(mode="json", exclude_defaults=True), buf)
    return buf.getvalue()


class KernelFault(RuntimeError):
    """A CUDA error raised by the kernel launch of one case (e.g. an illegal memory access), with
    the spec as YAML. The CUDA context is unusable afterwards (the error is sticky)."""

    def __init__(self, spec: Spec, n: int, seed: int, error: BaseException):
        self.spec, self.tokens, self.seed, self.error = spec, n, seed, error
        super().__init__(f"CUDA error in the kernel of {spec.name} at N={n} (seed {seed}): "
                         f"{type(error).__name__}: {error}\nspec:\n{spec_yaml(spec)}")


def run_case(spec: Spec, n: int, *, seed: int, device: str = "cuda", kernel=None) -> Comparison:
    """Kernel on cache A, reference on cache B (both on `device`), whole-cache comparison.
    `kernel` defaults to kgen.ops.norm_rope_store (tests pass the reference to dry-run on CPU)."""
    import torch

    from . import inputs as I
    from . import ops, reference

    kernel = kernel or ops.norm_rope_store
    t0 = time.perf_counter()
    inputs = I.make_inputs(spec, n, seed=seed, device=device)
    args = NORM_ROPE_STORE.arguments(spec, inputs)
    cache_a = args["cache"]
    cache_b = cache_a.clone()
    kernel(spec, **args)
    if device != "cpu":
        # a fault in the kernel is sticky and asynchronous: without this it surfaces in whatever
        # CUDA call comes next (the reference), far from the spec that caused it
        try:
            torch.cuda.synchronize()
        except Exception as e:  # noqa: BLE001 - re-raised with the spec attached
            raise KernelFault(spec, n, seed, e) from e
    reference.norm_rope_store(spec, **{**args, "cache": cache_b})
    if device != "cpu":
        torch.cuda.synchronize()
    c = compare_caches(spec, cache_a, cache_b, out_loc=inputs["out_loc"], tokens=n)
    c.seconds = round(time.perf_counter() - t0, 3)
    return c


def precompile(specs: list[Spec]) -> dict[str, str]:
    """Compile (or find cached) every spec for this GPU's arch; {name: error}. Renders serially, then
    runs NVRTC in threads (it is thread-safe per program and releases the GIL)."""
    import torch


    idx = torch.cuda.current_device()
    major, minor = torch.cuda.get_device_capability(idx)
    cap = (major, minor)
    name = torch.cuda.get_device_name(idx)
    errors: dict[str, str] = {}
    jobs = []
    for s in specs:
        try:
            jobs.append((s, check_arch(cap, list(s.targets), device_name=f"GPU {idx} ({name})", variant=s.name)))
        except KgenError as e:
            errors[s.name] = "; ".join(p.message for p in e.problems)

    def guard(s: Spec, fn) -> None:
        try:
            fn()
        except KgenError as e:
            errors[s.name] = "\n".join(p.format() for p in e.problems)
        except Exception as e:  # noqa: BLE001 - reported per variant
            errors[s.name] = f"{type(e).__name__}: {e}"

    rendered = []
    for s, arch in jobs:
        box: list = []
        guard(s, lambda s=s, box=box: box.append(render_variant(s)))
        if box:
            rendered.append((s, arch, box[0]))

    with ThreadPoolExecutor(max_workers=min(16, max(1, len(rendered)))) as ex:
        list(ex.map(lambda job: guard(job[0], lambda: compile_rendered(job[2], job[1])), rendered))
    return errors


STICKY_ERRORS = ("illegal memory access", "illegal address", "misaligned address", "unspecified launch failure",
                 "device-side assert", "illegal instruction", "hardware stack error", "launch timed out")


def sticky(message: str) -> bool:
    """Does this CUDA error leave the context unusable (so later cases would only repeat it)?"""
    m = message.lower()
    return any(k in m for k in STICKY_ERRORS)
