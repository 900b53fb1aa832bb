"""GPU correctness and speed of the read side (`kgen::indexer_logits`), for `kgen test` / `kgen bench`.

Correctness (`run_case`): a cache written by the reference writer (kgen.reference: the kernel's
bytes) through a random block table, ragged seq_lens (1, page - 1, page, page + 1, long), random q
and weights; the kernel's logits against kgen.score's Torch path evaluated in float64:
  * -inf exactly where the Torch path has -inf (invisible keys), no NaN anywhere;
  * max |kernel - torch| <= 1e-3 x max |torch| over the visible keys (fp32 accumulation);
  * per query row, the top-512 key sets equal except near-ties: a key in one set and not the other
    whose Torch logit lies within 2 x the row's max error of the 512th value (counted, listed).

Speed, batches as engines run them (`bench_batch`, what `kgen bench` runs): BATCH_SHAPES (equal, +-30 % and
uniform lengths, next_n 1, 2, 4), DeepGEMM's fp8_paged_mqa_logits beside the fp8 layout it reads in the
same process on the same tensors whenever `deep_gemm` imports (docs/gpu.md). Tunings compared
(`bench_case`): B sequences of `keys` keys each (next_n = 1), random block tables over a
cache of exactly the pages needed (filled by repeating reference-written pages), cold (256 MiB
memset before each call) and graph (20 launches in a CUDA graph), as docs/gpu.md measures
DeepGEMM's fp8_paged_mqa_logits. Byte model: per key, the key's bytes (row + scales as stored,
layout.bytes_per_token) read and 4 B of logit written.
"""

from __future__ import annotations

import math
import random
from dataclasses import asdict, dataclass, field
from typing import Any

from . import layout as L
from . import reader_layout as RL
from . import reader_plan as RP
from .arch import check as check_arch
from .compile import compile_rendered
from .dtypes import torch_name
from .reader_layout import readable
from .reader_plan import ring_tunes
from .render import render_reader
from .runtime import device_info
from .sample import sample_specs
from .spec import Spec
from .timing import Timer, _with_bw, copy_bandwidth

TOPK = 512
ERROR_BOUND = 1e-3  # of max |logit|
HEADS = RL.READER_HEADS
BENCH_SHAPES = ((1, 4096), (1, 65536), (1, 262144), (32, 4096), (32, 65536), (128, 4096), (128, 65536))
BYTE_MODEL = ("per key: layout.bytes_per_token read (its row and scales as stored) + 4 B of fp32 logit written; "
              "q, weights and the block table not counted. GB/s = bytes / time / 1e9")
# DeepGEMM fp8_paged_mqa_logits on the H200, cold / graph us (docs/gpu.md, "Peers' recorded figures")
PEER_US = {(1, 4096): (6.8, 3.4), (1, 65536): (9.6, 4.5), (1, 262144): (18.4, 8.1), (32, 4096): (12.6, 5.7),
           (32, 65536): (81.3, 73.1), (128, 4096): (28.9, 21.9), (128, 65536): (283.2, 274.5)}


@dataclass
class LogitsResult:
    variant: str
    case: str
    ok: bool
    max_error: float = math.nan
    max_abs: float = math.nan
    relative_error: float = math.nan
    inf_mismatches: int = 0
    nan_count: int = 0
    rows_compared: int = 0
    topk_mismatches: int = 0  # keys in one top-512 set and not the other
    near_ties: int = 0  # of those, within 2 x max error of the row's 512th value
    examples: list = field(default_factory=list)
    reason: str = ""

    def to_json(self) -> dict:
        return asdict(self)


def _torch():
    import torch

    return torch


def q_dtype(spec: Spec):
    torch = _torch()
    return getattr(torch, torch_name(RL.reader_q_dtype(spec)))


