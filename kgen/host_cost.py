"""`kgen bench`'s host part: the host microseconds per eager call of each way to launch the writer
(`host_us_per_call` in the bench's JSON), of the read side's ops (`reader.host`: the reader, the fused top-k and
its slots, DeepGEMM's reader beside them), and the empty ops that give the dispatcher's floor.

One job, apart from the bench's device timings (kgen.timing) and its writer and reader cases (kgen.bench,
kgen.reader_check); `scripts/host_breakdown.py` uses the same pieces for each piece of the ops' cost.

Every way is timed twice: with the GPU idle when each loop starts, as an engine's eager call meets it, and behind a
sleeping kernel (`gpu_busy`): every call of the loop then queues behind it, so no kernel of the loop can set its
pace and the figure is the host's alone (with the GPU idle, a kernel longer than its launch would pace the loop
once the launch queue filled, and a launch into an idle queue may cost the driver more). A busy loop that lasted
as long as the sleep may have waited for it: `paced_loops` counts them (busy_figures).
"""

from __future__ import annotations

import os
import platform
import statistics
import time
from pathlib import Path
from typing import Any

from . import launcher, native
from . import reader_check as RC
from .runtime import load
from .spec import Spec

HOST_CALLS = 200  # calls per timed loop: few enough that the launch queue never fills
HOST_LOOPS = 15
# cycles of torch.cuda._sleep ahead of each busy loop: ~15 ms at the H100's and H200's ~2 GHz, longer than a loop of
# HOST_CALLS calls at 40 us each
SLEEP_CYCLES = 30_000_000
GOAL_US = 8.0  # issues 9, 20 and 21: each op's host cost per eager call
# the read side's shape: one sequence of 4K keys, a kernel shorter than its launch (k: DeepSeek V4's)
READ_BATCH, READ_KEYS, READ_K = 1, 4096, 512


def time_ways(torch, ways: dict[str, Any], *, busy: bool = False, calls: int = HOST_CALLS,
              loops: int = HOST_LOOPS) -> dict[str, list[float]]:
    """Microseconds per call of each way, one figure per loop of `calls` calls (no sync inside a loop). The ways
    take turns loop by loop, so that a slow phase of the host (the H200's host CPU runs the same Python up to ~1.8x
    slower at times) weighs on every way alike; `busy`: each loop starts behind a sleeping kernel."""
    for fn in ways.values():
        for _ in range(20):
            fn()
    out: dict[str, list[float]] = {way: [] for way in ways}
    for _ in range(loops):
        for way, fn in ways.items():
            torch.cuda.synchronize()
            if busy:
                torch.cuda._sleep(SLEEP_CYCLES)
            t0 = time.perf_counter()
            for _ in range(calls):
                fn()
            out[way].append((time.perf_counter() - t0) / calls * 1e6)
    torch.cuda.synchronize()
    return out


def host_machine(cpuinfo: Path = Path("/proc/cpuinfo")) -> dict[str, Any]:
    """What a host figure depends on besides kgen: the CPU's model (cpuinfo's first `model name`; None where the
    file has none), the CPUs this process may run on and the Python. Two H100 machines ran the same
    calls 1.7x apart (the dispatch floor 3.9 and 7.2 us: bench/results/h100-2026-12-07-s31/), so a host figure
    is compared only on the same model, or as a multiple of its own `dispatch_floor`."""
    model = None
    try:
        for line in cpuinfo.read_text(errors="replace").splitlines():
            if line.startswith("model name"):
                model = line.partition(":")[2].strip()
                break
    except OSError:
        pass
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {"cpu": model, "cpus": cpus, "python": platform.python_version()}


def medians(times: dict[str, list[float]]) -> dict[str, float]:
    return {way: round(statistics.median(t), 3) for way, t in times.items()}


def sleep_us(torch) -> float:
    """The sleeping kernel's wall time on this device, microseconds (one, after a warm-up)."""
    for _ in range(2):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        torch.cuda._sleep(SLEEP_CYCLES)
        torch.cuda.synchronize()
    return (time.perf_counter() - t0) * 1e6


def busy_figures(torch, ways: dict[str, Any], *, calls: int = HOST_CALLS, loops: int = HOST_LOOPS) -> dict:
    """time_ways' medians behind a busy GPU, with the check that makes them the host's: a loop that lasted as long
    as the sleeping kernel may have waited for it (the launch queue full), and is counted per way in
    `paced_loops` (none: every loop's calls were queued while the kernel still slept)."""
    times = time_ways(torch, ways, busy=True, calls=calls, loops=loops)
    sleep = sleep_us(torch)
    paced = {way: sum(t * calls >= 0.9 * sleep for t in ts) for way, ts in times.items()}
    return {"us_per_call": medians(times), "sleep_us": round(sleep, 1),
            "paced_loops": {way: n for way, n in paced.items() if n}}


def idle_and_busy(torch, ways: dict[str, Any]) -> dict:
    """The read side's record of `ways`: medians with the GPU idle (`us_per_call`) and behind a busy GPU
    (`us_per_call_gpu_busy`), with busy_figures' check beside them (`gpu_busy`: sleep_us, paced_loops)."""
    idle = medians(time_ways(torch, ways))
    busy = busy_figures(torch, ways)
    return {"us_per_call": idle, "us_per_call_gpu_busy": busy.pop("us_per_call"), "gpu_busy": busy}


def _no_op(*_args: Any) -> None:
    return None


