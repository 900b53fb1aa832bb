"""`kgen recall`: what top-k recall an indexer-key store format costs, measured before deploying it.

For every indexer-key variant of the given specs (families expand; latent-KV variants are listed as
skipped, with the reason) and every context length S (keys of one sequence):

1. **Keys.** S rows are written through the variant exactly as an engine writes them: its CUDA kernel
   (`kgen.ops`) on a GPU, the Torch reference on CPU (the same bytes: `kgen test` checks that), into
   a paged cache. The read side's Torch path (`kgen.score`) decodes the pages and scores them.
2. **Full precision.** The same rows through the same norm, RoPE and Hadamard, in fp32 and never
   rounded to the format (`kgen.reference.prequant` without the bf16 round trip), scored the same way.
3. **Scores** are `sum_h w_h * relu(q_h . k)` over H heads, in float64 for both (so the only
   difference between the two is the keys' format, and CPU and GPU give the same numbers), with the
   same fp32 queries and weights for both.
4. **Metrics**, per variant and context:
   - top-k agreement: |top-k(variant) n top-k(full precision)| / k per query, keys tied with the k-th score
     counted by value (`topk_hits`); mean, spread (std) and minimum over the queries;
   - needle recall: the fraction of planted needles the variant's top-k still holds (below);
   - score error: rms and max of (variant - full) in units of the query's full-precision score
     spread (std over keys), and max |error| / max |score|;
   - the top-k stage (`selection`): each selection an engine runs on the variant's scores rounded to
     fp32 (what the reader writes): kgen's `torch.ops.kgen.indexer_topk_logits` (the kernel on a GPU, its
     Torch reference on CPU; variants the reader reads), torch.topk and, where its kit builds on an sm_90
     GPU, SGLang's top-k (`load_selection_peer`; the report's `peers` says why it is absent), each as its
     agreement with full precision's top-k (what the format and the selection cost together) and with the
     exact top-k of the same fp32 scores (what the selection alone costs: 1.0 for an exact selection,
     whatever its tie rule).

Key model (synthetic keys): the writer's input rows are `kgen.inputs.sample_rows`, the model the
GPU tests use: Gaussian values, per-token magnitudes over about two decades (exp(U(-2.5, 2))), and
head_dim/64 outlier channels scaled 10..60x for every token; norm weight 1 +- 0.1 (bias 0 +- 0.1),
RoPE at positions 0..S-1 with a theta-10000 table, then the spec's own Hadamard. The norm removes
the per-token magnitudes again (as in a real indexer); what reaches the quantizer is the channel
structure: a few dominant channels without Hadamard, spread over all 128 with it.

Query model: H heads (default 64, DeepSeek's indexer) of isotropic Gaussian q, rotated by the
spec's Hadamard like the keys (a real engine rotates q and k alike), and per-head weights
N(0, 1/H), signed like a real indexer's. Queries stay in full precision (fp32 draws, the needle aim
in float64): the format question is about keys.

Needles: for query j a depth d_j is drawn uniformly from [0, S); the key already there becomes the
needle (so it has exactly the statistics of the other keys) and the query is aimed at it: its heads
with positive weight get `beta * |q_h| * k_d / |k_d|` added, with beta solved (float64 root finding)
so that the needle's full-precision score exceeds the k-th best score of all other keys by
`margin` standard deviations of those scores. The full-precision top-k therefore holds every
needle; a needle is found when the variant's top-k also holds it. The margin (default 0.1) sets how
close to the top-k boundary the needle sits: a fact that barely makes the cut, where a format's
errors decide.

Where synthetic keys may differ from real ones: real indexer keys carry learned structure (a shared
direction across tokens, per-channel scales from the trained norm weight, correlations with the
queries' own outlier channels, RoPE phases that matter for relative position), and real score
distributions can be more crowded near the top-k boundary than Gaussian ones: then a format's
errors cost more than they do here. `--keys FILE` runs the same measurement on keys captured from a
real model, which is the answer for a real deployment.

`--keys FILE` (safetensors or torch .pt): `keys` [N, head_dim] (a bare tensor in a .pt file is the
keys), optional `queries` [Q, H, head_dim] and `weights` [Q, H]. Keys and queries are taken after
the norm and RoPE and before the Hadamard rotation (the model's own k and q): kgen applies the
spec's Hadamard to both and writes the keys through the variant's store alone (the same spec with
norm none and no RoPE, fp32 input). Context S uses the first S keys; S defaults to the standard
contexts up to N, and N.
"""

from __future__ import annotations

import json
import math
import re
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .diagnostics import KgenError, Problem, err, failure_json, print_json
from .files import check_target, write_all, write_atomic
from .gpurun import precompile
from .layout import compute
from .peer_sglang import PeerAbsent, peer_enabled
from .peer_sglang_topk import MAX_TOPK as SGLANG_MAX_TOPK
from .peer_sglang_topk import NAME as SGLANG_TOPK
from .peer_sglang_topk import Peer as SglangTopk
from .peer_sglang_topk import padded_scores
from .reader_layout import readable
from .recall_keys import keys_file_rows, load_keys_file
from .rules import check_variant
from .runtime import gpu_problem, torch_or_none
from .spec import Spec
from .validate import validate_paths

DEFAULT_CONTEXTS_GPU = (4096, 16384, 65536, 262144, 1048576)
DEFAULT_CONTEXTS_CPU = (4096, 16384, 65536)
DEFAULT_TOPK = 512
DEFAULT_QUERIES = 32
DEFAULT_HEADS = 64
DEFAULT_MARGIN = 0.1
NEEDLE_RETRIES = 3
LATENT_HEAD_DIM = 512  # DeepSeek's attention latent (kv_lora_rank); its indexer keys are 128 wide
# the top-k stages (selection_stages) in the table's order, each with its name there
STAGES = (("kgen.indexer_topk", "kgen"), ("torch.topk", "torch.topk"), (SGLANG_TOPK, "SGLang"))

Logits = Callable[[Any, Any], Any]  # (q [M, H, D], weights [M, H]) -> float64 [M, S]


