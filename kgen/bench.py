"""`kgen bench`: the kernel against the device's copy bandwidth and against torch, in one run.

Measured in one process, written to one JSON file (atomically):
  * the practical bandwidth limit: a 1 GiB device-to-device copy (bytes read + written);
  * per variant and token count: the kgen kernel, the Torch reference eager, and torch.compile of
    the reference (an error string if torch.compile fails; a skip once its time budget is spent);
  * two timings, as the peer kernel's figures were taken (bench/results/h200-2026-11-30/README.md):
      cold  - a 256 MiB memset flushes L2 before each call; CUDA events around the call only; the
              median of >= 20 calls;
      graph - many calls back to back captured in one CUDA graph; per-call time = replay / calls,
              the median of the replays (eager and compiled torch, which sync on the host, are timed
              as a loop of calls instead);
  * peak extra device memory around one call (torch.cuda.max_memory_allocated delta): ~0 for kgen;
  * per N, a device copy of the same number of bytes timed the same two ways, and at small N the
    launch-bound floor: an empty kernel with the same grid;
  * the peer (`peer`, PEER_WHAT): SGLang's store kernel for the variants it writes (kgen.peer_sglang), on
    the same tensors, timed A-B-B-A beside kgen's launch, both caches' bytes compared after one call
    each; `peer: {name, absent: why}` where it cannot run (no kit, no nvcc, no GPU, another variant).

Byte model (BYTE_MODEL), per token: the input row (head_dim x input bytes), the freqs row
(rope_dim x 4 B) and the position (8 B) when there is RoPE, the out_loc entry (8 B) are read; the
row and the scales (kgen.layout's written_bytes_per_token: slot/page padding excluded) are written.
The norm weight/bias (read once per block, L2-resident) are not counted.

Inputs (INPUTS, recorded at the top of the JSON): as an engine's, so that every counted byte comes
from DRAM: a freqs table of 2^20 rows (256 MiB at rope_dim 64, far larger than L2); positions random
in [0, 2^20) (decode: every token another sequence, each freqs row a DRAM read) or, with
`positions="consecutive"`, a run start, start+1, ... (prefill of a long sequence); x = 3 * randn in the
input dtype, weight = 1 + 0.1 * randn, bias = 0.1 * randn; out_loc a shuffled permutation of all slots
of ceil(N / page_size) pages (every token written). A freqs table of 4096 rows (what kgen bench used
before 2026-11-30) stays in L2 and flatters every figure that counts a freqs row per token.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

from . import launcher, peer_sglang, topk_bench
from .diagnostics import KgenError
from .diagnostics import err as _say
from .files import write_atomic
from .gpurun import precompile, start_gpu_command, sticky, usage_error
from .host_cost import host_cost, read_host_cost
from .layout import Layout, compute, launch_shape, tokens_per_warp
from .reader_check import bench_readers, peer_module, profile_readers
from .reader_layout import readable
from .runtime import current_stream_handle, device_info, load
from .spec import Spec
from .timing import (
    COLD_MIN_REPS,
    FLUSH_BYTES,
    GRAPH_BYTES_PER_REPLAY,
    GRAPH_MAX_CALLS,
    GRAPH_MIN_CALLS,
    Timer,
    _with_bw,
    copy_bandwidth,
    graph_calls,
)
from .toolchain import nvrtc_version

DEFAULT_TOKENS = (1, 64, 4096, 65536, 1048576)
FREQS_ROWS = 1 << 20  # a long-context model's RoPE table: each random position a DRAM row
POSITIONS = ("random", "consecutive")
FLOOR_MAX_TOKENS = 4096  # the empty-kernel launch floor is measured up to this N
DEFAULT_COMPILE_BUDGET_S = 300.0

BYTE_MODEL = ("per token: read head_dim*input_bytes (x row) + rope_dim*4 (freqs row, if RoPE) + 8 (position, "
              "if RoPE) + 8 (out_loc); written layout.written_bytes_per_token (row and scales as stored; "
              "scale-slot and page padding excluded); norm weight/bias not counted. With random positions in a "
              "2^20-row table every counted freqs row is a DRAM read. GB/s = bytes / time / 1e9")


def inputs_record(positions: str) -> dict:
    """What the JSON's top-level `inputs` says (contract): how positions and the table were drawn."""
    return {"positions": positions, "max_pos": FREQS_ROWS, "freqs_rows": FREQS_ROWS,
            "x": "3 * randn (input dtype)", "weight": "1 + 0.1 * randn", "bias": "0.1 * randn",
            "out_loc": "a shuffled permutation of all slots of ceil(N / page_size) pages (all written)"}


