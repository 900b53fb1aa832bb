"""The op's per-call argument check and launch, generated once per variant from its kernel ABI table.

`kgen.abi.KernelAbi.check` is the one description of what a kernel accepts (and the one place its
error messages are written), but it is generic: it walks the table, builds dicts and calls a lambda
per field, tens of microseconds per call. An engine calls the writer 61 times a step, so the op
checks each call with a straight-line function written out from the same table for one spec, with
every constant (dtype objects, fixed sizes, the alignment) inlined:

    present tensor:  not None, dtype, rank, each fixed size, each symbolic size bound or equal to
                     the first binding, contiguous, on the first tensor's CUDA device
    absent tensor:   None (a null pointer)
    all pointers:    16-byte aligned (one OR of the pointers)

It returns no message: on any doubt (a failed check, a shape seen for the first time, a device
without a loaded kernel) it declines, and the caller takes the slow path, `KernelAbi.check`, which
either raises the located message or accepts, fills the per-shape cache, and launches. The
generated check is therefore only ever *stricter* than the table's (tests/test_ops.py checks that
on random arguments): it can cost speed, never correctness.

Per device and shape (the tuple of the symbolic sizes, e.g. (N, max_pos, num_pages)) the slow path caches
what the launch of that shape is: the launcher of the cubin it runs (the reader's tuning depends on the
shape), the grid, the dynamic shared memory, the scalar fields `KernelAbi.check` computed and each tensor
map's geometry (bounded; engines use a few batch sizes). A tensor map is then encoded per call by the
launch stack's encoder from the tensor's address (memoized there: an engine passes the same cache).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NoReturn

import torch
from torch._subclasses.fake_tensor import unset_fake_temporarily

from .abi import ALIGNMENT, NO_TENSOR_MAP, ArgumentError, KernelAbi, Scalar, Tensor, TensorMap
from .layout import Layout
from .spec import Spec

MAX_SHAPES = 4096  # cached (grid, scalars) per variant; cleared when exceeded


def _symbols(abi: KernelAbi, spec: Spec, lay: Layout) -> list[str]:
    """The symbolic sizes of the present tensors, in binding order."""
    out: list[str] = []
    for f in abi.tensors:
        if f.present(spec):
            out += [d for d in f.shape(spec, lay) if isinstance(d, str) and d not in out]
    return out


def _check_lines(abi: KernelAbi, spec: Spec, lay: Layout, *, allow_cpu: bool) -> tuple[list[str], dict, list[str]]:
    """Python lines (indented 4) that `return None` unless the arguments pass; they bind `dev`, one
    variable per symbolic size and `p_<name>` per tensor. Also the globals they need, and the
    symbols."""
    lines: list[str] = []
    env: dict[str, Any] = {}
    syms = _symbols(abi, spec, lay)
    bound: set[str] = set()
    first = True
    ptrs = []
    for f in abi.tensors:
        n = f.name
        if not f.present(spec):
            lines.append(f"    if {n} is not None: return None")
            lines.append(f"    p_{n} = 0")
            continue
        dt = f"_DT_{n}"
        env[dt] = getattr(torch, f.dtype(spec))
        lines.append(f"    if {n} is None or {n}.dtype is not {dt} or not {n}.is_contiguous(): return None")
        if first:
            lines.append(f"    dev = {n}.get_device()")
            if not allow_cpu:
                lines.append("    if dev < 0: return None")
            first = False
        else:
            lines.append(f"    if {n}.get_device() != dev: return None")
        want = f.shape(spec, lay)
        if all(isinstance(d, int) for d in want):  # one comparison covers rank and sizes
            lines.append(f"    if {n}.shape != {tuple(want)!r}: return None")
            lines.append(f"    p_{n} = {n}.data_ptr()")
            ptrs.append(f"p_{n}")
            continue
        lines.append(f"    s = {n}.shape")
        lines.append(f"    if len(s) != {len(want)}: return None")
        for i, d in enumerate(want):
            if isinstance(d, int):
                lines.append(f"    if s[{i}] != {d}: return None")
            elif d in bound:
                lines.append(f"    if s[{i}] != {_var(d, syms)}: return None")
            else:
                lines.append(f"    {_var(d, syms)} = s[{i}]")
                bound.add(d)
        lines.append(f"    p_{n} = {n}.data_ptr()")
        ptrs.append(f"p_{n}")
    if ptrs:
        lines.append(f"    if ({' | '.join(ptrs)}) & {ALIGNMENT - 1}: return None")
    return lines, env, syms


def _var(sym: str, syms: list[str]) -> str:
    return f"d{syms.index(sym)}"


def _signature(abi: KernelAbi) -> str:
    return ", ".join(f.name for f in abi.tensors)


def build_check(abi: KernelAbi, spec: Spec, lay: Layout, *, allow_cpu: bool = False) -> Callable[..., Any]:
    """`check(*tensors) -> (device, shape key, pointers) | None`: the generated check alone (what the
    launch runs first), for tests and for callers that launch themselves."""
    lines, env, syms = _check_lines(abi, spec, lay, allow_cpu=allow_cpu)
    key = "(" + "".join(f"{_var(s, syms)}, " for s in syms) + ")"
    ptrs = "(" + "".join(f"p_{f.name}, " for f in abi.tensors) + ")"
    src = "\n".join([f"def check({_signature(abi)}):", *lines, f"    return dev, {key}, {ptrs}", ""])
    return _compile(src, env, "check")


def build_launch(abi: KernelAbi, spec: Spec, lay: Layout, shapes: dict, raw_stream: Callable[[int], int],
                 current_device: Callable[[], int], encode: Callable[[Any, Any], bytes]
                 ) -> tuple[Callable[..., bool], str]:
    """`launch(*tensors) -> bool`: True once launched (or a no-op: an empty grid); False: take the slow
    path (nothing was launched). `shapes[(device, *sizes)] = (run, grid, shared bytes, *scalars, *map
    geometries)` (grid None: nothing to launch), `run(grid, shared bytes, stream, *struct values)` the
    launch stack's (kgen.launcher), `encode(tensor, geometry)` its tensor-map encoder."""
    lines, env, syms = _check_lines(abi, spec, lay, allow_cpu=False)
    env.update(_shapes=shapes, _raw_stream=raw_stream, _current_device=current_device, _encode=encode,
               _NO_MAP=NO_TENSOR_MAP)
    scalars = [f.name for f in abi.fields if isinstance(f, Scalar)]
    maps = [f for f in abi.fields if isinstance(f, TensorMap)]
    key = "(dev, " + "".join(f"{_var(s, syms)}, " for s in syms) + ")"

    def value(f) -> str:
        if isinstance(f, Tensor):
            return f"p_{f.name}"
        if isinstance(f, TensorMap):
            return f"(_NO_MAP if g_{f.name} is None else _encode({f.source}, g_{f.name}))"
        return f"s_{f.name}"

    values = ", ".join(value(f) for f in abi.fields)
    body = [
        f"    hit = _shapes.get({key})",
        "    if hit is None or _current_device() != dev: return False",
        "    run, grid, shared" + "".join(f", s_{s}" for s in scalars) + "".join(f", g_{m.name}" for m in maps)
        + " = hit",
        "    if grid is not None:",
        f"        run(grid, shared, _raw_stream(dev), {values})",
        "    return True",
    ]
    src = "\n".join([f"def launch({_signature(abi)}):", *lines, *body, ""])
    return _compile(src, env, "launch"), src