def host_cost(torch, spec: Spec, args: tuple) -> dict:
    """Host microseconds per call of each way to launch the writer's kernel (median of time_ways' loops; the
    same behind a busy GPU in `gpu_busy`); `python_call` (an empty Python function of the op's arguments) shows
    how fast the host ran:
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
                 "native": native.status(), "host": host_machine()}
    before = kernel.counts() if kernel is not None else None
    timed = {}
    for way, fn in ways.items():
        if isinstance(fn, Exception):
            out[way] = {"error": f"{type(fn).__name__}: {fn}"[:300]}
        else:
            timed[way] = fn
    times = time_ways(torch, timed)
    # the medians in the read side's shape (idle_and_busy's, so that one reader reads both records), and flat
    out["us_per_call"] = medians(times)
    for way, ts in times.items():
        out[way] = out["us_per_call"][way]
        out[f"{way}_min"] = round(min(ts), 3)
    out["gpu_busy"] = busy_figures(torch, timed)
    out["us_per_call_gpu_busy"] = dict(out["gpu_busy"]["us_per_call"])
    if kernel is not None and before is not None:  # calls of the loops above that the native kernel launched
        after = kernel.counts()
        out["native_calls"] = {"launched": after[0] - before[0], "declined": after[1] - before[1]}
    return out


def read_host_cost(torch, spec: Spec, peer=None) -> dict:
    """Host microseconds per eager call of the read side's ops on one sequence of READ_KEYS keys (the reader's
    inputs as kgen.reader_check makes them; medians of time_ways' loops, idle and behind a busy GPU):
      indexer_logits      torch.ops.kgen.indexer_logits (the reader: its native kernel, one allocation, one launch)
      indexer_topk        torch.ops.kgen.indexer_topk at k = READ_K (the native chain: two of each)
      indexer_topk_slots  torch.ops.kgen.indexer_topk_slots, the same with the top-k writing cache slots
      dispatch_floor      an empty op of the reader's schema: torch's dispatcher into Python alone
      deepgemm, deepgemm_schedule
                          DeepGEMM's fp8_paged_mqa_logits (its schedule made outside) and its schedule call apart,
                          on the same tensors, where `peer` (deep_gemm) is given and reads the layout
    `native` says whether the native kernels are installed, `goal_us` the issues' bound."""
    from . import ops  # registers torch's ops: only where a GPU command runs
    from .ops.reader import INDEXER_LOGITS_SCHEMA

    name = ops.variant_name(spec)
    case = RC.make_case(spec, [READ_KEYS] * READ_BATCH, seed=0)
    kgen = torch.ops.kgen
    ways: dict[str, Any] = {
        "indexer_logits": lambda: kgen.indexer_logits(name, *case),
        "indexer_topk": lambda: kgen.indexer_topk(name, *case, READ_K),
        "indexer_topk_slots": lambda: kgen.indexer_topk_slots(name, *case, READ_K),
        "dispatch_floor": lambda: _empty_op(torch, schema=INDEXER_LOGITS_SCHEMA)(name, *case),
    }
    out: dict[str, Any] = {"variant": spec.name, "batch": READ_BATCH, "keys": READ_KEYS, "k": READ_K,
                           "calls_per_loop": HOST_CALLS, "loops": HOST_LOOPS, "goal_us": GOAL_US,
                           "host": host_machine()}
    why = RC.peer_takes(spec, 1) if peer is not None else "deep_gemm does not import"
    if why:
        out["peer"] = {"name": RC.PEER_NAME, "present": False, "why": why}
    else:
        ways["deepgemm"], ways["deepgemm_schedule"] = RC.peer_call(peer, spec, case, 1)
        out["peer"] = {"name": RC.PEER_NAME, "present": True}
    for fn in ways.values():  # loads the kernels, installs the native ones, learns the shapes
        fn()
    out["native"] = native.status()
    out.update(idle_and_busy(torch, ways))
    return out


_EMPTY_OP: dict[Any, Any] = {}


def _empty_op(torch, custom: bool = False, device: str = "cuda", schema: str | None = None):
    """An op of `schema` (by default norm_rope_store's) whose CUDA implementation does nothing: the dispatcher's
    share of an op's host cost (`torch.library` define + impl, as kgen.ops registers), or with `custom` (the
    writer's schema) the same through `torch.library.custom_op`."""
    from .ops import NORM_ROPE_STORE_SCHEMA

    schema = schema or NORM_ROPE_STORE_SCHEMA
    key = (custom, device, schema)
    if key not in _EMPTY_OP:
        name = f"empty{sum(isinstance(k, tuple) for k in _EMPTY_OP)}"
        if custom:
            if schema != NORM_ROPE_STORE_SCHEMA:
                raise ValueError("the custom_op floor takes the writer's schema")

            def empty_custom(variant, x, weight, bias, freqs, positions, out_loc, cache):
                return None

            torch.library.custom_op(f"kgen_bench::{name}", empty_custom, mutates_args=("cache",),
                                    device_types=device, schema=schema)
        else:
            lib = torch.library.Library("kgen_bench", "FRAGMENT")  # noqa: TOR901
            lib.define(name + schema)
            lib.impl(name, lambda *a: None, device.upper())
            _EMPTY_OP[name] = lib  # kept: the op lives as long as its library
        _EMPTY_OP[key] = getattr(torch.ops.kgen_bench, name).default
    return _EMPTY_OP[key]