# ---------------------------------------------------------------------------------------------
# byte model (pure)


def byte_model(spec: Spec, n_tokens: int, lay: Layout | None = None) -> dict:
    """Bytes the op must move for `n_tokens` tokens (see BYTE_MODEL)."""
    lay = lay or compute(spec)
    read_tok, write_tok = lay.read_bytes_per_token, lay.written_bytes_per_token
    return {"read_per_token": read_tok, "written_per_token": write_tok, "bytes_per_token": lay.bytes_per_token,
            "read": n_tokens * read_tok, "written": n_tokens * write_tok, "total": n_tokens * (read_tok + write_tok)}


# ---------------------------------------------------------------------------------------------
# timers (CUDA events)


# ---------------------------------------------------------------------------------------------
# pieces


_EMPTY_SRC = 'extern "C" __global__ void kgen_empty_kernel() {}\n'
_empty_kernel = None


def empty_kernel(arch: str, device: int = 0):
    """An empty kernel (NVRTC, in memory), loaded through the launch stack, for the launch floor."""
    global _empty_kernel
    if _empty_kernel is None:
        from cuda.core import Program, ProgramOptions

        prog = Program(_EMPTY_SRC, "c++", ProgramOptions(arch=arch))
        obj = prog.compile("cubin")
        _empty_kernel = launcher.load_cubin(bytes(obj.code), "kgen_empty_kernel", device, what="empty kernel")
    return _empty_kernel