def _compile(src: str, env: dict, name: str) -> Callable[..., Any]:
    namespace: dict[str, Any] = dict(env)
    exec(compile(src, f"<kgen.fastpath {name}>", "exec"), namespace)  # noqa: S102 - source built from the ABI table above
    fn = namespace[name]
    fn.source = src
    return fn


def fake_check(abi: KernelAbi, spec: Spec, lay: Layout, tensors: dict[str, Any]) -> None:
    """The shape checks of the fake implementation (torch.compile / export): presence, dtype, rank,
    fixed sizes and contiguity, with the symbolic sizes left symbolic (an equality between two of
    them becomes `torch._check`, a runtime assertion, not a specialization). A failure is reported
    by `KernelAbi.check` itself, run on meta tensors of the same shapes (its message, located)."""
    bound: dict[str, Any] = {}
    for f in abi.tensors:
        t = tensors.get(f.name)
        if not f.present(spec):
            if t is not None:
                _explain(abi, spec, lay, tensors)
            continue
        want = f.shape(spec, lay)
        if t is None or t.dtype is not getattr(torch, f.dtype(spec)) or t.dim() != len(want) or not t.is_contiguous():
            _explain(abi, spec, lay, tensors)
        for i, d in enumerate(want):
            if isinstance(d, int):
                if t.shape[i] != d:
                    _explain(abi, spec, lay, tensors)
            elif d in bound:
                same = t.shape[i] == bound[d]
                if isinstance(same, bool):  # static sizes: the table's message
                    if not same:
                        _explain(abi, spec, lay, tensors)
                else:  # symbolic: a runtime assertion, no specialization
                    torch._check(same, lambda f=f, i=i, d=d: f"{f.name}: size {i} ({d}) differs from the {d} "
                                                             "of an earlier argument")
            else:
                bound[d] = t.shape[i]


def _explain(abi: KernelAbi, spec: Spec, lay: Layout, tensors: dict[str, Any]) -> NoReturn:
    """Raise the table's own message for arguments the fake check refused."""

    def meta(t):
        if t is None or not hasattr(t, "shape"):
            return t
        shape = [int(s) for s in t.shape]
        return torch.empty_strided(shape, [int(s) for s in t.stride()], dtype=t.dtype, device="meta")

    with unset_fake_temporarily():  # real meta tensors: no fake data pointers
        abi.check(spec, {k: meta(t) for k, t in tensors.items()}, require_cuda=False, layout=lay)
    raise ArgumentError(f"{spec.name}: arguments refused by the shape check of torch.compile: "
                        + ", ".join(f"{k} {getattr(t, 'dtype', None)} {list(getattr(t, 'shape', []))}"
                                    for k, t in tensors.items()))