def _problem(rule: str, message: str) -> Problem:
    return Problem(rule, message, file=Path("kgen recall"))  # printed "kgen recall: error[rule]: message"


def _usage(message: str) -> KgenError:
    return KgenError([_problem("recall-usage", message)], exit_code=2)


# ---------------------------------------------------------------------------------------------
# which variants are indexer keys


def indexer_key_reason(spec: Spec) -> str | None:
    """None if the variant stores indexer keys (what the DSA indexer scores), else why not."""
    if spec.store.rope_dtype is not None:
        return (f"a packed attention latent (RoPE dims kept as {spec.store.rope_dtype}): read by the attention "
                "kernel, not scored by the indexer")
    if spec.head_dim >= LATENT_HEAD_DIM:
        return (f"head_dim {spec.head_dim}: an attention latent KV row (indexer keys are {LATENT_HEAD_DIM // 4} "
                "wide in DeepSeek V3.2/V4)")
    return None


def hadamard_twin(spec: Spec) -> Spec:
    """The same variant with its Hadamard setting flipped (for `--toggle-hadamard`)."""
    suffix = "_nohadamard" if spec.hadamard else "_hadamard"
    return spec.model_copy(update={"name": (spec.name + suffix)[:64], "hadamard": not spec.hadamard,
                                   "description": f"{spec.description} (Hadamard {'off' if spec.hadamard else 'on'})"})


def store_twin(spec: Spec) -> Spec:
    """The variant's store alone: fp32 input rows go straight to its (Hadamard and) quantizer."""
    norm = spec.norm.model_copy(update={"kind": "none"})
    rope = spec.rope.model_copy(update={"dim": 0})
    return spec.model_copy(update={"name": (spec.name + "_store")[:64], "input_dtype": "fp32", "norm": norm,
                                   "rope": rope, "host": None})


@dataclass
class Selection:
    variants: list[tuple[Spec, str]] = field(default_factory=list)  # (spec, the path it came from)
    skipped: list[dict] = field(default_factory=list)


def select(paths: list[Path], toggle_hadamard: bool = False) -> Selection:
    """Every variant of every path, validated (KgenError with every error otherwise), split into
    indexer keys and skipped ones."""

    found = validate_paths(paths)
    sel, problems = Selection(), list(found.problems)
    seen: dict[str, Spec] = {}
    for r in found.results:
        path = r.path
        for c in r.variants:
            other = seen.setdefault(c.spec.name, c.spec)
            if other is not c.spec:
                if other == c.spec:  # the same variant twice (a file and a family holding it): once
                    continue
                problems.append(_problem("recall-duplicate", f"two different variants are named '{c.spec.name}' "
                                         f"({path} and an earlier path): the report could not tell them apart"))
                continue
            reason = indexer_key_reason(c.spec)
            if reason is not None:
                sel.skipped.append({"variant": c.spec.name, "path": str(path), "reason": reason})
                continue
            sel.variants.append((c.spec, str(path)))
            if toggle_hadamard:
                twin = hadamard_twin(c.spec)
                errors = [p for p in check_variant(twin)[1] if p.severity == "error"]
                if errors:
                    sel.skipped.append({"variant": twin.name, "path": str(path),
                                        "reason": "; ".join(p.message for p in errors)})
                else:
                    sel.variants.append((twin, str(path)))
    if problems:
        raise KgenError(problems, exit_code=max(1, found.exit_code))
    return sel


# ---------------------------------------------------------------------------------------------
# the method: queries, needles, comparison (device-agnostic; float64)


def draw_queries(g, count: int, heads: int, head_dim: int):
    """(q fp32 [count, heads, head_dim], weights fp32 [count, heads]) on CPU, from generator g."""
    import torch

    q = torch.randn(count, heads, head_dim, generator=g)
    w = torch.randn(count, heads, generator=g) / math.sqrt(heads)
    return q, w


class _Needle:
    """One needle query's scores as a function of beta, for the key at depth d (float64 tensors):
    A = q_h . k_s [H, S] for the base query, b = unit(k_d) . k_s [S], c_h = |q_h|. Heads with positive
    weight get beta * c_h * unit(k_d) added, so key s scores
        f_s(beta) = sum_h w_h * relu(A_hs + [w_h > 0] * beta * c_h * b_s).
    As relu(y + t) lies between relu(y) + min(t, 0) and relu(y) + max(t, 0), for any x
        f_s(x) + W * min((beta - x) * b_s, 0)  <=  f_s(beta)  <=  f_s(x) + W * max((beta - x) * b_s, 0)
    with W = sum_{w_h > 0} w_h c_h: O(S) bounds that find a bracket, and that drop, as the bracket
    narrows, every key that cannot be among the k best anywhere inside it."""

    def __init__(self, A, b, w, c, d: int, k: int, margin: float):
        import torch

        self.pos = w > 0
        self.b, self.w, self.c, self.d, self.k = b, w, c, d, k
        self.W = float((w[self.pos] * c[self.pos]).sum())
        self.Ad = A[:, d].clone()
        self.fixed = w[~self.pos] @ A[~self.pos].clamp(min=0)  # heads the aim leaves alone
        self.Ap, self.wp, self.cp = A[self.pos], w[self.pos], c[self.pos]
        self.f0 = self.fixed + self.wp @ self.Ap.clamp(min=0)
        crowd = torch.ones(A.shape[1], dtype=torch.bool, device=A.device)
        crowd[d] = False
        self.others = crowd.nonzero()[:, 0]
        self.sigma = float(self.f0[self.others].std())
        self.target = margin * self.sigma

    def needle(self, beta: float) -> float:
        return float((self.w * (self.Ad + self.pos * (beta * self.c * self.b[self.d])).clamp(min=0)).sum())

    def subset(self, idx=None) -> tuple:
        """(A of the positive heads, b, fixed part) of the keys idx (default: every other key)."""
        idx = self.others if idx is None else idx
        return self.Ap[:, idx], self.b[idx], self.fixed[idx]

    def scores(self, sub: tuple, beta: float):
        """Exact f(beta) of a subset's keys."""
        Ap, b, fixed = sub
        return fixed + self.wp @ (Ap + (beta * self.cp)[:, None] * b[None, :]).clamp_(min=0)

    def kth(self, f) -> float:
        import torch

        return float(torch.topk(f, self.k).values[-1])

    def bound_gap(self, beta: float, upper_others: bool) -> float:
        """G(beta) with every other key at its upper (a lower bound of G) or lower bound, around x = 0."""
        t = (beta * self.b[self.others])
        f = self.f0[self.others] + self.W * (t.clamp(min=0) if upper_others else t.clamp(max=0))
        return self.needle(beta) - self.kth(f) - self.target

    def prune(self, sub: tuple, f_x, x: float, lo: float, hi: float) -> tuple:
        """The subset's keys (scores f_x at x) that can be among the k best for some beta in [lo, hi],
        and their scores at x."""
        import torch

        b = sub[1]
        d_lo, d_hi = (lo - x) * b, (hi - x) * b
        up = f_x + self.W * torch.maximum(d_lo, d_hi).clamp(min=0)
        down = f_x + self.W * torch.minimum(d_lo, d_hi).clamp(max=0)
        keep = up >= self.kth(down)
        if int(keep.sum()) > 0.8 * keep.numel():  # not worth a copy: extra keys change nothing
            return sub, f_x
        return tuple(t[..., keep] for t in sub), f_x[keep]