def floor_runs(torch, timer: Timer, spec: Spec, n: int, nbytes: int, arch: str) -> dict:
    """A device copy of the same modelled bytes (every N) and, at small N, an empty kernel with the
    kernel's grid: the floors the kernel is compared with, timed the same two ways."""
    out: dict = {}
    half = max(1, nbytes // 2)
    src = torch.empty(half, dtype=torch.uint8, device="cuda").random_()
    dst = torch.empty_like(src)
    fn = lambda: dst.copy_(src)  # noqa: E731
    out["copy_same_bytes"] = {"bytes": 2 * half, "cold": timer.cold(fn),
                              "graph": timer.warm(fn, launches=graph_calls(nbytes))}
    if n > FLOOR_MAX_TOKENS:
        return out
    try:
        k = empty_kernel(arch, torch.cuda.current_device())
        grid, block = launch_shape(spec, n)
        run = launcher.launcher(k, launcher.PreparedLaunch("<", block), name="empty kernel")
        efn = lambda: run((grid, 1, 1), 0, current_stream_handle())  # noqa: E731
        out["empty_kernel"] = {"grid": grid, "block": block, "cold": timer.cold(efn),
                               "graph": timer.warm(efn, launches=GRAPH_MAX_CALLS)}
    except Exception as e:  # noqa: BLE001
        out["empty_kernel"] = {"error": f"{type(e).__name__}: {e}"[:500]}
    return out


_freqs_tables: dict[tuple[int, str], object] = {}


def freqs_table(torch, rope_dim: int, device="cuda"):
    """fp32 [FREQS_ROWS, rope_dim], the reference's theta-10000 table, built on the device once per
    rope_dim (256 MiB at rope_dim 64)."""
    from . import inputs as I

    key = (rope_dim, str(device))
    t = _freqs_tables.get(key)
    if t is None:
        t = _freqs_tables[key] = I.rope_freqs(FREQS_ROWS, rope_dim, device=device)
    return t


def bench_inputs(spec: Spec, n: int, seed: int, positions: str = "random", device="cuda"):
    """(x, weight, bias, freqs, positions, out_loc, cache) as the op takes them (None where the spec
    has none), drawn as INPUTS says: what an engine's kernel sees."""
    import torch

    from .reference import INPUT_DTYPE

    if positions not in POSITIONS:
        raise ValueError(f"positions must be one of {POSITIONS}, got {positions!r}")
    lay = compute(spec)
    g = torch.Generator(device=device).manual_seed(seed)
    dt = INPUT_DTYPE[spec.input_dtype]
    h = spec.head_dim
    x = (3.0 * torch.randn(n, h, generator=g, device=device)).to(dt)
    weight = (1.0 + 0.1 * torch.randn(h, generator=g, device=device)).to(dt)
    bias = (0.1 * torch.randn(h, generator=g, device=device)).to(dt)
    freqs = pos = None
    if spec.rope.dim:
        freqs = freqs_table(torch, spec.rope.dim, device)
        if positions == "random":
            pos = torch.randint(0, FREQS_ROWS, (n,), generator=g, device=device, dtype=torch.int64)
        else:
            start = int(torch.randint(0, max(1, FREQS_ROWS - n), (1,), generator=g, device=device))
            pos = torch.arange(start, start + n, device=device, dtype=torch.int64)
        if spec.positions.source == "decode_plan":  # SGLang's decode step: a key where (pos + R) % R == 0
            pos = peer_sglang.peer_plan(torch, pos, spec.positions.compress_ratio)
    pages = max(1, -(-n // lay.page_size))
    out_loc = torch.randperm(lay.slots(pages), generator=g, device=device)[:n].to(torch.int64)
    cache = torch.zeros(pages, lay.page_bytes, dtype=torch.uint8, device=device)
    return (x, weight if spec.norm.kind != "none" else None, bias if spec.norm.kind == "layernorm" else None,
            freqs, pos, out_loc, cache)


class CompileState:
    def __init__(self, enabled: bool, budget_s: float):
        self.enabled, self.budget_s, self.spent = enabled, budget_s, 0.0
        self.fns: dict[str, Callable[..., object]] = {}
        self.broken: dict[str, str] = {}


PEER_WHAT = ("SGLang's fused_norm_rope_indexer / _fp4 (kgen.peer_sglang), launched as SGLang's host code does, on "
             "the same x, weight, freqs table, out_loc and positions as kgen (a positions array becomes DecodePlan "
             "rows seq_len = position + 1, compress_ratio 1: the same rows, every token written; a decode-plan "
             "variant's plan is passed as is) into a cache of the same bytes. cold / graph timed A-B-B-A with "
             "kgen's launch (speed = peer time / kgen time, > 1: kgen faster); bytes_differing after one call of "
             "each into zeroed caches (kgen's exact rounding vs SGLang's rsqrtf and contracted multiplies)")


class PeerState:
    """SGLang's store kernel, loaded once per run, or why it is absent."""

    def __init__(self, enabled: bool = True, specs: list[Spec] | None = None):
        self.peer: peer_sglang.Peer | None = None
        self.why: str | None = "disabled (KGEN_BENCH_PEER=0)"
        if not enabled:
            return
        if specs is not None and not any(peer_sglang.kernel_for(s)[0] for s in specs):
            self.why = "no variant here is one SGLang's indexer store writes"  # nothing to build it for
            return
        try:
            self.peer, self.why = peer_sglang.Peer.load(), None
        except peer_sglang.PeerAbsent as e:
            self.why = str(e)
        except Exception as e:  # noqa: BLE001 - a peer that fails to load is recorded, never fatal
            self.why = f"{type(e).__name__}: {e}"[:500]

    def record(self) -> dict:
        return {"name": peer_sglang.NAME, "present": self.peer is not None, "why": self.why, "what": PEER_WHAT,
                "kit": str(peer_sglang.kit_dir()), "sglang": peer_sglang.SGLANG_VERSION}


def _abba(timer: Timer, how: str, a, b, **kw) -> tuple[dict, dict]:
    """A, B, B, A with `timer.<how>`: each side's mean of its two medians (order effects cancel)."""
    m = getattr(timer, how)
    a1, b1, b2, a2 = m(a, **kw), m(b, **kw), m(b, **kw), m(a, **kw)

    def pair(x, y):
        return {"ms": (x["ms"] + y["ms"]) / 2, "orders_ms": [x["ms"], y["ms"]], "reps": x["reps"]}

    return pair(a1, a2), pair(b1, b2)


def peer_case(torch, timer: Timer, spec: Spec, args: tuple, run, bm: dict, copy_gbps: float | None,
              state: PeerState | None) -> dict:
    """SGLang's kernel beside kgen's `run` on `args` (bench_inputs), or {name, absent: why}."""
    from . import ops

    kind, why = peer_sglang.kernel_for(spec)
    if kind is None or state is None or state.peer is None:
        return {"name": peer_sglang.NAME, "absent": why or (state.why if state else "not asked")}
    x, w, _b, f, p, loc, cache = args
    if spec.positions.source == "decode_plan":
        plan, ratio = p, spec.positions.compress_ratio
    else:
        plan, ratio = peer_sglang.peer_plan(torch, p, 1), 1
    theirs = torch.zeros_like(cache)

    def peer():
        state.peer.store(kind, x, plan, w, spec.norm.eps, f, loc, theirs, ratio)

    mine = torch.zeros_like(cache)
    ops.norm_rope_store(spec, x, w, _b, f, p, loc, mine)
    peer()
    torch.cuda.synchronize()
    differing = int((mine != theirs).sum())
    del mine
    kc, pc = _abba(timer, "cold", run, peer)
    kg, pg = _abba(timer, "warm", run, peer, launches=graph_calls(bm["total"]))
    out = {"name": peer_sglang.NAME, "kernel": kind, "compress_ratio": ratio,
           "cold_us": pc["ms"] * 1e3, "graph_us": pg["ms"] * 1e3,
           "kgen_cold_us": kc["ms"] * 1e3, "kgen_graph_us": kg["ms"] * 1e3,
           "speed_cold": pc["ms"] / kc["ms"], "speed_graph": pg["ms"] / kg["ms"],
           "cold": _with_bw(pc, bm["total"], copy_gbps), "graph": _with_bw(pg, bm["total"], copy_gbps),
           "bytes_compared": cache.numel(), "bytes_differing": differing, "bytes_equal": differing == 0}
    return out


def bench_case(torch, timer: Timer, spec: Spec, n: int, copy_gbps: float, cstate: CompileState,
               seed: int, positions: str = "random", peer: PeerState | None = None) -> dict:
    from . import ops, reference

    lay = compute(spec)
    bm = byte_model(spec, n, lay)
    args = bench_inputs(spec, n, seed, positions)
    loaded = load(spec)
    grid, block = launch_shape(spec, n)
    entry: dict = {"variant": spec.name, "tokens": n, "bytes": bm,
                   "launch": {"grid": grid, "block": block, "tokens_per_warp": tokens_per_warp(spec, n),
                              "numerics": spec.numerics, "arch": loaded.arch, "registers": loaded.registers(),
                              "spill_bytes": getattr(loaded.compiled, "spill_bytes", None),
                              "spec": spec.launch.model_dump()}}

    # kgen
    run = ops.prepare(spec, *args)
    k: dict = {}
    k["peak_extra_bytes"] = timer.peak_extra(lambda: ops.norm_rope_store(spec, *args))
    k["cold"] = _with_bw(timer.cold(run), bm["total"], copy_gbps)
    k["graph"] = _with_bw(timer.warm(run, launches=graph_calls(bm["total"])), bm["total"], copy_gbps)
    if n <= 65536:
        k["host_us_per_call"] = host_cost(torch, spec, args)
    if n <= FLOOR_MAX_TOKENS:  # a single call through the registered op, as an engine makes it
        name = ops.variant_name(spec)
        k["cold_op"] = _with_bw(timer.cold(lambda: torch.ops.kgen.norm_rope_store(name, *args)), bm["total"],
                                copy_gbps)
    entry["kgen"] = k

    # the peer: SGLang's kernel on the same tensors, A-B-B-A with kgen's launch
    try:
        entry["peer"] = peer_case(torch, timer, spec, args, run, bm, copy_gbps, peer)
    except Exception as ex:  # noqa: BLE001 - recorded, never fatal
        entry["peer"] = {"name": peer_sglang.NAME, "error": f"{type(ex).__name__}: {ex}"[:500]}

    # torch eager (own cache: the reference writes the same bytes)
    x, w, b, f, p, loc, cache = args
    ref_cache = cache.clone()

    def eager():
        reference.norm_rope_store(spec, x, w, b, f, p, loc, ref_cache)

    e: dict = {}
    try:
        e["peak_extra_bytes"] = timer.peak_extra(eager)
        e["cold"] = _with_bw(timer.cold(eager, warmup=1, lo=3, hi=30), bm["total"], copy_gbps)
        e["graph"] = _with_bw(timer.loop(eager, launches=5, warmup=1, lo=2, hi=10), bm["total"], copy_gbps)
    except Exception as ex:  # noqa: BLE001
        e["error"] = f"{type(ex).__name__}: {ex}"[:500]
    entry["eager"] = e

    # floors: a copy of the same bytes (every N), the empty kernel (small N)
    entry["floor"] = floor_runs(torch, timer, spec, n, bm["total"], loaded.arch)

    # torch.compile of the reference (last: its first call compiles, which can take long)
    entry["compile"] = compile_case(torch, timer, spec, bm, copy_gbps, cstate, (x, w, b, f, p, loc, ref_cache))

    # ratios
    entry["ratios"] = ratios(entry)
    return entry


def compile_case(torch, timer: Timer, spec: Spec, bm: dict, copy_gbps: float, cstate: CompileState,
                 args: tuple) -> dict:
    if not cstate.enabled:
        return {"skipped": "disabled"}
    if spec.name in cstate.broken:
        return {"error": cstate.broken[spec.name]}
    if cstate.spent > cstate.budget_s:
        return {"skipped": f"torch.compile time budget of {cstate.budget_s:g} s spent"}
    from . import reference

    fn = cstate.fns.get(spec.name)
    if fn is None:
        def ref(x, w, b, f, p, loc, cache):
            reference.norm_rope_store(spec, x, w, b, f, p, loc, cache)

        fn = cstate.fns[spec.name] = torch.compile(ref, dynamic=True)  # one compile for every N
    out: dict = {}
    t0 = time.perf_counter()
    try:
        fn(*args)  # compiles (or recompiles for a new shape)
        torch.cuda.synchronize()
        out["first_call_s"] = time.perf_counter() - t0
        cstate.spent += out["first_call_s"]
        call = lambda: fn(*args)  # noqa: E731
        out["peak_extra_bytes"] = timer.peak_extra(call)
        out["cold"] = _with_bw(timer.cold(call, warmup=1, lo=3, hi=30), bm["total"], copy_gbps)
        out["graph"] = _with_bw(timer.loop(call, launches=5, warmup=1, lo=2, hi=10), bm["total"], copy_gbps)
    except Exception as ex:  # noqa: BLE001 - recorded, never fatal
        cstate.spent += time.perf_counter() - t0
        msg = f"{type(ex).__name__}: {ex}"
        cstate.broken[spec.name] = msg[:2000]
        out["error"] = msg[:2000]
        try:
            torch.cuda.synchronize()
        except Exception:  # noqa: BLE001
            pass
    return out


def ratios(entry: dict) -> dict:
    r: dict = {}
    k = entry.get("kgen", {})
    for mode in ("cold", "graph"):
        kt = k.get(mode, {}).get("ms")
        if not kt:
            continue
        r[f"{mode}_fraction_of_copy"] = k[mode].get("fraction_of_copy")
        if entry.get("peer", {}).get(f"speed_{mode}"):
            r[f"{mode}_speed_vs_peer"] = entry["peer"][f"speed_{mode}"]
        for other in ("eager", "compile"):
            ot = entry.get(other, {}).get(mode, {}).get("ms")
            if ot:
                r[f"{mode}_speedup_vs_{other}"] = ot / kt
        fl = entry.get("floor", {})
        for name in ("empty_kernel", "copy_same_bytes"):
            ft = fl.get(name, {}).get(mode, {}).get("ms") if isinstance(fl.get(name), dict) else None
            if ft:
                r[f"{mode}_over_{name}"] = kt / ft
    return r


# ---------------------------------------------------------------------------------------------
# the command


def environment(torch) -> dict:

    env = {"device": device_info(), "torch": torch.__version__, "cuda": torch.version.cuda,
           "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]),
           "date": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
           "python": sys.version.split()[0]}
    try:
        import cuda.core

        env["cuda_core"] = getattr(cuda.core, "__version__", None)
    except Exception:  # noqa: BLE001
        pass
    try:

        env["nvrtc"] = nvrtc_version()
    except Exception:  # noqa: BLE001
        pass
    try:
        env["driver"] = torch.cuda.driver_version() if hasattr(torch.cuda, "driver_version") else None
    except Exception:  # noqa: BLE001
        pass
    return env


def write_json_atomic(path: Path, data: dict) -> None:

    write_atomic(path, json.dumps(data, indent=2) + "\n")


def read_side(specs: list[Spec], timer: Timer, copy: dict, *, tunes: tuple = (None,),
              shapes: tuple | None = None) -> dict:
    """The read side (kgen.reader_check.bench_readers) and, with its default batches, the top-k's rows beside
    the engines' top-ks (`topk`: kgen.topk_bench.bench_topk; SGLang's top-k loaded once here, unless
    KGEN_BENCH_PEER=0) and the ops' host cost per eager call (`host`: kgen.host_cost.read_host_cost, DeepGEMM's
    beside the layout it reads). Alternative tunings and shapes compare the reader alone."""
    reader = bench_readers(specs, timer, copy, say=_say, tunes=tunes, shapes=shapes)
    mine = [s for s in specs if readable(s)]
    if mine and shapes is None and tuple(tunes) == (None,):
        sglang = topk_bench.PeerState(topk_bench.peer_enabled())
        reader["topk"] = topk_bench.bench_topk(mine, timer=timer, say=_say, sglang=sglang, copy=copy)
        reader["host"] = [_read_host(timer.torch, spec) for spec in mine]
    return reader


def _read_host(torch, spec: Spec) -> dict:
    try:
        e = read_host_cost(torch, spec, peer=peer_module()[0])
    except Exception as ex:  # noqa: BLE001 - recorded; the bench's other entries stand
        return {"variant": spec.name, "error": f"{type(ex).__name__}: {ex}"[:1000]}
    us, busy = e["us_per_call"], e["us_per_call_gpu_busy"]
    _say(f"host {spec.name}: " + ", ".join(f"{w} {us[w]:.1f} / {busy[w]:.1f} us" for w in us)
         + " (GPU idle / busy)")
    return e


def bench_command(paths: list[Path], tokens: list[int] | None, json_file: Path | None, *,
                  use_compile: bool | None = None, compile_budget_s: float | None = None,
                  positions: str = "random", readers_only: bool = False, reader_tunes: tuple = (None,),
                  reader_shapes: tuple | None = None, profile: tuple | None = None) -> int:
    """Exit 0 ok, 1 a variant failed to run, 2 no GPU / usage (KgenError).

    torch.compile: on unless KGEN_BENCH_COMPILE=0 (or use_compile=False); its compile time is capped by
    KGEN_BENCH_COMPILE_BUDGET_S (default 300 s), after which it is skipped (and said so).
    KGEN_BENCH_BUDGET_S (default: none) caps the whole run: later cases are recorded as skipped."""

    if positions not in POSITIONS:
        raise usage_error("bench", f"--positions must be one of {', '.join(POSITIONS)} (got {positions!r})")
    specs = start_gpu_command("bench", paths, tokens, min_tokens=1)
    import torch

    if profile is not None:  # one launch per (readable variant, shape), nothing timed: for ncu -c
        profiled = profile_readers(specs, profile, say=_say)
        if json_file is not None:
            write_json_atomic(json_file, {"profiled": profiled})
        return 0
    if readers_only:  # the read side alone (what `python -m kgen.reader_check bench` was)
        timer = Timer(torch)
        copy = copy_bandwidth(torch, timer)
        reader = read_side(specs, timer, copy, tunes=reader_tunes, shapes=reader_shapes)
        if json_file is not None:
            write_json_atomic(json_file, {**environment(torch), "copy": copy, "reader": reader})
        return 1 if any("error" in e for e in reader["results"]) else 0

    if use_compile is None:
        use_compile = os.environ.get("KGEN_BENCH_COMPILE", "1") not in ("0", "false", "no", "")
    if compile_budget_s is None:
        compile_budget_s = float(os.environ.get("KGEN_BENCH_COMPILE_BUDGET_S", DEFAULT_COMPILE_BUDGET_S))
    try:
        import torch._dynamo

        torch._dynamo.config.cache_size_limit = max(torch._dynamo.config.cache_size_limit, 64)
    except Exception:  # noqa: BLE001
        pass


    errors = precompile(specs)
    data: dict = {**environment(torch), "inputs": inputs_record(positions), "byte_model": BYTE_MODEL, "timing": {
        "cold": f"L2 flushed by a {FLUSH_BYTES >> 20} MiB memset before each call, CUDA events around the call only, "
                f"median of >= {COLD_MIN_REPS}",
        "graph": f"{GRAPH_MIN_CALLS}-{GRAPH_MAX_CALLS} calls (about {GRAPH_BYTES_PER_REPLAY >> 20} MiB of modelled "
                 "bytes) captured in one CUDA graph, per call = replay / calls, median of >= 20 replays (torch "
                 "eager/compile: a loop of calls, since they sync on the host)",
        "copy": "a 1 GiB device-to-device copy in the same process (bytes read + written), and per N a copy of the "
                "same modelled bytes (floor.copy_same_bytes)"},
        "tokens": list(tokens or DEFAULT_TOKENS), "compile_errors": errors, "results": []}
    timer = Timer(torch)
    _say("kgen bench: device copy ...")
    data["copy"] = copy_bandwidth(torch, timer)
    copy_gbps = data["copy"]["gbps"]
    _say(f"kgen bench: copy {copy_gbps:.0f} GB/s (read + write)")
    cstate = CompileState(use_compile, compile_budget_s)
    peer = PeerState(topk_bench.peer_enabled(), specs)
    data["peer"] = peer.record()
    _say(f"kgen bench: peer {peer_sglang.NAME}: " + ("present" if peer.peer else f"absent: {peer.why}"))
    budget = float(os.environ.get("KGEN_BENCH_BUDGET_S", "0") or 0)  # 0 = no limit
    started = time.perf_counter()
    failed = bool(errors)
    try:
        failed = _bench_all(torch, timer, specs, tokens, errors, copy_gbps, cstate, budget, started, data,
                            json_file, positions, peer) or failed
    except KeyboardInterrupt:  # timeout -s INT: keep what was measured
        data["interrupted"] = True
        failed = True
        _say("kgen bench: interrupted")
    data["compile_seconds_spent"] = round(cstate.spent, 1)
    if not data.get("interrupted"):  # the read side: indexer_logits on every variant it reads
        data["reader"] = read_side(specs, timer, data["copy"], tunes=reader_tunes, shapes=reader_shapes)
        failed = failed or any("error" in e for e in data["reader"]["results"])
    if json_file is not None:
        write_json_atomic(json_file, data)
    print(summary_table(data))
    return 1 if failed else 0


def _bench_all(torch, timer, specs, tokens, errors, copy_gbps, cstate, budget, started, data, json_file,
               positions: str = "random", peer: PeerState | None = None) -> bool:
    failed = False
    for spec in specs:
        if spec.name in errors:
            data["results"].append({"variant": spec.name, "error": errors[spec.name]})
            continue
        for i, n in enumerate(tokens or DEFAULT_TOKENS):
            t0 = time.perf_counter()
            if budget and t0 - started > budget:
                data["results"].append({"variant": spec.name, "tokens": n,
                                        "skipped": f"KGEN_BENCH_BUDGET_S={budget:g} s spent"})
                continue
            try:
                entry = bench_case(torch, timer, spec, n, copy_gbps, cstate, seed=i, positions=positions, peer=peer)
            except KgenError as e:
                failed = True
                entry = {"variant": spec.name, "tokens": n, "error": "; ".join(p.format() for p in e.problems)}
            except Exception as e:  # noqa: BLE001
                failed = True
                entry = {"variant": spec.name, "tokens": n, "error": f"{type(e).__name__}: {e}"[:2000]}
            entry["seconds"] = round(time.perf_counter() - t0, 2)
            torch.cuda.empty_cache()  # the case's tensors are gone with its frame
            data["results"].append(entry)
            _say(_line(entry))
            if json_file is not None:  # keep what we have if a later case dies
                write_json_atomic(json_file, data)
            if "error" in entry:

                if sticky(entry["error"]):
                    _say("kgen bench: stopping: the CUDA context is likely broken after this error")
                    return True
    return failed


def _fmt(v, spec: str = ".1f") -> str:
    return "-" if v is None else format(v, spec)


def _line(e: dict) -> str:
    if "skipped" in e:
        return f"  skip {e['variant']} N={e.get('tokens')}: {e['skipped']}"
    if "error" in e and "kgen" not in e:
        return f"  FAIL {e['variant']} N={e.get('tokens')}: {e['error'].splitlines()[0]}"
    k = e["kgen"]
    return (f"  {e['variant']:<28} N={e['tokens']:<8} cold {_fmt(k['cold']['us'])} us "
            f"({_fmt(k['cold']['gbps'], '.0f')} GB/s)  graph {_fmt(k['graph']['us'])} us "
            f"({_fmt(k['graph']['gbps'], '.0f')} GB/s)  [{e['seconds']} s]")


def _peer_cell(r: dict) -> str:
    """SGLang's time / kgen's, cold/graph ('-' where the peer did not run)."""
    c, g = r.get("cold_speed_vs_peer"), r.get("graph_speed_vs_peer")
    return "-" if c is None or g is None else f"{c:.2f}/{g:.2f}"


def summary_table(data: dict) -> str:
    copy = data.get("copy", {}).get("gbps")
    inp = data.get("inputs", {})
    head = (f"device: {data['device']['name']}  copy: {_fmt(copy, '.0f')} GB/s  torch {data['torch']}  positions: "
            f"{inp.get('positions')} in [0, {inp.get('max_pos')})\n"
            f"{'variant':<28} {'N':>8} {'cold us':>9} {'graph us':>9} {'cold %cp':>8} {'graph %cp':>9} "
            f"{'x copyN':>8} {'x eager':>8} {'x compile':>9} {'x peer c/g':>10} {'extra B':>8}")
    rows = [head]
    for e in data["results"]:
        if "skipped" in e:
            rows.append(f"{e['variant']:<28} {str(e.get('tokens', '')):>8} skipped: {e['skipped']}")
            continue
        if "kgen" not in e:
            rows.append(f"{e['variant']:<28} {str(e.get('tokens', '')):>8} ERROR {e.get('error', '')[:60]}")
            continue
        k, r = e["kgen"], e.get("ratios", {})
        pc = lambda v: _fmt(v * 100 if v else None, ".0f")  # noqa: E731
        rows.append(f"{e['variant']:<28} {e['tokens']:>8} {_fmt(k['cold']['us']):>9} {_fmt(k['graph']['us']):>9} "
                    f"{pc(r.get('cold_fraction_of_copy')):>8} {pc(r.get('graph_fraction_of_copy')):>9} "
                    f"{_fmt(r.get('cold_over_copy_same_bytes'), '.2f'):>8} {_fmt(r.get('graph_speedup_vs_eager')):>8} "
                    f"{_fmt(r.get('graph_speedup_vs_compile')):>9} {_peer_cell(r):>10} "
                    f"{k.get('peak_extra_bytes', '-'):>8}")
    return "\n".join(rows)
