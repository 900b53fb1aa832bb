"""`torch.ops.kgen.norm_rope_store`: the writer's op (CPU = kgen.reference, CUDA = the kernel), and its
Python API.

    kgen::norm_rope_store(str variant, Tensor x, Tensor? weight, Tensor? bias, Tensor? freqs,
                          Tensor? positions, Tensor out_loc, Tensor(a!) cache) -> ()

The CUDA implementation is the writer's KernelOp (kgen.ops.registry); on the first CUDA load kgen.native
installs a C++ kernel at the op's CUDA key that runs the same table's check and the launch without
entering Python, and hands every call it declines to `_norm_rope_store_checked`, the Python kernel.
The CPU implementation checks the values too (no sync to save there): positions inside freqs' rows.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from .. import reference
from ..abi import Args, ArgumentError
from ..spec import Spec
from .registry import KERNEL_ABI, _variants, bump_version, define_op, resolve, variant_name

__all__ = ["check_arguments", "check_bounds", "norm_rope_store", "norm_rope_store_op", "prepare"]


def check_arguments(spec: Spec, *tensors, require_cuda: bool = True, **named) -> Args:
    """Check every argument against the spec through the kernel's ABI table (metadata only; the
    device check comes last). Tensors positionally in the kernel's order, or by name."""
    return KERNEL_ABI.check(spec, KERNEL_ABI.bind(tensors, named), require_cuda=require_cuda)


def check_bounds(c: Args) -> None:
    """The values the metadata check cannot see: every position a token reads (its own, or the one its
    plan row gives) inside freqs' rows. One device sync on CUDA tensors."""
    freqs, positions = c.tensors["freqs"], c.tensors["positions"]
    if positions is None or c.num_tokens == 0:
        return
    if c.spec.positions.source == "decode_plan":  # the positions the plan gives
        positions = reference.plan_positions(c.spec, positions)[0]
    elif c.spec.positions.source == "compress_plan":
        positions = reference.compress_plan_slots(c.spec, positions, c.tensors["out_loc"])[0]
    if positions.numel() == 0:
        return
    lo, hi = int(positions.min()), int(positions.max())
    rows = int(freqs.shape[0])
    if lo < 0 or hi >= rows:
        valid = f"valid: [0, {rows - 1}]" if rows else "it has no row to read"
        raise ArgumentError(f"positions: values in [{lo}, {hi}] but freqs has {rows} rows ({valid})",
                            fix="pass positions inside freqs' rows (or a larger freqs table)")


_check_bounds = check_bounds  # the name earlier callers use


def _norm_rope_store_cuda(variant, x, weight, bias, freqs, positions, out_loc, cache) -> None:
    v = _variants.get(variant) or resolve(variant)
    if not v.fast(x, weight, bias, freqs, positions, out_loc, cache):
        v.launch_checked((x, weight, bias, freqs, positions, out_loc, cache))
    bump_version(cache)  # the kernel wrote it behind autograd's back


def _norm_rope_store_cpu(variant, x, weight, bias, freqs, positions, out_loc, cache) -> None:
    v = _variants.get(variant) or resolve(variant)
    check_bounds(v.check_cpu((x, weight, bias, freqs, positions, out_loc, cache)))
    reference.norm_rope_store(v.spec, x, weight, bias, freqs, positions, out_loc, cache)


def _norm_rope_store_fake(variant, x, weight, bias, freqs, positions, out_loc, cache) -> None:
    resolve(variant).check_fake((x, weight, bias, freqs, positions, out_loc, cache))


NORM_ROPE_STORE_SCHEMA = ("(str variant, Tensor x, Tensor? weight, Tensor? bias, Tensor? freqs, Tensor? positions, "
                          "Tensor out_loc, Tensor(a!) cache) -> ()")
norm_rope_store_op = define_op("norm_rope_store", NORM_ROPE_STORE_SCHEMA, fake=_norm_rope_store_fake,
                               cpu=_norm_rope_store_cpu, cuda=_norm_rope_store_cuda)
# the Python CUDA implementation under its own name: the native kernel (kgen.native), once installed at
# norm_rope_store's CUDA key, hands every call it declines to it (the located messages live here)
define_op("_norm_rope_store_checked", NORM_ROPE_STORE_SCHEMA, fake=_norm_rope_store_fake, cuda=_norm_rope_store_cuda)


def norm_rope_store(variant: Spec | str | os.PathLike, x, weight, bias, freqs, positions, out_loc, cache, *,
                    check_bounds: bool = False) -> None:
    """Normalize, rotate, (Hadamard), quantize and store `x` into the paged `cache` at `out_loc`,
    through `torch.ops.kgen.norm_rope_store`: asynchronous on torch's current stream (CUDA), the
    reference on CPU tensors. N == 0 is a no-op (after the checks). `check_bounds=True` also checks
    `positions` against freqs' rows on CUDA tensors (one device sync; the CPU path always does)."""
    key = variant_name(variant)
    if check_bounds:
        v = resolve(key)
        _check_bounds(v.abi.check(v.spec, dict(zip(v.names, (x, weight, bias, freqs, positions, out_loc, cache))),
                                  require_cuda=False, layout=v.layout))
    norm_rope_store_op(key, x, weight, bias, freqs, positions, out_loc, cache)


def prepare(variant: Spec | str | os.PathLike, x, weight, bias, freqs, positions, out_loc, cache, *,
            check_bounds: bool = False) -> Callable[[], None]:
    """Check once and return a zero-argument launcher (the raw launcher: benchmarks, CUDA-graph
    capture). It keeps the tensors alive and launches on torch's current stream at call time."""
    v = resolve(variant)
    tensors = (x, weight, bias, freqs, positions, out_loc, cache)
    if check_bounds:
        _check_bounds(check_arguments(v.spec, *tensors))
    return v.prepared(*tensors)
