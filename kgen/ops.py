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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .diagnostics import KgenError, Problem
from .layout import Layout, compute
from .spec import Spec

TORCH_DTYPE = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}
INT32_MAX = 2**31 - 1


class ArgumentError(KgenError, ValueError):
    """A kernel argument does not match the spec; the message names the argument."""

    def __init__(self, message: str, fix: str = ""):
        super().__init__([Problem("kernel-argument", message, fix=fix)], exit_code=1)
        self.message = message

    def __str__(self) -> str:
        return self.message


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
        raise KgenError([Problem("missing-file", f"{path}: cannot read the spec ({e.strerror})")], exit_code=2) from None
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


def _dtype_name(dtype: Any) -> str:
    return str(dtype).removeprefix("torch.")


def _shape_str(shape) -> str:
    return "[" + ", ".join(str(s) for s in shape) + "]"


@dataclass(frozen=True)
class Checked:
    """The checked arguments of one call: what the launch needs."""

    spec: Spec
    layout: Layout
    num_tokens: int
    num_pages: int
    num_slots: int
    tensors: tuple  # (x, weight, bias, freqs, positions, out_loc, cache); None where absent


def _expect(name: str, t: Any, dtype: str, shape: tuple, shape_text: str) -> None:
    """t must be a tensor of `dtype` whose shape matches `shape` (None = any size), contiguous."""
    if t is None:
        raise ArgumentError(f"{name}: expected a tensor {dtype} {shape_text}, got None")
    if not hasattr(t, "dtype") or not hasattr(t, "shape"):
        raise ArgumentError(f"{name}: expected a torch tensor {dtype} {shape_text}, got {type(t).__name__}")
    got_dtype, got_shape = _dtype_name(t.dtype), tuple(t.shape)
    shape_ok = len(got_shape) == len(shape) and all(w is None or w == g for w, g in zip(shape, got_shape))
    if got_dtype != dtype or not shape_ok:
        raise ArgumentError(f"{name}: expected {dtype} {shape_text}, got {got_dtype} {_shape_str(got_shape)}")
    if not t.is_contiguous():
        raise ArgumentError(f"{name}: expected a contiguous tensor, got strides {tuple(t.stride())} for shape "
                            f"{_shape_str(got_shape)}", fix=f"pass {name}.contiguous()")


def _expect_none(name: str, t: Any, why: str) -> None:
    if t is not None:
        raise ArgumentError(f"{name}: must be None ({why}), got {_dtype_name(getattr(t, 'dtype', type(t)))} "
                            f"{_shape_str(getattr(t, 'shape', ()))}")


def check_arguments(spec: Spec, x, weight, bias, freqs, positions, out_loc, cache, *,
                    require_cuda: bool = True) -> Checked:
    """Check every argument against the spec (metadata only). The device check comes last."""
    lay = compute(spec)
    h, r = spec.head_dim, spec.rope.dim
    in_dt = TORCH_DTYPE[spec.input_dtype]
    if x is None or not hasattr(x, "shape") or len(tuple(x.shape)) != 2:
        _expect("x", x, in_dt, (None, h), f"[N, {h}]")
    n = int(x.shape[0])
    _expect("x", x, in_dt, (n, h), f"[N, {h}]")
    if n > INT32_MAX:
        raise ArgumentError(f"x: {n} tokens do not fit the kernel's int32 num_tokens")
    norm = spec.norm.kind
    if norm == "none":
        _expect_none("weight", weight, "norm is none")
    else:
        _expect("weight", weight, in_dt, (h,), f"[{h}] ({norm} weight)")
    if norm == "layernorm":
        _expect("bias", bias, in_dt, (h,), f"[{h}] (layernorm bias)")
    else:
        _expect_none("bias", bias, f"only layernorm has a bias; norm is {norm}")
    if r > 0:
        if freqs is None or not hasattr(freqs, "shape") or len(tuple(freqs.shape)) != 2:
            _expect("freqs", freqs, "float32", (None, r), f"[max_pos, {r}]")
        _expect("freqs", freqs, "float32", (None, r), f"[max_pos, {r}] (cos, sin interleaved per pair)")
        if int(freqs.shape[0]) < 1:
            raise ArgumentError(f"freqs: expected at least one position row, got {_shape_str(tuple(freqs.shape))}")
        _expect("positions", positions, "int64", (n,), f"[N] with N = {n}")
    else:
        _expect_none("freqs", freqs, "rope.dim is 0")
        _expect_none("positions", positions, "rope.dim is 0")
    _expect("out_loc", out_loc, "int64", (n,), f"[N] with N = {n}")
    if cache is None or not hasattr(cache, "shape") or len(tuple(cache.shape)) != 2:
        _expect("cache", cache, "uint8", (None, lay.page_bytes), f"[num_pages, {lay.page_bytes}]")
    _expect("cache", cache, "uint8", (None, lay.page_bytes),
            f"[num_pages, {lay.page_bytes}] ({lay.page_bytes_formula()})")
    num_pages = int(cache.shape[0])
    tensors = (x, weight, bias, freqs, positions, out_loc, cache)
    if require_cuda:
        _check_devices(tensors)
    return Checked(spec, lay, n, num_pages, lay.slots(num_pages), tensors)


NAMES = ("x", "weight", "bias", "freqs", "positions", "out_loc", "cache")


def _check_devices(tensors: tuple) -> None:
    dev = None
    for name, t in zip(NAMES, tensors):
        if t is None:
            continue
        d = t.device
        if d.type != "cuda":
            raise ArgumentError(f"{name}: expected a CUDA tensor, got one on {d}", fix=f"pass {name}.cuda()")
        if dev is None:
            dev = (name, d)
        elif d != dev[1]:
            raise ArgumentError(f"{name}: on {d}, but {dev[0]} is on {dev[1]}: all arguments must share one GPU")


def _check_bounds(c: Checked) -> None:
    x, _, _, freqs, positions, *_ = c.tensors
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

    loaded = load(spec, c.tensors[0].device.index)
    ptrs = tuple(0 if t is None else int(t.data_ptr()) for t in c.tensors)
    n, slots = c.num_tokens, c.num_slots
    keep = c.tensors

    def run() -> None:
        _ = keep
        loaded.launch(*ptrs, n, slots)

    return run


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

    loaded = load(spec, c.tensors[0].device.index)
    loaded.launch(*(0 if t is None else int(t.data_ptr()) for t in c.tensors), c.num_tokens, c.num_slots)