def _solve(nd: _Needle, max_doublings: int = 60, max_steps: int = 100) -> float | None:
    """A beta with 0 <= G(beta) <= 1e-4 sigma, G(beta) = needle score - k-th best other score -
    margin * sigma: a bracket by doubling on the O(S) bounds, then Illinois false position on the
    exact scores of the keys that can still matter; None when no bracket exists."""
    tol = 1e-4 * nd.sigma
    f = nd.f0[nd.others]
    g0 = nd.needle(0.0) - nd.kth(f) - nd.target
    if 0 <= g0 <= tol:
        return 0.0
    up = g0 < 0  # the needle must rise (beta > 0) or sink (beta < 0)
    step, near, far = 0.25, 0.0, None
    for _ in range(max_doublings):
        x = step if up else -step
        if (nd.bound_gap(x, True) >= 0) if up else (nd.bound_gap(x, False) < 0):
            far = x
            break
        if (nd.bound_gap(x, False) < 0) if up else (nd.bound_gap(x, True) >= 0):
            near = x  # still surely on g0's side: the bracket starts here
        step *= 2
    if far is None:
        return None
    sub, _ = nd.prune(nd.subset(), f, 0.0, min(near, far), max(near, far))
    ends = []
    for x in (near, far):
        f = nd.scores(sub, x)
        ends.append((x, nd.needle(x) - nd.kth(f) - nd.target, f))
    (neg, fneg, _), (pos, fpos, f) = sorted(ends, key=lambda e: e[1])
    x = pos
    if fneg >= 0 or fpos < 0:  # the bounds promised a sign change
        return None
    side, width = 0, abs(pos - neg)
    for _ in range(max_steps):
        if fpos <= tol:
            break
        sub, f = nd.prune(sub, f, x, min(neg, pos), max(neg, pos))
        x = (neg * fpos - pos * fneg) / (fpos - fneg)
        if not min(neg, pos) < x < max(neg, pos) or abs(pos - neg) > 0.5 * width:
            x = 0.5 * (neg + pos)  # the last step did not halve the bracket: bisect
        width = abs(pos - neg)
        f = nd.scores(sub, x)
        fx = nd.needle(x) - nd.kth(f) - nd.target
        if fx >= 0:
            pos, fpos = x, fx
            if side == 1:
                fneg *= 0.5
            side = 1
        else:
            neg, fneg = x, fx
            if side == -1:
                fpos *= 0.5
            side = -1
    return pos


def plant_needles(keys, base_q, weights, positions, topk: int, margin: float, *, max_doublings: int = 60,
                  max_steps: int = 100):
    """Aim each query at the key at its depth (module docstring). keys [S, D] (any float),
    base_q [Q, H, D], weights [Q, H], positions [Q] -> (q float64 [Q, H, D], placed bool [Q],
    sigma float64 [Q]: the std of the other keys' scores under the base query, the margin's unit).
    A needle that cannot be placed (no positive-weight head, or another key so aligned with it that
    no beta lifts it above the rest) keeps its base query and placed = False."""
    import torch

    if keys.device.type == "cpu":  # hundreds of small ops per needle: a thread pool only costs here
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            return _plant(keys, base_q, weights, positions, topk, margin, max_doublings, max_steps)
        finally:
            torch.set_num_threads(threads)
    return _plant(keys, base_q, weights, positions, topk, margin, max_doublings, max_steps)


def _plant(keys, base_q, weights, positions, topk: int, margin: float, max_doublings: int, max_steps: int):
    import torch

    acc = torch.float64
    kd = keys.to(acc)
    S = kd.shape[0]
    Q = base_q.shape[0]
    out = base_q.to(acc).clone()
    placed = torch.zeros(Q, dtype=torch.bool)
    sigma = torch.full((Q,), float("nan"), dtype=acc)
    for j in range(Q):
        d = int(positions[j])
        w = weights[j].to(device=kd.device, dtype=acc)
        if not bool((w > 0).any()) or topk >= S:
            continue
        g = out[j]
        unit = kd[d] / kd[d].norm()
        c = g.norm(dim=1)
        nd = _Needle(g @ kd.T, kd @ unit, w, c, d, topk, margin)
        sigma[j] = nd.sigma
        beta = _solve(nd, max_doublings, max_steps)
        if beta is None:
            continue
        pos = w > 0
        out[j, pos] = g[pos] + (beta * c[pos])[:, None] * unit
        placed[j] = True
    return out, placed, sigma


