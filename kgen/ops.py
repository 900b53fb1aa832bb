"""The Python op: check every argument against the spec, then launch the variant's kernel.

    from kgen.ops import norm_rope_store
    norm_rope_store("specs/indexer_bf16.yaml", x, weight, None, freqs, positions, out_loc, cache)

`variant` is a `Spec`, a spec path, or "family.yaml::variant_name". Every check (shape, dtype,
contiguity, device of each argument, cache [num_pages, page_bytes] uint8 with page_bytes from
kgen.layout) runs on tensor metadata only, before any CUDA call, and fails with a message that names
the argument, e.g. ``x: expected float32 [N, 128], got bfloat16 [7, 128]``. The device check comes
last, so every other check is testable on CPU tensors.

What the kernel does not check (and neither does this op, to stay sync-free): `positions` must lie in
[0, freqs.shape[0]); pass `check_bounds=True` to verify it (one device sync). `out_loc` entries that
are negative or >= num_pages * page_size are skipped by the kernel (numerics.md §7); duplicate slots
race.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from pathlib import Path

from .abi import NORM_ROPE_STORE, Args, ArgumentError
from .diagnostics import KgenError, Problem
from .spec import Spec

__all__ = ["ArgumentError", "check_arguments", "norm_rope_store", "prepare", "resolve_spec"]

KERNEL_ABI = NORM_ROPE_STORE


# ---------------------------------------------------------------------------------------------
# variant resolution


# (resolved path, variant name) -> (spec, sha256 of every file validating it read). A hit is reused
# only while all of those files keep their content: a family's included specs count too.
_path_cache: dict[tuple[str, str], tuple[Spec, dict[Path, str]]] = {}


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
    _path_cache[key] = (spec, {f: _sha256(f) for f in result.document.includes})
    return spec


# ---------------------------------------------------------------------------------------------
# argument checks (metadata only: no CUDA call)


def check_arguments(spec: Spec, *tensors, require_cuda: bool = True, **named) -> Args:
    """Check every argument against the spec through the kernel's ABI table (metadata only; the
    device check comes last). Tensors positionally in the kernel's order, or by name."""
    return KERNEL_ABI.check(spec, KERNEL_ABI.bind(tensors, named), require_cuda=require_cuda)


def _check_bounds(c: Args) -> None:
    freqs, positions = c.tensors["freqs"], c.tensors["positions"]
    if positions is None or c.num_tokens == 0:
        return
    lo, hi = int(positions.min()), int(positions.max())
    if lo < 0 or hi >= freqs.shape[0]:
        raise ArgumentError(f"positions: values in [{lo}, {hi}] but freqs has {freqs.shape[0]} rows "
                            f"(valid: [0, {freqs.shape[0] - 1}])")


# ---------------------------------------------------------------------------------------------
# the op


def prepare(variant: Spec | str | os.PathLike, x, weight, bias, freqs, positions, out_loc, cache, *,
            check_bounds: bool = False) -> Callable[[], None]:
    """Check once and return a zero-argument launcher (for benchmarks and CUDA-graph capture).

    The launcher keeps the tensors alive and launches on torch's current stream at call time.
    """
    spec = resolve_spec(variant)
    c = check_arguments(spec, x, weight, bias, freqs, positions, out_loc, cache)
    if check_bounds:
        _check_bounds(c)
    if c.num_tokens == 0:
        return lambda: None
    from .runtime import load

    loaded = load(spec, c.tensors["x"].device.index)
    return loaded.prepare(c)


def norm_rope_store(variant: Spec | str | os.PathLike, x, weight, bias, freqs, positions, out_loc, cache, *,
                    check_bounds: bool = False) -> None:
    """Normalize, rotate, (Hadamard), quantize and store `x` into the paged `cache` at `out_loc`.

    Asynchronous on torch's current stream, like a torch op. N == 0 is a no-op (after the checks).
    """
    spec = resolve_spec(variant)
    c = check_arguments(spec, x, weight, bias, freqs, positions, out_loc, cache)
    if check_bounds:
        _check_bounds(c)
    if c.num_tokens == 0:
        return
    from .runtime import load

    loaded = load(spec, c.tensors["x"].device.index)
    loaded.launch(c)