def write_pages(spec: Spec, num_pages: int, *, seed: int, device: str = "cuda", chunk_tokens: int = 1 << 16):
    """uint8 [num_pages, page_bytes]: every slot written by the reference writer (random rows with the
    writer's norm/RoPE/Hadamard/quantization), `chunk_tokens` tokens at a time, each chunk from its own seed: no
    two pages alike, as in an engine's cache (pages that repeat give a row's logits exact ties that real keys do
    not have). The first chunk's inputs come from the CPU's generator (the bytes every case had), later ones from
    the device's, at the device's pace."""
    torch = _torch()
    from . import reference as R

    lay = L.compute(spec)
    P = lay.page_size
    per = max(1, chunk_tokens // P)
    cache = torch.zeros((num_pages, lay.page_bytes), dtype=torch.uint8, device=device)
    for i, first in enumerate(range(0, num_pages, per)):
        pages = cache[first:first + per]
        n = pages.shape[0] * P
        inputs = writer_inputs(spec, n, seed=seed + i, device=device, on_device=i > 0)
        R.norm_rope_store(spec, *inputs, torch.arange(n, device=device), pages)
    return cache


def writer_inputs(spec: Spec, n: int, *, seed: int, device: str = "cuda",
                  on_device: bool = False) -> tuple[Any, Any, Any, Any, Any]:
    """(x, weight, bias, freqs, positions) of `n` random tokens for the spec's writer (None where the
    spec has no such input), drawn by a CPU generator (the same values on every device) or, `on_device`,
    by the device's own."""
    torch = _torch()
    from . import inputs as I

    at = device if on_device else "cpu"
    g = torch.Generator(device=at).manual_seed(seed)
    dt = getattr(torch, torch_name(spec.input_dtype))
    D = spec.head_dim
    x = (3 * torch.randn(n, D, generator=g, device=at)).to(device=device, dtype=dt)
    weight: Any = None
    bias: Any = None
    freqs: Any = None
    positions: Any = None
    if spec.norm.kind != "none":
        weight = (1 + 0.1 * torch.randn(D, generator=g, device=at)).to(device=device, dtype=dt)
    if spec.norm.kind == "layernorm":
        bias = (0.1 * torch.randn(D, generator=g, device=at)).to(device=device, dtype=dt)
    if spec.rope.dim:
        freqs = I.rope_freqs(4096, spec.rope.dim, device=device)
        positions = torch.randint(0, 4096, (n,), generator=g, device=at).to(device)
    return x, weight, bias, freqs, positions


def make_case(spec: Spec, seq_lens: list[int], *, next_n: int = 1, seed: int = 0, device: str = "cuda",
              extra_pages: int = 3, max_seq_len: int | None = None):
    """Inputs of one call: q, weights, cache, block_table (disjoint random pages per sequence,
    garbage past each sequence's last page), seq_lens, max_seq_len."""
    torch = _torch()
    lay = L.compute(spec)
    P = lay.page_size
    B = len(seq_lens)
    need = [-(-n // P) for n in seq_lens]
    max_pages = max(1, max(need))
    num_pages = sum(need) + extra_pages
    g = torch.Generator(device="cpu").manual_seed(seed + 1)
    cache = write_pages(spec, num_pages, seed=seed, device=device)
    perm = torch.randperm(num_pages, generator=g)
    table = torch.randint(-3, 4 * num_pages, (B, max_pages), generator=g)
    at = 0
    for b, k in enumerate(need):
        table[b, :k] = perm[at:at + k]
        at += k
    q = (torch.randn(B, next_n, HEADS, spec.head_dim, generator=g)).to(device=device).to(q_dtype(spec))
    weights = (torch.randn(B * next_n, HEADS, generator=g) / HEADS).to(device)
    msl = max_seq_len if max_seq_len is not None else max(seq_lens) + 5
    return (q, weights, cache, table.to(device=device, dtype=torch.int32),
            torch.tensor(seq_lens, dtype=torch.int32, device=device), msl)


def compare(variant: str, case: str, got, want, *, topk: int = TOPK) -> LogitsResult:
    """The kernel's logits `got` against the Torch path's `want` (both [rows, max_seq_len])."""
    torch = _torch()
    r = LogitsResult(variant, case, ok=False)
    got, want = got.double().cpu(), want.double().cpu()
    ninf_w, ninf_g = torch.isneginf(want), torch.isneginf(got)
    r.inf_mismatches = int((ninf_w != ninf_g).sum())
    r.nan_count = int(torch.isnan(got).sum())
    fin = ~ninf_w & torch.isfinite(got)
    if bool(fin.any()):
        err = (got - want).abs()[fin]
        r.max_error = float(err.max())
        r.max_abs = float(want[fin].abs().max())
        r.relative_error = r.max_error / max(r.max_abs, 1e-30)
    else:
        r.max_error = r.max_abs = r.relative_error = 0.0
    # top-k sets per row (rows with at least one visible key)
    tol = 2 * r.max_error
    for row in range(want.shape[0]):
        vis = int((~ninf_w[row]).sum())
        if vis == 0:
            continue
        k = min(topk, vis)
        r.rows_compared += 1
        tw = set(torch.topk(want[row], k).indices.tolist())
        tg = set(torch.topk(torch.nan_to_num(got[row], nan=-math.inf), k).indices.tolist())
        diff = tw ^ tg
        if not diff:
            continue
        kth = float(torch.topk(want[row], k).values[-1])
        r.topk_mismatches += len(diff)
        for key in diff:
            near = abs(float(want[row, key]) - kth) <= tol
            r.near_ties += int(near)
            if not near and len(r.examples) < 8:
                r.examples.append({"row": row, "key": key, "torch": float(want[row, key]), "kth": kth,
                                   "kernel": float(got[row, key])})
    problems = []
    if r.inf_mismatches:
        problems.append(f"{r.inf_mismatches} logits are -inf in one and not the other")
    if r.nan_count:
        problems.append(f"{r.nan_count} NaN logits")
    if not r.relative_error <= ERROR_BOUND:
        problems.append(f"max error {r.max_error:.3g} = {r.relative_error:.2e} of max |logit| > {ERROR_BOUND}")
    if r.topk_mismatches > r.near_ties:
        problems.append(f"{r.topk_mismatches - r.near_ties} top-{topk} differences are not near-ties")
    r.ok = not problems
    r.reason = "; ".join(problems)
    return r


def launcher(spec: Spec, args: tuple, tune: dict | None = None, *, check_bounds: bool = False):
    """(launch, logits) of the reader on `args`: the shipped choice (kgen.ops.reader.prepare: the cubin of
    this launch shape) with `tune`'s RL.READER_TUNING_DEFAULTS overrides (None: the shipped default)."""
    from .ops.reader import prepare

    return prepare(spec, *args, check_bounds=check_bounds, tune=tune)


def run_case(spec: Spec, seq_lens: list[int], *, next_n: int = 1, seed: int = 0, name: str = "",
             tune: dict | None = None) -> LogitsResult:
    """The kernel and the Torch path (float64) on one case."""
    torch = _torch()
    from .score import indexer_logits_torch

    args = make_case(spec, seq_lens, next_n=next_n, seed=seed)
    launch, got = launcher(spec, args, tune, check_bounds=True)
    got.fill_(float("nan"))  # poisoned: every logit must be written
    launch()
    torch.cuda.synchronize()
    want = indexer_logits_torch(spec, *args, accum=torch.float64)
    return compare(spec.name, name or f"B={len(seq_lens)} next_n={next_n} lens={_lens_text(seq_lens)}", got, want)


def _lens_text(lens: list[int]) -> str:
    return ",".join(map(str, lens[:6])) + (",..." if len(lens) > 6 else "")


def correctness_cases(spec: Spec, seed: int = 0) -> list[tuple[list[int], int]]:
    """(seq_lens, next_n) per case: ragged lengths around the page size, long ones, MTP."""
    P = spec.layout.page_size
    rng = random.Random(seed)
    ragged = [1, max(1, P - 1), P, P + 1, 3 * P + 7, 5000]
    return [
        (ragged, 1),
        ([rng.randint(1, 20000) for _ in range(4)], 1),
        ([70000], 1),
        (ragged, 2),
        ([1, 2, P + 3, 1000], 4),
        ([rng.randint(1, 3000) for _ in range(9)], 3),
        # a ragged batch of many sequences, MTP 4 (a CTA's share of the keys crosses sequences)
        ([rng.choice([1, 4, rng.randint(1, 9000)]) for _ in range(40)], 4),
        # more than 128 (sequence, token group) pairs: the kernel sums the lengths in two rounds
        ([rng.randint(1, 3000) for _ in range(140)], 2),
    ]


# ---------------------------------------------------------------------------------------------
# speed


def byte_model(spec: Spec, batch: int, keys: int) -> int:
    lay = L.compute(spec)
    return batch * keys * (lay.bytes_per_token + 4)


def bench_case(torch, timer, spec: Spec, batch: int, keys: int, copy_gbps: float | None, *, seed: int = 0,
               torch_path: bool = False, tunes: tuple = (None,)) -> list[dict]:
    """One entry per tuning (None: the shipped default) on the same inputs."""

    args = make_case(spec, [keys] * batch, seed=seed, extra_pages=0, max_seq_len=keys)
    nbytes = byte_model(spec, batch, keys)
    out = []
    for tune in tunes:
        launch, logits = launcher(spec, args, tune)
        entry = {"variant": spec.name, "tune": tune or "default", "batch": batch, "keys": keys, "bytes": nbytes,
                 "cold": _with_bw(timer.cold(launch, lo=20), nbytes, copy_gbps),
                 "graph": _with_bw(timer.warm(launch), nbytes, copy_gbps)}
        peer = PEER_US.get((batch, keys)) if spec.store.dtype == "fp8_e4m3" else None  # the peer reads fp8 only
        if peer:
            entry["deepgemm_fp8_us"] = {"cold": peer[0], "graph": peer[1]}
        out.append(entry)
        del launch, logits
    if torch_path:
        # the Torch baseline: the scorer as an engine writes it in Torch (one gather, one matmul)
        from .score import indexer_logits_batched

        try:  # the baseline failing (e.g. out of memory) must not lose the kernel's figures
            out[0]["torch_path"] = _with_bw(timer.cold(lambda: indexer_logits_batched(spec, *args), warmup=1, lo=3,
                                                       hi=3), nbytes, copy_gbps)
        except Exception as ex:  # noqa: BLE001
            out[0]["torch_path"] = {"error": f"{type(ex).__name__}: {ex}"[:500]}
    return out


# ---------------------------------------------------------------------------------------------
# batches as engines run them, beside the peer (DeepGEMM's fp8_paged_mqa_logits, where it imports)

# (B, keys, lengths, next_n): "equal" every sequence `keys` long; "pm30" uniform in [0.7, 1.3] x keys
# (DeepGEMM's own test draw); "uniform" uniform in [1, keys]. max_seq_len is the batch's longest.
BATCH_SHAPES: tuple[tuple[int, int, str, int], ...] = (
    *((b, k, "equal", 1) for b, k in ((1, 4096), (1, 65536), (1, 262144), (1, 1048576), (32, 4096), (32, 65536),
                                      (64, 32768), (128, 4096), (128, 65536))),
    *((b, k, d, 1) for d in ("pm30", "uniform") for b, k in ((32, 65536), (64, 32768), (128, 16384))),
    (64, 4096, "pm30", 1),  # a decode batch of short contexts: the keys stay in the L2 across graph replays
    *((b, k, d, n) for n in (2, 4) for b, k, d in ((1, 65536, "equal"), (32, 65536, "equal"), (64, 32768, "pm30"),
                                                    (128, 16384, "uniform"), (64, 4096, "pm30"))),
)
BATCH_BYTE_MODEL = ("per call: every sequence's keys read once (layout.bytes_per_token each, whatever next_n) + "
                    "B x next_n x max_seq_len x 4 B of fp32 logits written (kgen writes the -inf columns; the peer "
                    "leaves columns past a row's length unwritten, so the model flatters it slightly)")
PEER_NAME = "deep_gemm.fp8_paged_mqa_logits"
PEER_MAX_NEXT_N = 2  # DeepGEMM's sm_90 kernel


def batch_lens(batch: int, keys: int, dist: str, seed: int, next_n: int = 1) -> list[int]:
    """Sequence lengths (at least next_n: a sequence holds its MTP tokens' keys). One draw for every next_n, so
    that a shape's MTP entries read the keys its next_n 1 entry reads (batch_goals' MTP cost compares them)."""
    rng = random.Random(seed)
    if dist == "equal":
        return [keys] * batch
    if dist == "pm30":
        return [rng.randint(int(0.7 * keys), int(1.3 * keys)) for _ in range(batch)]
    if dist == "uniform":
        return [max(next_n, rng.randint(1, keys)) for _ in range(batch)]
    raise ValueError(f"lengths {dist!r}: equal, pm30 or uniform")


def peer_module():
    """(deep_gemm, None) where it imports, else (None, why)."""
    try:
        import deep_gemm  # noqa: PLC0415 - a measurement peer, built on the GPU machine only
    except Exception as e:  # noqa: BLE001
        return None, f"deep_gemm does not import ({type(e).__name__}: {e})"[:300]
    return deep_gemm, None


def peer_reads(spec: Spec) -> str | None:
    """Why DeepGEMM's sm_90 reader cannot read this variant's pages (None: it can): 64-key pages of
    128 fp8 e4m3 per key, then one fp32 scale per key."""
    lay = L.compute(spec)
    if (spec.store.dtype != "fp8_e4m3" or spec.head_dim != 128 or lay.page_size != 64 or lay.row_bytes != 128
            or lay.scale_unit != 4 or lay.blocks_per_token != 1 or lay.scale_stride != 4
            or lay.scale_region_offset != 64 * 128 or lay.page_bytes != 64 * 132):
        return "the peer reads only 64-key pages of 128 fp8 + an fp32 scale per key"
    return None


def peer_takes(spec: Spec, next_n: int) -> str | None:
    """Why DeepGEMM's reader does not take this variant at next_n (None: it does)."""
    return peer_reads(spec) or (None if next_n <= PEER_MAX_NEXT_N else f"DeepGEMM takes next_n <= {PEER_MAX_NEXT_N}")


def peer_call(dg, spec: Spec, args: tuple, next_n: int):
    """(logits, schedule) for DeepGEMM's fp8_paged_mqa_logits on make_case's `args`: the cache viewed as its
    [pages, page_size, 1, bytes per key], each query row's visible length as kgen.score.visible_lengths counts it,
    its schedule made here once. logits() returns DeepGEMM's output as it is (its rows are wider than max_seq_len:
    its alignment; a caller slices where it reads them, outside what it times); schedule() runs the schedule
    kernel alone."""
    import torch  # noqa: PLC0415 - the GPU side only

    from .score import visible_lengths  # noqa: PLC0415

    q, weights, cache, table, seq_lens, msl = args
    lay = L.compute(spec)
    ctx = visible_lengths(seq_lens, next_n).view(-1, next_n).to(torch.int32).contiguous()
    kv = cache.view(cache.shape[0], lay.page_size, 1, lay.page_bytes // lay.page_size)
    sms = int(dg.get_num_sms())
    meta = dg.get_paged_mqa_logits_metadata(ctx, lay.page_size, sms)

    def logits():
        return dg.fp8_paged_mqa_logits(q, kv, weights, ctx, table, meta, msl, False)

    def schedule():
        return dg.get_paged_mqa_logits_metadata(ctx, lay.page_size, sms)

    return logits, schedule


def peer_info() -> dict:
    dg, why = peer_module()
    if dg is None:
        return {"name": PEER_NAME, "present": False, "why": why}
    return {"name": PEER_NAME, "present": True, "version": str(getattr(dg, "__version__", "?")),
            "file": str(getattr(dg, "__file__", "?")), "num_sms": int(dg.get_num_sms())}


def _abba(timer, how: str, a, b, **kw) -> tuple[dict, dict]:
    """A, B, B, A with `timer.<how>`: each side's two medians and their mean (order effects cancel)."""
    m = getattr(timer, how)
    a1, b1, b2, a2 = m(a, **kw), m(b, **kw), m(b, **kw), m(a, **kw)

    def pair(x, y):
        return {"ms": (x["ms"] + y["ms"]) / 2, "orders_ms": [x["ms"], y["ms"]], "reps": x["reps"]}

    return pair(a1, a2), pair(b1, b2)


def bench_batch(torch, timer, spec: Spec, batch: int, keys: int, dist: str, next_n: int, copy_gbps: float | None,
                *, seed: int = 0, peer=None) -> dict:
    """kgen's reader and (`peer`: deep_gemm, for the layouts and next_n it reads) the peer on the same
    tensors in this process: cold and CUDA-graph times A-B-B-A, the peer's schedule kernel apart, the ratio
    peer / kgen (> 1: kgen faster), and the two outputs' agreement on the visible logits."""
    lens = batch_lens(batch, keys, dist, seed, next_n)
    msl = max(lens)
    args = make_case(spec, lens, next_n=next_n, seed=seed, extra_pages=0, max_seq_len=msl)
    lay = L.compute(spec)
    nbytes = sum(lens) * lay.bytes_per_token + batch * next_n * msl * 4
    launch, logits = launcher(spec, args)
    e: dict[str, Any] = {"variant": spec.name, "store": spec.store.dtype, "batch": batch, "keys": keys,
                         "lengths": dist, "next_n": next_n, "max_seq_len": msl, "total_keys": sum(lens),
                         "bytes": nbytes}
    why = peer_takes(spec, next_n)
    if peer is None or why:
        e["peer"] = {"name": PEER_NAME, "present": False, "why": why or "deep_gemm does not import"}
        e["cold"] = _with_bw(timer.cold(launch, lo=20, hi=60), nbytes, copy_gbps)
        e["graph"] = _with_bw(timer.warm(launch, lo=10, hi=30), nbytes, copy_gbps)
        return e
    run_peer, run_meta = peer_call(peer, spec, args, next_n)
    kc, pc = _abba(timer, "cold", launch, run_peer, lo=20, hi=60)
    kg, pg = _abba(timer, "warm", launch, run_peer, lo=10, hi=30)
    e["cold"], e["graph"] = _with_bw(kc, nbytes, copy_gbps), _with_bw(kg, nbytes, copy_gbps)
    p: dict[str, Any] = {"name": PEER_NAME, "present": True, "cold": _with_bw(pc, nbytes, copy_gbps),
                         "graph": _with_bw(pg, nbytes, copy_gbps)}
    p["schedule"] = {"cold": _with_bw(timer.cold(run_meta, lo=20, hi=40), 0, None),
                     "graph": _with_bw(timer.warm(run_meta, lo=10, hi=20), 0, None)}
    p["speed"] = {"cold": p["cold"]["ms"] / kc["ms"], "graph": p["graph"]["ms"] / kg["ms"],
                  "what": "peer time / kgen time, the peer's schedule kernel not counted (> 1: kgen faster)"}
    # the outputs on the visible logits (the peer's columns past a row's length are not written)
    launch()
    theirs = run_peer()[:, :msl].float()
    torch.cuda.synchronize()
    mine = logits.float()
    vis = torch.isfinite(mine)
    scale = float(mine[vis].abs().max()) if bool(vis.any()) else 1.0
    p["max_difference_of_largest"] = float((mine[vis] - theirs[vis]).abs().max()) / max(scale, 1e-30) if bool(
        vis.any()) else 0.0
    e["peer"] = p
    return e


def bench_batches(specs: list[Spec], shapes=BATCH_SHAPES, *, say=print, timer=None, copy: dict | None = None) -> dict:
    """BATCH_SHAPES of each readable variant; the peer beside the layouts it reads whenever deep_gemm imports
    (the JSON says why it is absent otherwise); issue 20's goals judged from the entries (`goals`: batch_goals)."""
    torch = _torch()
    timer = timer or Timer(torch)
    copy = copy or copy_bandwidth(torch, timer)
    say(f"copy {copy['gbps']:.0f} GB/s")
    dg, _ = peer_module()
    info = peer_info()
    say(f"peer {PEER_NAME}: " + (f"present ({info.get('version')}, {info.get('file')})" if dg else info["why"]))
    data: dict[str, Any] = {"copy": copy, "byte_model": BATCH_BYTE_MODEL, "peer": info, "results": []}
    for spec in specs:
        for b, k, dist, n in shapes:
            try:
                e = bench_batch(torch, timer, spec, b, k, dist, n, copy["gbps"], peer=dg)
            except Exception as ex:  # noqa: BLE001
                e = {"variant": spec.name, "batch": b, "keys": k, "lengths": dist, "next_n": n,
                     "error": f"{type(ex).__name__}: {ex}"[:1000]}
            data["results"].append(e)
            say(batch_line(e))
            torch.cuda.empty_cache()
    data["goals"] = batch_goals(data["results"])
    say(goals_line(data["goals"]))
    return data


# issue 20's goals for the read side's batches (docs/gpu.md, "The read side beside its peer"): fp8 at least the peer's
# speed, 1.2x it where the launch is latency-bound (one sequence, 4K keys, ragged lengths); next_n 2 at most 1.15x
# next_n 1's time on the same keys, next_n 4 at most 1.4x; bf16 at least 0.85 of copy from 32 x 64K keys up; fp4 no
# slower per key than fp8
GOAL_PEER_SPEED, GOAL_PEER_SPEED_LATENCY = 1.0, 1.2
GOAL_MTP_COST = {2: 1.15, 4: 1.4}
GOAL_BF16_COPY, GOAL_BF16_FROM_KEYS = 0.85, 32 * 65536
GOAL_FP4_OVER_FP8 = 1.0
_MODES = ("cold", "graph")


def batch_goals(results: list[dict]) -> dict[str, list[dict]]:
    """Each goal against bench_batches' entries (those without an error), per shape and timing mode: `value`, `goal`,
    `met`. Peer speed also `goal_fraction_of_copy`: the fraction of copy (the entry's byte model) the goal asks of
    kgen, the goal times the peer's own fraction; above 1 cold (keys read from DRAM) no kernel that reads the keys
    meets it. MTP cost: an entry's time over its shape's next_n 1 entry's, `same_keys` false where the two read
    different keys (runs before batch_lens drew one set per shape), then judged per key. fp4 per key: its time over
    fp8's on the same shape."""
    ok = [e for e in results if "error" not in e]
    at = {(e["variant"], e["batch"], e["keys"], e["lengths"], e["next_n"]): e for e in ok}
    store = {e["variant"]: e.get("store") for e in ok}
    out: dict[str, list[dict]] = {"peer_speed": [], "mtp_cost": [], "bf16_fraction_of_copy": [],
                                  "fp4_per_key_over_fp8": []}

    def judged(e: dict, what: dict, goal: float, at_most: bool) -> dict:
        row = {k: e[k] for k in ("variant", "batch", "keys", "lengths", "next_n")} | what | {"goal": goal}
        row["met"] = {m: (v <= goal if at_most else v >= goal) for m, v in what["value"].items()}
        return row

    for (v, b, k, dist, n), e in at.items():
        peer = e.get("peer", {})
        if peer.get("present"):
            goal = GOAL_PEER_SPEED_LATENCY if b == 1 or k <= 4096 or dist != "equal" else GOAL_PEER_SPEED
            what: dict = {"value": {m: peer["speed"][m] for m in _MODES}}
            if "fraction_of_copy" in e["cold"]:
                what["goal_fraction_of_copy"] = {m: goal * e[m]["fraction_of_copy"] / peer["speed"][m]
                                                 for m in _MODES}
            out["peer_speed"].append(judged(e, what, goal, False))
        one = at.get((v, b, k, dist, 1))
        if n in GOAL_MTP_COST and one is not None:
            same = e["total_keys"] == one["total_keys"]
            per = 1.0 if same else one["total_keys"] / e["total_keys"]
            out["mtp_cost"].append(judged(e, {"value": {m: e[m]["ms"] / one[m]["ms"] * per for m in _MODES},
                                              "same_keys": same}, GOAL_MTP_COST[n], True))
        if store.get(v) == "bf16" and b * k >= GOAL_BF16_FROM_KEYS and "fraction_of_copy" in e["cold"]:
            out["bf16_fraction_of_copy"].append(judged(
                e, {"value": {m: e[m]["fraction_of_copy"] for m in _MODES}}, GOAL_BF16_COPY, False))
        if store.get(v) == "fp4_e2m1":
            for w, s in store.items():
                fp8 = at.get((w, b, k, dist, n)) if s == "fp8_e4m3" else None
                if fp8 is not None and fp8["total_keys"] == e["total_keys"]:
                    out["fp4_per_key_over_fp8"].append(judged(
                        e, {"value": {m: e[m]["ms"] / fp8[m]["ms"] for m in _MODES}, "fp8": w}, GOAL_FP4_OVER_FP8,
                        True))
    return out


def goals_line(goals: dict[str, list[dict]]) -> str:
    """How many of each goal's shapes met it, cold and in graphs."""
    parts = []
    for name, judged in goals.items():
        if judged:
            met = [sum(r["met"][m] for r in judged) for m in _MODES]
            part = f"{name} {met[0]} / {met[1]} of {len(judged)}"
            past = sum(r.get("goal_fraction_of_copy", {}).get("cold", 0) > 1 for r in judged)
            parts.append(part + (f" (past copy's speed cold at {past})" if past else ""))
    return "goals met (cold / graph): " + ("; ".join(parts) if parts else "none judged")


def batch_line(e: dict) -> str:
    head = f"{e['variant']:18s} {e['batch']:4d} x {e['keys']:7d} {e['lengths']:7s} n={e['next_n']}"
    if "error" in e:
        return f"{head}  ERROR {e['error']}"
    c, g = e["cold"], e["graph"]
    text = (f"{head}  cold {c['us']:8.1f} us {c.get('fraction_of_copy', 0):5.3f}"
            f"  graph {g['us']:8.1f} us {g.get('fraction_of_copy', 0):5.3f}")
    p = e.get("peer", {})
    if p.get("present"):
        s = p["schedule"]
        text += (f"  | peer {p['cold']['us']:.1f} / {p['graph']['us']:.1f} us: x{p['speed']['cold']:.2f} /"
                 f" x{p['speed']['graph']:.2f} (schedule {s['cold']['us']:.1f} / {s['graph']['us']:.1f} us,"
                 f" diff {p['max_difference_of_largest']:.1e})")
    return text


# ---------------------------------------------------------------------------------------------
# whole runs (kgen test / kgen bench call these for the readable variants)


def sample_readable(k: int, seed: int = 0) -> list[Spec]:
    """K random specs the validator accepts and the reader can read (kgen.sample's sampler)."""
    out: list[Spec] = []
    n = 4 * k
    while len(out) < k and n <= 64 * k:
        out = [s for s in sample_specs(n, seed) if readable(s)][:k]
        n *= 2
    return out


def test_specs(specs: list[Spec], *, seed: int = 0, quick: bool = False, say=print, tune: dict | None = None,
               cases: tuple | None = None) -> list[LogitsResult]:
    """Every correctness case of every spec (quick: three cases each; `cases`: those indices). A kernel
    fault stops the run (the CUDA context is lost) and is reported as the failing case."""
    results = []
    for spec in specs:
        all_cases = correctness_cases(spec, seed)
        # quick (sampled specs): ragged lengths at next_n 1, 2 and 4
        picked = [all_cases[i] for i in (cases if cases is not None else (0, 3, 6) if quick else range(len(all_cases)))]
        for lens, next_n in picked:
            name = f"B={len(lens)} next_n={next_n} lens={_lens_text(lens)}" + (f" tune={tune}" if tune else "")
            try:
                r = run_case(spec, lens, next_n=next_n, seed=seed, name=name, tune=tune)
            except Exception as e:  # noqa: BLE001 - reported per case
                r = LogitsResult(spec.name, name, ok=False, reason=f"{type(e).__name__}: {e}"[:2000])
                results.append(r)
                say(_line(r))
                if "CUDA" in r.reason or "cuda" in r.reason:
                    return results
                continue
            results.append(r)
            say(_line(r))
    return results


def _line(r: LogitsResult) -> str:
    status = "ok  " if r.ok else "FAIL"
    return (f"{status} {r.variant:28s} {r.case:44s} err {r.relative_error:.2e} top-{TOPK} diff {r.topk_mismatches}"
            f" (near-ties {r.near_ties}) rows {r.rows_compared}" + (f"  {r.reason}" if r.reason else ""))


TUNE_CASES = (2, 3)  # the cases an alternative tuning runs by default: 70000 keys, a ragged MTP batch
PAIR_CASES = (3, 4, 5, 6)  # the pair cubin's: ragged lengths at next_n 2, 4, 3, and 40 sequences at next_n 4


def test_readers(specs: list[Spec], sampled: list[Spec], *, seed: int = 0, say=print, tunes: tuple = (),
                 tune_cases: tuple | None = TUNE_CASES) -> list[LogitsResult | TopkResult]:
    """`kgen test`'s read side: every correctness case of each readable variant given, three cases (ragged
    lengths at next_n 1, 2, 4) of each readable sampled spec, and each alternative tuning of `tunes`
    (kgen.reader_layout.READER_TUNING_DEFAULTS overrides; `kgen test --reader-tune`) on the `tune_cases` of
    each variant (None: every case)."""
    mine = [s for s in specs if readable(s)]
    samples = [s for s in sampled if readable(s)]
    if not mine and not samples:
        return []
    alternatives = [t for t in tunes if t]
    # the pair cubin (two MTP tokens per m64n128 group) where a variant has one: no launch shape loads it by
    # default, so its MTP cases run here
    # and its register split (a producer warpgroup at few registers, three consumer warpgroups at many)
    pairs = [(s, f(L.compute(s))) for s in mine for f in (RP.reader_wg_pair_tuning, RP.reader_wg_split_tuning)]
    pairs = [(s, t) for s, t in pairs if RL.reader_wg_pairs(L.compute(s), t)
             and (not t.get("kReaderWgSplit") or RL.reader_wg_split(L.compute(s), t))]
    say(f"kgen test: indexer_logits on {len(mine)} variant(s) and {len(samples)} sampled spec(s)"
        + (f", {len(alternatives)} alternative tuning(s)" if alternatives else ""))
    precompile([(s, None) for s in mine + samples] + [(s, t) for s in mine for t in alternatives] + pairs, say=say)
    res = test_specs(mine, seed=seed, say=say) + test_specs(samples, seed=seed, quick=True, say=say)
    for spec, tune in pairs:
        res += test_specs([spec], seed=seed, say=say, tune=tune, cases=PAIR_CASES)
    for tune in alternatives:
        res += test_specs(mine, seed=seed, say=say, tune=tune, cases=tune_cases)
    say(f"kgen test: indexer_logits {sum(r.ok for r in res)}/{len(res)} case(s) ok")
    top = test_topk(mine, seed=seed, say=say)
    say(f"kgen test: indexer_topk {sum(r.ok for r in top)}/{len(top)} case(s) ok")
    return [*res, *top]  # both kinds have ok and to_json()


def bench_readers(specs: list[Spec], timer, copy: dict, *, say=print, tunes: tuple = (None,),
                  shapes: tuple | None = None) -> dict:
    """`kgen bench`'s read side. By default BATCH_SHAPES (batches as engines run them: ragged lengths,
    MTP) for each readable variant given, the peer beside the fp8 layout it reads (bench_batches); with
    `shapes` or alternative `tunes` (`kgen bench --reader-tune`), those equal-length shapes with each
    tuning side by side (bench_specs)."""
    mine = [s for s in specs if readable(s)]
    if not mine:
        return {"results": []}
    precompile([(s, t) for s in mine for t in tunes], say=say)
    if shapes is None and tuple(tunes) == (None,):
        return bench_batches(mine, timer=timer, copy=copy, say=say)
    return bench_specs(mine, shapes or BENCH_SHAPES, timer=timer, copy=copy, say=say, tunes=tunes)


def profile_readers(specs: list[Spec], shapes: tuple, *, say=print) -> list[str]:
    """`kgen bench --profile`: one launch per (readable variant, shape) after a warm-up launch, nothing
    timed: what `ncu -c` attaches to. Returns what it launched."""
    torch = _torch()
    mine = [s for s in specs if readable(s)]
    precompile([(s, None) for s in mine], say=say)
    profiled = []
    for spec in mine:
        for b, k in shapes:
            args = make_case(spec, [k] * b, extra_pages=0, max_seq_len=k)
            launch, _ = launcher(spec, args)
            torch.cuda.synchronize()
            launch()
            torch.cuda.synchronize()
            profiled.append(f"{spec.name} {b}x{k}")
            say(f"profiled {spec.name} {b} x {k}")
    return profiled


def bench_specs(specs: list[Spec], shapes=BENCH_SHAPES, *, torch_path_shapes=((1, 65536), (32, 65536)),
                say=print, tunes: tuple = (None,), timer=None, copy: dict | None = None) -> dict:
    torch = _torch()

    timer = timer or Timer(torch)
    copy = copy or copy_bandwidth(torch, timer)
    say(f"copy {copy['gbps']:.0f} GB/s")
    data: dict[str, Any] = {"copy": copy, "byte_model": BYTE_MODEL, "results": []}
    for spec in specs:
        for b, k in shapes:
            try:
                es = bench_case(torch, timer, spec, b, k, copy["gbps"], tunes=tunes,
                                torch_path=(b, k) in torch_path_shapes)
            except Exception as ex:  # noqa: BLE001
                es = [{"variant": spec.name, "batch": b, "keys": k, "error": f"{type(ex).__name__}: {ex}"[:1000]}]
            for e in es:
                data["results"].append(e)
                say(bench_line(e))
            torch.cuda.empty_cache()
    return data


def bench_line(e: dict) -> str:
    if "error" in e:
        return f"{e['variant']:22s} {e['batch']:4d} x {e['keys']:6d}  ERROR {e['error']}"
    c, g = e["cold"], e["graph"]
    tune = e.get("tune", "default")
    tune = tune if isinstance(tune, str) else ",".join(f"{k.removeprefix('kReader')}={v}" for k, v in tune.items())
    text = (f"{e['variant']:18s} {tune:30s} {e['batch']:4d} x {e['keys']:6d}"
            f"  cold {c['us']:8.1f} us {c.get('fraction_of_copy', 0):5.3f}"
            f"  graph {g['us']:8.1f} us {g.get('fraction_of_copy', 0):5.3f}")
    if "deepgemm_fp8_us" in e:
        p = e["deepgemm_fp8_us"]
        text += (f"  | DeepGEMM fp8 {p['cold']:.1f} / {p['graph']:.1f} us:"
                 f" x{p['cold'] / c['us']:.2f} / x{p['graph'] / g['us']:.2f}")
    if "torch_path" in e:
        t = e["torch_path"]
        text += f"  | torch path {t['us']:.0f} us" if "us" in t else f"  | torch path ERROR {t['error']}"
    return text


def precompile(jobs: list[tuple[Spec, dict | None]], say=print) -> None:
    """Render every (spec, tuning) serially, then NVRTC-compile the cache misses in threads."""
    import time
    from concurrent.futures import ThreadPoolExecutor


    t0 = time.perf_counter()
    info = device_info()
    major, minor = (int(x) for x in info["capability"].split("."))
    cap = (major, minor)
    jobs = [(s, t2) for s, t in jobs for t2 in ring_tunes(s, t)]
    rendered = [(render_reader(s, tune=t), check_arch(cap, list(s.targets), variant=s.name)) for s, t in jobs]

    def one(job):
        try:
            compile_rendered(job[0], job[1], progress=None)
            return None
        except Exception as e:  # noqa: BLE001 - reported again by the case that needs it
            return f"{job[0].uri}: {e}"[:300]

    with ThreadPoolExecutor(max_workers=16) as ex:
        errors = [e for e in ex.map(one, rendered) if e]
    say(f"precompiled {len(rendered)} readers in {time.perf_counter() - t0:.1f} s ({len(errors)} failed)")
    for e in errors[:5]:
        say(f"  {e}")


# ---------------------------------------------------------------------------------------------
# the top-k (torch.ops.kgen.indexer_topk): correctness against kgen.score.topk_reference (its speed beside the
# engines' top-ks: kgen.topk_bench)

TOPK_KS = (512, 2048)


@dataclass
class TopkResult:
    variant: str
    case: str
    ok: bool
    k: int = 0
    rows: int = 0
    rows_differing: int = 0  # rows whose set differs from the reference's (must be 0)
    slots_rows_differing: int = 0  # rows where indexer_topk_slots' set is not the reference's slots (must be 0)
    ties: int = 0  # keys outside the selected that share a row's k-th logit (where the tie rule decides)
    torch_topk_differences: int = 0  # keys where torch.topk's set differs from the reference's (ties only)
    reason: str = ""
    examples: list = field(default_factory=list)

    def to_json(self) -> dict:
        return {"kind": "indexer_topk", **asdict(self)}


def topk_cases(spec: Spec, seed: int = 0) -> list[tuple[list[int], int, int]]:
    """(seq_lens, next_n, k) per case: rows shorter and longer than k (the -1 padding), ragged, MTP 1..4."""
    rng = random.Random(seed)
    return [
        ([1, 511, 512, 513, 2047, 2049, 5000], 1, 512),
        ([70000, 3000], 2, 512),
        ([rng.randint(1, 20000) for _ in range(5)], 3, 2048),
        ([1, 2, 2050, 9000], 4, 2048),
        ([70000], 1, 2048),
    ]


def run_topk_case(spec: Spec, seq_lens: list[int], *, next_n: int, k: int, seed: int = 0) -> TopkResult:
    """The op on one case: its indices against the reference top-k of the reader's own logits (the same
    kernel's), indexer_topk_slots' slots against the reference's through the block table, and torch.topk's
    against the reference (they may differ only at ties)."""
    torch = _torch()
    from .ops import indexer_logits, indexer_topk, indexer_topk_slots
    from .score import same_sets, topk_reference, topk_slots, topk_ties, visible_lengths

    args = make_case(spec, seq_lens, next_n=next_n, seed=seed)
    name = f"B={len(seq_lens)} next_n={next_n} k={k} lens={_lens_text(seq_lens)}"
    q, weights, cache, table, lens, msl = args
    got = indexer_topk(spec, q, weights, cache, table, lens, msl, k).cpu()
    slots = indexer_topk_slots(spec, q, weights, cache, table, lens, msl, k).cpu()
    logits = indexer_logits(spec, q, weights, cache, table, lens, msl).cpu()
    torch.cuda.synchronize()
    want = topk_reference(logits, args[4].cpu(), next_n, k)
    r = TopkResult(spec.name, name, ok=False, k=k, rows=int(want.shape[0]))
    bad = same_sets(got, want)
    r.rows_differing = len(bad)
    r.ties = int(topk_ties(logits, args[4].cpu(), next_n, k).sum())
    vis = visible_lengths(args[4].cpu(), next_n)
    for row in range(want.shape[0]):
        n = int(vis[row])
        if n > k:
            t = set(torch.topk(logits[row, :n], k).indices.tolist())
            r.torch_topk_differences += len(t ^ set(want[row].tolist()))
    for row in bad[:4]:
        g, w = set(got[row].tolist()), set(want[row].tolist())
        r.examples.append({"row": row, "kernel_only": sorted(g - w)[:8], "reference_only": sorted(w - g)[:8]})
    r.slots_rows_differing = len(same_sets(slots, topk_slots(want, table.cpu(), next_n, spec.layout.page_size)))
    r.ok = not bad and not r.slots_rows_differing
    r.reason = "; ".join(
        ([f"{len(bad)} row(s) select another set than the reference"] if bad else [])
        + ([f"{r.slots_rows_differing} row(s) of slots differ from the reference's"] if r.slots_rows_differing
           else []))
    return r


def test_topk(specs: list[Spec], *, seed: int = 0, say=print) -> list[TopkResult]:
    """`kgen test`'s top-k: every topk_cases case of each readable variant given."""
    out = []
    for spec in specs:
        for lens, next_n, k in topk_cases(spec, seed):
            try:
                r = run_topk_case(spec, lens, next_n=next_n, k=k, seed=seed)
            except Exception as e:  # noqa: BLE001 - reported per case
                r = TopkResult(spec.name, f"B={len(lens)} next_n={next_n} k={k}", ok=False,
                               reason=f"{type(e).__name__}: {e}"[:2000])
            out.append(r)
            say(f"{'ok  ' if r.ok else 'FAIL'} {r.variant:28s} top-k {r.case:52s} rows {r.rows} ties {r.ties} "
                f"torch.topk diff {r.torch_topk_differences}" + (f"  {r.reason}" if r.reason else ""))
            if not r.ok and "CUDA" in r.reason:
                return out
    return out