def topk_hits(scores, picked, topk: int):
    """Per row of `scores` [Q, S], the fraction of the top-k that `picked` [Q, topk] (key indices, -1 for none)
    holds, ties counted by value: a picked key above the k-th largest score is a hit, and so is one equal to it,
    up to the places the top-k leaves for such keys (k - the count above). Every exact selection scores 1.0
    whatever its tie rule (kgen's lower index, torch.topk's own order); for distinct scores it is the set
    overlap |picked n top-k| / k."""
    import torch

    kth = torch.topk(scores, topk, dim=1).values[:, -1:]
    seen = picked >= 0
    safe = picked.clamp(min=0)
    picked_scores = scores.gather(1, safe)
    above = ((picked_scores > kth) & seen).sum(1)
    tied = ((picked_scores == kth) & seen).sum(1)
    room = topk - (scores > kth).sum(1)
    return (above + torch.minimum(tied, room)).double() / topk


def compare(ref_a, var_a, ref_n, var_n, positions, placed, sigma, topk: int,
            selections: dict[str, Callable] | None = None) -> dict:
    """The metrics of one (variant, context): ref_a/var_a [Q, S] scores of the agreement queries,
    ref_n/var_n [Qn, S] of the needle queries, positions [Qn] their needles' depths, placed [Qn],
    sigma [Qn] the margin's unit (`plant_needles`). `selections`: the top-k stages to measure, each
    fp32 logits [Q, S] -> int [Q, topk] key indices (`selection_stages`)."""
    import torch

    Q = ref_a.shape[0]
    dev = ref_a.device
    agree = topk_hits(ref_a, torch.topk(var_a, topk, dim=1).indices, topk)
    # the top-k stage: each selection over the variant's scores rounded to fp32 (what a reader writes), against
    # full precision's top-k (format + selection) and against the exact top-k of those same fp32 scores (selection)
    stages: dict[str, dict] = {}
    if selections:
        logits = var_a.float()
        for name, select in selections.items():
            try:
                picked = select(logits).to(device=dev, dtype=torch.int64)
            except StageFailed as e:  # a peer's own checks refused the call: said in the report, the run goes on
                stages[name] = {"failed": str(e)}
                continue
            stages[name] = {
                "agreement": float(topk_hits(ref_a, picked, topk).mean()),
                "agreement_with_exact_selection": float(topk_hits(logits, picked, topk).mean()),
            }

    error = var_a - ref_a
    spread = ref_a.std(dim=1)
    rms_sigma = error.pow(2).mean(1).sqrt() / spread
    max_sigma = error.abs().amax(1) / spread

    pos = positions.to(dev)
    ok = placed.to(dev)
    rows = torch.arange(len(pos), device=dev)
    found_r = (torch.topk(ref_n, topk, dim=1).indices == pos[:, None]).any(1) & ok
    found_v = (torch.topk(var_n, topk, dim=1).indices == pos[:, None]).any(1) & ok
    others = ref_n.clone()
    others[rows, pos] = float("-inf")
    kth = torch.topk(others, topk, dim=1).values[:, -1]
    actual = (ref_n[rows, pos] - kth) / sigma.to(dev)
    n_placed = int(ok.sum())
    return {
        "agreement": float(agree.mean()),
        "agreement_std": float(agree.std()) if Q > 1 else 0.0,
        "agreement_min": float(agree.min()),
        "needle_recall": float(found_v.sum()) / n_placed if n_placed else None,
        "needles": n_placed,
        "needle_recall_full_precision": float(found_r.sum()) / n_placed if n_placed else None,
        "needle_margin_actual": float(actual[ok].mean()) if n_placed else None,
        "score_error_rms_sigma": float(rms_sigma.mean()),
        "score_error_max_sigma": float(max_sigma.max()),
        "score_error_max_rel": float(error.abs().max() / ref_a.abs().max()),
        "selection": stages,
    }


def selection_stages(spec: Spec, topk: int, peer: Any = None) -> dict[str, Callable]:
    """The top-k stages `kgen recall` measures for `spec`: torch.topk on the fp32 scores, kgen's
    (torch.ops.kgen.indexer_topk_logits: the kernel on a GPU, its Torch reference on CPU) where the
    reader reads the spec, and SGLang's top-k where `peer` (load_selection_peer) is loaded."""
    import torch

    stages: dict[str, Callable] = {"torch.topk": lambda lg: torch.topk(lg, topk, dim=1).indices}
    full = lambda lg: torch.full((lg.shape[0],), lg.shape[1], dtype=torch.int32, device=lg.device)  # noqa: E731
    if readable(spec):
        from .ops import indexer_topk_logits

        stages["kgen.indexer_topk"] = lambda lg: indexer_topk_logits(spec, lg.contiguous(), full(lg), topk)
    if peer is not None:
        def sglang_topk(lg):  # rows of a stride SGLang reads (whole 16-B groups), each row all visible
            try:
                return peer.topk(padded_scores(torch, lg.contiguous()), full(lg), topk)
            except (RuntimeError, ValueError) as e:
                raise StageFailed(f"{SGLANG_TOPK}: {e}") from None

        stages[SGLANG_TOPK] = sglang_topk
    return stages


class StageFailed(Exception):
    """A peer's top-k refused a call (its own checks): compare reports the stage as failed and goes on."""


def load_selection_peer(topk: int, device: str) -> tuple[Any, dict]:
    """SGLang's top-k for the selection stage, where it runs (kgen.peer_sglang_topk: its kit built on an sm_90
    GPU, as `kgen bench` loads it): (the peer or None, what the report says of it: SGLang's version and the
    occupancy answers its build took, or why it is absent)."""
    def absent(why: str) -> tuple[Any, dict]:
        return None, {"name": SGLANG_TOPK, "present": False, "absent": why}

    if not peer_enabled():
        return absent("disabled (KGEN_BENCH_PEER=0)")
    if device != "cuda":
        return absent("the run is on the CPU")
    if topk > SGLANG_MAX_TOPK:
        return absent(f"--topk {topk} is past its largest k, {SGLANG_MAX_TOPK}")
    err("kgen recall: loading SGLang's top-k for the selection stage (built from its kit the first time)")
    try:
        peer = SglangTopk.load()
    except PeerAbsent as e:
        return absent(str(e))
    return peer, peer.record()


