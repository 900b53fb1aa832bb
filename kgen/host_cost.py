"""`kgen bench`'s host part: the host microseconds per eager call of each way to launch the writer
(`host_us_per_call` in the bench's JSON), and the empty ops that give the dispatcher's floor.

One job, apart from the bench's device timings (kgen.timing) and its writer and reader cases (kgen.bench,
kgen.reader_check); `scripts/host_breakdown.py` uses the same pieces for both ops on a GPU machine.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

from . import launcher, native
from .runtime import load
from .spec import Spec

HOST_CALLS = 200  # calls per timed loop: few enough that the launch queue never fills
HOST_LOOPS = 15


def _no_op(*_args: Any) -> None:
    return None


def host_cost(torch, spec: Spec, args: tuple) -> dict:
    """Host microseconds per call of each way to launch the kernel (median of HOST_LOOPS loops of
    HOST_CALLS calls, no sync inside a loop; the device runs behind, asynchronously). The ways take
    turns loop by loop, so a slow phase of the host (the H200's host CPU runs the same Python up to
    ~1.8x slower at times) weighs on every way alike; `python_call` (an empty Python function of the
    op's arguments) shows how fast the host ran:
      op               torch.ops.kgen.norm_rope_store(variant string, ...) (what an engine calls): the
                       dispatcher into the native kernel (kgen.native: check + cuLaunchKernelEx in C++)
                       when it is installed ("native" says), else into the Python kernel
      op_python_kernel the same call into the Python kernel (the op's checked twin): the dispatcher's
                       boxing into Python, the generated check, the prepacked ctypes launch
      python_api       kgen.ops.norm_rope_store(spec, ...) (the same op, a Spec resolved by identity)
      raw_launcher     kgen.ops.prepare()'s run(): stream lookup + pack + cuLaunchKernelEx (ctypes)
      raw_bindings     the same through cuda.bindings' cuLaunchKernelEx (KGEN_LAUNCHER=bindings)
      runtime_prepared kgen.runtime's prepared launch (cuda.bindings, its CUlaunchConfig object)
      dispatch_floor   an empty op of the same schema: torch's dispatcher into Python alone
      custom_op_floor  an empty torch.library.custom_op of the same schema (why kgen does not use it)
      python_call      an empty Python function called with the same arguments (the host's speed)"""
    from . import ops  # registers torch's ops: only where a GPU command runs


    name = ops.variant_name(spec)
    v = ops.resolve(name)
    ways: dict[str, Any] = {"op": lambda: torch.ops.kgen.norm_rope_store(name, *args),
            "op_python_kernel": lambda: torch.ops.kgen._norm_rope_store_checked(name, *args),
            "python_api": lambda: ops.norm_rope_store(spec, *args),
            "raw_launcher": ops.prepare(spec, *args),
            "dispatch_floor": lambda: _empty_op(torch)(name, *args),
            "custom_op_floor": lambda: _empty_op(torch, custom=True)(name, *args),
            "python_call": lambda: _no_op(name, *args)}
    try:
        dev = args[0].get_device()
        k = v.kernels[dev]
        run = launcher.launcher(k["kernel"], launcher.PreparedLaunch(v.abi.struct_format, k["block"], pdl=k["pdl"]),
                                backend="bindings")
        checked = v.abi.check(spec, dict(zip(v.names, args)))
        grid, values, raw_stream = checked.grid()[0], checked.values(), torch._C._cuda_getCurrentRawStream
        ways["raw_bindings"] = lambda: run((grid, 1, 1), 0, raw_stream(dev), *values)
    except Exception as e:  # noqa: BLE001 - recorded, the others still run
        ways["raw_bindings"] = e
    try:
        ways["runtime_prepared"] = load(spec).prepare(ops.check_arguments(spec, *args))
    except Exception as e:  # noqa: BLE001
        ways["runtime_prepared"] = e
    loaded = v.kernels.get(args[0].get_device(), {})

    kernel = native.install(ops.NAMESPACE, "norm_rope_store", "_norm_rope_store_checked") if loaded else None
    out: dict = {"calls_per_loop": HOST_CALLS, "loops": HOST_LOOPS, "launcher": loaded.get("backend"),
                 "native": native.status()}
    before = kernel.counts() if kernel is not None else None
    timed = {}
    for way, fn in ways.items():
        if isinstance(fn, Exception):
            out[way] = {"error": f"{type(fn).__name__}: {fn}"[:300]}
        else:
            timed[way] = fn
            for _ in range(20):
                fn()
    loops: dict[str, list[float]] = {way: [] for way in timed}
    for _ in range(HOST_LOOPS):
        for way, fn in timed.items():
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(HOST_CALLS):
                fn()
            loops[way].append((time.perf_counter() - t0) / HOST_CALLS * 1e6)
    torch.cuda.synchronize()
    for way, times in loops.items():
        out[way] = round(statistics.median(times), 3)
        out[f"{way}_min"] = round(min(times), 3)
    if kernel is not None and before is not None:  # calls of the loops above that the native kernel launched
        after = kernel.counts()
        out["native_calls"] = {"launched": after[0] - before[0], "declined": after[1] - before[1]}
    return out


_EMPTY_OP: dict[str, Any] = {}


def _empty_op(torch, custom: bool = False, device: str = "cuda"):
    """An op with the schema of norm_rope_store whose CUDA implementation does nothing: the
    dispatcher's share of the op's host cost (`torch.library` define + impl, as kgen.ops registers),
    or with `custom` the same through `torch.library.custom_op`."""
    key = "custom" if custom else "plain"
    if key not in _EMPTY_OP:
        from .ops import NORM_ROPE_STORE_SCHEMA

        if custom:
            def empty_custom(variant, x, weight, bias, freqs, positions, out_loc, cache):
                return None

            torch.library.custom_op("kgen_bench::empty_custom", empty_custom, mutates_args=("cache",),
                                    device_types=device, schema=NORM_ROPE_STORE_SCHEMA)
            _EMPTY_OP[key] = torch.ops.kgen_bench.empty_custom.default
        else:
            lib = torch.library.Library("kgen_bench", "FRAGMENT")  # noqa: TOR901
            lib.define("empty" + NORM_ROPE_STORE_SCHEMA)
            lib.impl("empty", lambda *a: None, device.upper())
            _EMPTY_OP["lib"], _EMPTY_OP[key] = lib, torch.ops.kgen_bench.empty.default
    return _EMPTY_OP[key]