# ---------------------------------------------------------------------------------------------
# inputs


@dataclass
class Inputs:
    """What one context's keys are made of (CPU tensors, drawn once, shared by every variant)."""

    rows: Any  # fp32 [S, D]: the writer's input rows (synthetic) or the user's keys
    weight: Any  # fp32 [D] norm weight
    bias: Any  # fp32 [D]
    user_keys: bool


def synthetic_inputs(S: int, head_dim: int, seed: int) -> Inputs:
    import torch

    from .inputs import sample_rows

    g = torch.Generator().manual_seed(_seed(seed, S, 1))
    rows = sample_rows(S, head_dim, g)
    weight = 1.0 + 0.1 * torch.randn(head_dim, generator=g)
    bias = 0.1 * torch.randn(head_dim, generator=g)
    return Inputs(rows, weight, bias, user_keys=False)


def _seed(seed: int, S: int, what: int) -> int:
    return (seed * 1_000_003 + S * 31 + what) % (2**63)


def writer_args(spec: Spec, inp: Inputs, device) -> dict:
    """Keyword arguments of norm_rope_store (everything but the cache) for this spec."""
    import torch

    from .inputs import _INPUT, rope_freqs

    S = inp.rows.shape[0]
    dt = _INPUT[spec.input_dtype]
    kind = spec.norm.kind
    r = spec.rope.dim
    return {
        "x": inp.rows.to(dt).to(device),
        "weight": None if kind == "none" else inp.weight.to(dt).to(device),
        "bias": inp.bias.to(dt).to(device) if kind == "layernorm" else None,
        "freqs": rope_freqs(S, r, device=device) if r > 0 else None,
        "positions": torch.arange(S, dtype=torch.int64, device=device) if r > 0 else None,
        "out_loc": torch.arange(S, dtype=torch.int64, device=device),
    }


def full_precision_keys(spec: Spec, args: dict):
    """fp32 [S, D]: the values the quantizer would see, without the format's bf16 round trip."""
    from .reference import prequant

    exact = spec.model_copy(update={"store": spec.store.model_copy(update={"bf16_roundtrip": False})})
    return prequant(exact, args["x"], args["weight"], args["bias"], args["freqs"], args["positions"])


def write_cache(spec: Spec, args: dict, on_gpu: bool):
    """The paged cache (uint8 [pages, page_bytes]) after writing all S keys through the variant."""
    import torch


    lay = compute(spec)
    S = args["x"].shape[0]
    pages = -(-S // lay.page_size)
    cache = torch.zeros((pages, lay.page_bytes), dtype=torch.uint8, device=args["x"].device)
    if on_gpu:
        from .ops import norm_rope_store

        norm_rope_store(spec, args["x"], args["weight"], args["bias"], args["freqs"], args["positions"],
                        args["out_loc"], cache)
    else:
        from .reference import norm_rope_store as ref_store

        ref_store(spec, args["x"], args["weight"], args["bias"], args["freqs"], args["positions"],
                  args["out_loc"], cache)
    return cache


# ---------------------------------------------------------------------------------------------
# one context, one group of variants sharing their pre-quantization pipeline


@dataclass
class Settings:
    contexts: list[int]
    topk: int = DEFAULT_TOPK
    queries: int = DEFAULT_QUERIES
    heads: int = DEFAULT_HEADS
    margin: float = DEFAULT_MARGIN
    seed: int = 0
    device: str = "cpu"
    keys_file: Path | None = None


def _group_key(spec: Spec) -> str:
    return json.dumps([spec.head_dim, spec.input_dtype, spec.norm.model_dump(), spec.rope.model_dump(),
                       spec.hadamard], sort_keys=True)


def _step(specs: list[Spec], rows: int, heads: int) -> int:
    """One chunk size for the full-precision and every variant's scoring (so identical keys give
    identical bits): the score module's rule, for the largest page, rounded to whole pages."""
    import torch

    from .score import key_chunk

    lays = [compute(s) for s in specs]
    P = max(lay.page_size for lay in lays)
    step = min(key_chunk(lay, rows, heads, torch.float64) for lay in lays)
    return max(P, step // P * P)


def measure(variants: list[Spec], settings: Settings, *, progress: Callable[[str], None] | None = None,
            reference: Spec | None = None, user: dict | None = None, results: list[dict] | None = None,
            peer: Any = None) -> list[dict]:
    """Every (variant, context) result, appended to `results` (if given) as each is measured, so an
    interrupted run keeps what it measured. `reference`: compare with this variant's scores instead
    of full precision (it must share the variants' norm/RoPE/Hadamard). `user`: the `--keys` tensors."""
    import torch

    from .reference import hadamard as rotate
    from .score import dense_logits, sequence_logits

    say = progress or (lambda _t: None)
    dev = torch.device(settings.device)
    on_gpu = dev.type == "cuda"
    acc = torch.float64
    k = settings.topk
    groups: dict[str, list[Spec]] = {}
    for s in variants:
        groups.setdefault(_group_key(s), []).append(s)
    results = [] if results is None else results
    for S in settings.contexts:
        drawn: dict[int, Inputs] = {}  # one draw per head_dim: every pipeline sees the same rows
        for members in groups.values():
            spec0 = members[0]
            D = spec0.head_dim
            t0 = time.perf_counter()
            if user is not None:
                inp = Inputs(user["keys"][:S].float(), torch.ones(D), torch.zeros(D), user_keys=True)
                writers = {s.name: store_twin(s) for s in members}
            else:
                inp = drawn[D] = drawn.get(D) or synthetic_inputs(S, D, settings.seed)
                writers = {s.name: s for s in members}
            ref_writer = store_twin(reference) if (reference is not None and user is not None) else reference
            wspec0 = writers[spec0.name]
            args = writer_args(wspec0, inp, dev)
            if ref_writer is None:
                K = full_precision_keys(wspec0, args)
            else:
                rcache = write_cache(ref_writer, writer_args(ref_writer, inp, dev), on_gpu)
                from .score import gather_keys

                K = gather_keys(ref_writer, rcache, torch.arange(rcache.shape[0], device=dev), S, dtype=acc)
                del rcache

            g = torch.Generator().manual_seed(_seed(settings.seed, S, 2))
            if user is not None and user.get("queries") is not None:
                qa, wa = user["queries"].float(), user["weights"].float()
            else:
                qa, wa = draw_queries(g, settings.queries, settings.heads, D)
            n_needles = qa.shape[0] if user is not None and user.get("queries") is not None else settings.queries
            qn_base, wn = (qa, wa) if user is not None and user.get("queries") is not None else \
                draw_queries(g, n_needles, settings.heads, D)
            positions = torch.randperm(S, generator=g)[:n_needles]
            if spec0.hadamard:
                qa, qn_base = rotate(qa), rotate(qn_base)
            qa, wa, qn_base, wn = (t.to(dev) for t in (qa, wa, qn_base, wn))
            na = qa.shape[0]
            step = _step(list(writers.values()) + ([ref_writer] if ref_writer is not None else []),
                         na + qn_base.shape[0], qa.shape[1])

            qn, placed, sigma = plant_needles(K, qn_base, wn, positions, k, settings.margin)
            for _ in range(NEEDLE_RETRIES):  # a needle no query can single out: another depth
                miss = (~placed).nonzero()[:, 0]
                if not len(miss):
                    break
                positions[miss] = torch.randint(0, S, (len(miss),), generator=g)
                q2, p2, s2 = plant_needles(K, qn_base[miss.to(dev)], wn[miss.to(dev)], positions[miss], k,
                                           settings.margin)
                qn[miss.to(dev)], placed[miss], sigma[miss] = q2, p2, s2
            # agreement and needle queries in one pass: the keys are decoded once per variant
            q_all, w_all = torch.cat((qa.to(acc), qn)), torch.cat((wa, wn))
            ref = dense_logits(q_all, w_all, K, accum=acc, chunk_keys=step)
            del K
            say(f"kgen recall: {S} keys, {len(members)} variant(s) sharing {spec0.name}'s pipeline: full precision "
                f"and {int(placed.sum())}/{len(placed)} needles in {time.perf_counter() - t0:.1f} s")
            for spec in members:
                t1 = time.perf_counter()
                wspec = writers[spec.name]
                cache = write_cache(wspec, args, on_gpu)  # a group shares input dtype, norm and RoPE
                pages = torch.arange(cache.shape[0], device=dev)
                var = sequence_logits(wspec, q_all, w_all, cache, pages, S, accum=acc, chunk_keys=step)
                del cache
                m = compare(ref[:na], var[:na], ref[na:], var[na:], positions, placed, sigma, k,
                            selection_stages(spec, k, peer))
                del var
                lay = compute(spec)
                st = spec.store
                row = {"variant": spec.name, "context": S, "topk": k, **m,
                       "store": st.dtype + ("" if st.scale == "none" else f" + {st.scale} scale per {lay.block}"),
                       "hadamard": spec.hadamard, "bytes_per_token": lay.bytes_per_token,
                       "queries": int(qa.shape[0]), "seconds": round(time.perf_counter() - t1, 3)}
                results.append(row)
                say(f"kgen recall: {spec.name} @ {S}: agreement {m['agreement']:.4f}, needles "
                    f"{_fmt_recall(m['needle_recall'])} ({row['seconds']:.1f} s)")
            del ref
            if on_gpu:
                torch.cuda.empty_cache()
    return results


def _fmt_recall(v) -> str:
    return "-" if v is None else f"{v:.3f}"


# ---------------------------------------------------------------------------------------------
# the command


def parse_contexts(text: str) -> list[int]:
    """'4096,16K,1M' -> [4096, 16384, 1048576] (K = 1024, M = 1024^2)."""
    out = []
    for part in text.split(","):
        m = re.fullmatch(r"\s*(\d+)\s*([kKmM]?)\s*", part)
        if not m:
            raise _usage(f"--contexts: '{part}' is not a key count (e.g. 4096, 64K, 1M)")
        n = int(m.group(1)) * {"": 1, "k": 1024, "m": 1024 * 1024}[m.group(2).lower()]
        if n <= 0:
            raise _usage(f"--contexts: {part.strip()} must be positive")
        out.append(n)
    return out


def recall_command(paths: list[Path], *, contexts: str | None = None, topk: int = DEFAULT_TOPK,
                   queries: int = DEFAULT_QUERIES, heads: int = DEFAULT_HEADS, margin: float = DEFAULT_MARGIN,
                   seed: int = 0, keys: Path | None = None, as_json: bool = False, plot: Path | None = None,
                   device: str = "auto", toggle_hadamard: bool = False) -> int:
    """`kgen recall`; returns the exit code (KgenError for user errors: with `--json` to stdout, the
    error document is printed there too)."""
    json_to_stdout = as_json and not any(Path(p).suffix == ".json" for p in paths)
    try:
        return _recall(paths, contexts=contexts, topk=topk, queries=queries, heads=heads, margin=margin, seed=seed,
                       keys=keys, as_json=as_json, plot=plot, device=device, toggle_hadamard=toggle_hadamard)
    except KgenError as e:
        if json_to_stdout:
            print_json(failure_json(e.problems, results=[]))
        raise


def _check_output(out: Path, what: str) -> None:
    """Before any work: `out` is a regular file kgen may replace (or a new one in a directory)."""
    try:
        check_target(out)
    except OSError as e:
        raise _usage(f"{what} {out}: {e.strerror or e}") from None
    if not Path(out).parent.is_dir():
        raise _usage(f"{out}: its directory does not exist")


def peak_bytes(context: int, queries: int, heads: int, head_dim: int) -> int:
    """About the most memory one context's measurement holds at once (`measure`): the rows, the
    full-precision keys (fp32, and fp64 gathered), [2Q, S] fp64 scores of the reference and a variant
    with their top-k and error temporaries, the cache, the queries in fp64."""
    return context * (head_dim * 16 + 64 * queries + 512) + 32 * queries * heads * head_dim


def memory_budget(device: str) -> int:
    import os

    if device == "cuda":
        import torch

        return int(torch.cuda.get_device_properties(0).total_memory)
    return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def _recall(paths: list[Path], *, contexts: str | None, topk: int, queries: int, heads: int, margin: float,
            seed: int, keys: Path | None, as_json: bool, plot: Path | None, device: str,
            toggle_hadamard: bool) -> int:
    json_file = None
    if as_json:  # `--json FILE.json` writes there; a .json path is never a spec
        outs = [p for p in paths if Path(p).suffix == ".json"]
        if len(outs) > 1:
            raise _usage(f"--json: one output file, got {', '.join(map(str, outs))}")
        if outs:
            json_file = Path(outs[0])
            paths = [p for p in paths if Path(p).suffix != ".json"]
    if not paths:
        raise _usage("give spec or family paths")
    if topk < 1 or queries < 1 or heads < 1:
        raise _usage("--topk, --queries and --heads must be at least 1")
    if not math.isfinite(margin):
        raise _usage("--margin must be finite")
    if device not in ("auto", "cpu", "cuda"):
        raise _usage(f"--device: auto, cpu or cuda, got '{device}'")
    for out, what in ((json_file, "--json"), (plot, "--plot")):
        if out is not None:
            _check_output(Path(out), what)
    if plot is not None:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            raise _usage("--plot needs matplotlib (pip install matplotlib)") from None

    ctx = parse_contexts(contexts) if contexts is not None else None
    if ctx is not None and min(ctx) <= topk:
        raise _usage(f"--contexts: {min(ctx)} keys is not more than --topk {topk}")
    sel = select(paths, toggle_hadamard)
    if not sel.variants:
        names = ", ".join(s["variant"] for s in sel.skipped) or "none"
        raise KgenError([_problem("recall-nothing", f"no indexer-key variant to measure (skipped: {names})")])
    dims = {s.head_dim for s, _ in sel.variants}

    if torch_or_none() is None:
        raise _usage("kgen recall needs torch (pip install 'kgen[torch]')")
    reason = gpu_problem()
    if device == "cuda" and reason is not None:
        raise KgenError([_problem("no-gpu", f"no GPU: {reason}")], exit_code=2)
    dev = "cuda" if device == "cuda" or (device == "auto" and reason is None) else "cpu"

    n_keys = None
    if keys is not None:
        if len(dims) > 1:
            raise _usage(f"--keys: the variants have several head_dims ({sorted(dims)}); give one")
        n_keys = keys_file_rows(Path(keys))
    if ctx is None:
        base = DEFAULT_CONTEXTS_GPU if dev == "cuda" else DEFAULT_CONTEXTS_CPU
        ctx = list(base) if n_keys is None else sorted({c for c in base if c < n_keys} | {n_keys})
    if n_keys is not None and max(ctx) > n_keys:
        raise _usage(f"--contexts: {max(ctx)} keys asked, {keys} holds {n_keys}")
    small = [c for c in ctx if c <= topk]
    if small:
        raise _usage(f"--contexts: {small[0]} keys is not more than --topk {topk}")
    user = None
    if keys is not None:  # only the keys the largest context uses are read
        user = load_keys_file(Path(keys), next(iter(dims)), rows=max(ctx))
        if user["queries"] is not None:
            queries, heads = int(user["queries"].shape[0]), int(user["queries"].shape[1])
    need, have = peak_bytes(max(ctx), queries, heads, max(dims)), memory_budget(dev)
    if need > 0.75 * have:
        raise _usage(f"{max(ctx)} keys x {queries} queries x {heads} heads need about {need / 2**30:.1f} GiB, "
                     f"more than this {'GPU' if dev == 'cuda' else 'machine'} has ({have / 2**30:.1f} GiB): lower "
                     "--contexts, --queries or --heads")

    specs = [s for s, _ in sel.variants]
    if dev == "cuda":
        _precompile(specs if user is None else [store_twin(s) for s in specs])
    peer, peer_record = load_selection_peer(topk, dev)
    settings = Settings(contexts=ctx, topk=topk, queries=queries, heads=heads, margin=margin, seed=seed,
                        device=dev, keys_file=Path(keys) if keys else None)
    t0 = time.perf_counter()
    rows: list[dict] = []
    interrupted = False
    try:
        measure(specs, settings, progress=err, user=user, results=rows, peer=peer)
    except KeyboardInterrupt:  # e.g. `timeout -s INT`: report what was measured
        interrupted = True
        err("kgen recall: interrupted; reporting what was measured")
    path_of = {s.name: p for s, p in sel.variants}
    for r in rows:
        r["path"] = path_of.get(r["variant"])
    data = finite_or_null(report(rows, sel, settings, time.perf_counter() - t0, peers=[peer_record]))
    if interrupted:
        data["interrupted"] = True

    outputs: dict[Path, str | bytes] = {}
    if json_file is not None:
        outputs[json_file] = json.dumps(data, indent=2, allow_nan=False) + "\n"
    if plot is not None:
        outputs[Path(plot)] = plot_png(data)
    if outputs:

        try:
            write_all(outputs)  # the JSON and the PNG, both or neither
        except OSError as e:
            raise KgenError([_problem("recall-write", f"cannot write {e.filename}: {e.strerror or e}; nothing "
                                      "was written")]) from None
    if as_json and json_file is None:
        print(json.dumps(data, indent=2, allow_nan=False))
        print_table(data, sys.stderr)
    else:
        print_table(data, sys.stdout)
    return 1 if interrupted else 0


def finite_or_null(value):
    """The report with every NaN or infinity as None (JSON null): a degenerate input (all keys
    equal, a zero query) gives undefined score errors, and strict JSON has no NaN."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: finite_or_null(v) for k, v in value.items()}
    if isinstance(value, list):
        return [finite_or_null(v) for v in value]
    return value


def _precompile(specs: list[Spec]) -> None:

    errors = precompile(specs)
    if errors:
        raise KgenError([Problem("compile", f"{name}: {msg}") for name, msg in errors.items()])


def report(rows: list[dict], sel: Selection, st: Settings, seconds: float, *, peers: Sequence[dict] = ()) -> dict:
    """The JSON object (docs/recall.md); `peers`: what load_selection_peer said of each peer selection."""
    import torch

    env: dict = {"torch": torch.__version__, "device": st.device,
                 "command": " ".join(["kgen", *sys.argv[1:]]) if sys.argv and "kgen" in sys.argv[0] else None}
    if st.device == "cuda":
        env["gpu"] = torch.cuda.get_device_name()
    return {
        "results": rows,
        "skipped": sel.skipped,
        "inputs": {
            "keys": str(st.keys_file) if st.keys_file else "synthetic",
            "key_model": None if st.keys_file else (
                "kgen.inputs.sample_rows: Gaussian rows x per-token magnitude exp(U(-2.5, 2)), head_dim/64 "
                "outlier channels x U(10, 60); norm weight 1 +- 0.1, bias 0 +- 0.1; RoPE at positions 0..S-1; "
                "the spec's Hadamard"),
            "query_model": f"{st.heads} heads of isotropic Gaussian q (rotated like the keys), weights N(0, 1/H), fp32",
            "needles": f"one per needle query at a uniform depth; the query is aimed at the key there so that its "
                       f"full-precision score beats the k-th best other key by {st.margin} std of the other scores",
            "contexts": st.contexts, "topk": st.topk, "queries": st.queries, "heads": st.heads,
            "margin": st.margin, "seed": st.seed, "scores": "float64, both sides; keys decoded exactly",
        },
        "peers": list(peers),
        "environment": env,
        "seconds": round(seconds, 1),
    }


def print_table(data: dict, stream) -> None:
    from rich.console import Console
    from rich.table import Table

    t = Table(title=f"kgen recall: top-{data['inputs']['topk']} against full precision "
                    f"({data['inputs']['keys']} keys, {data['environment']['device']})")
    shown = [(n, label) for n, label in STAGES if any(n in (r.get("selection") or {}) for r in data["results"])]
    names = [n for n, _ in shown]
    stage_col = "top-k stage: " + (" / ".join(label for _, label in shown) or "-")
    for col in ("variant", "B/token", "keys", "agreement (mean +- std, min)", "needle recall",
                "score err (rms / max, std)", stage_col):
        t.add_column(col, justify="left" if col == "variant" else "right", no_wrap=col == "variant")
    def num(v, digits: int) -> str:
        return "-" if v is None else f"{v:.{digits}f}"

    for r in data["results"]:
        t.add_row(r["variant"], str(r["bytes_per_token"]), _ctx(r["context"]),
                  f"{num(r['agreement'], 4)} +- {num(r['agreement_std'], 4)}, {num(r['agreement_min'], 4)}",
                  "-" if r["needle_recall"] is None else f"{r['needle_recall']:.3f} of {r['needles']}",
                  f"{num(r['score_error_rms_sigma'], 4)} / {num(r['score_error_max_sigma'], 3)}",
                  _stages(r.get("selection") or {}, names))
    console = Console(file=stream, width=max(140, Console(file=stream).width))
    console.print(t)
    for s in data["skipped"]:
        console.print(f"skipped {s['variant']} ({s['path']}): {s['reason']}")


def _stages(sel: dict, names: list[str]) -> str:
    """The top-k stages' agreement with full precision (format + selection), in the order of `names`."""
    return " / ".join(f"{sel[n]['agreement']:.4f}" if "agreement" in sel.get(n, {}) else "-" for n in names) or "-"


def _ctx(n: int) -> str:
    if n % (1 << 20) == 0:
        return f"{n >> 20}M"
    if n % 1024 == 0:
        return f"{n >> 10}K"
    return str(n)


def write_plot(data: dict, path: Path) -> None:
    """`plot_png` of a report (e.g. a `--json` file's contents) written to `path`."""

    write_atomic(path, plot_png(data))


def plot_png(data: dict) -> bytes:
    """Agreement (mean, shaded +- std) and needle recall against context, one line per variant."""
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    by: dict[str, list[dict]] = {}
    for r in data["results"]:
        by.setdefault(r["variant"], []).append(r)
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.5))
    colors: dict[str, Any] = {}  # a variant and its Hadamard twin share a colour; no Hadamard is dashed
    cycle = iter(plt.rcParams["axes.prop_cycle"].by_key()["color"] * 4)
    for name, rs in by.items():
        rs = sorted(rs, key=lambda r: r["context"])
        x = [r["context"] for r in rs]
        label = f"{name} ({rs[0]['bytes_per_token']} B/token)"
        base = name.removesuffix("_nohadamard").removesuffix("_hadamard")
        color = colors.setdefault(base, next(cycle))
        style = {"color": color, "marker": "o", "linestyle": "-" if rs[0].get("hadamard", True) else "--"}
        mean = [r["agreement"] for r in rs]
        std = [r["agreement_std"] for r in rs]
        ax1.plot(x, mean, label=label, **style)
        ax1.fill_between(x, [m - s for m, s in zip(mean, std)], [min(1.0, m + s) for m, s in zip(mean, std)],
                         color=color, alpha=0.12)
        ax2.plot(x, [float("nan") if r["needle_recall"] is None else r["needle_recall"] for r in rs], label=label,
                 **style)
    k = data["inputs"]["topk"]
    for ax, title in ((ax1, f"top-{k} agreement with full precision"),
                      (ax2, f"needle recall in top-{k} (margin {data['inputs']['margin']} std)")):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("context (keys)")
        ax.set_title(title)
        ax.grid(True, alpha=0.3)
        ticks = sorted({r["context"] for r in data["results"]})
        ax.set_xticks(ticks, [_ctx(t) for t in ticks])
    ax2.set_ylim(-0.02, 1.02)
    ax1.legend(fontsize=8, loc="lower left")
    fig.suptitle(f"kgen recall ({data['inputs']['keys']} keys, {data['environment']['device']})")
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=120)
    plt.close(fig)
    return buf.getvalue()
