"""`kgen bench`'s top-k rows: torch.ops.kgen.indexer_topk beside the fastest top-ks an engine ships, in one
process on the same tensors (issue 21).

Per shape (B x keys, k, lengths equal or +-30 %, next_n; rows = B * next_n, row j of a sequence of length L sees
L - next_n + 1 + j keys) the reader's logits once, then on those logits
  kgen_select              kgen's top-k kernel alone (kgen.ops.topk.prepare_select)
  kgen_select_slots        its twin that writes cache slots through the block table (indexer_topk_slots' kernel)
  torch.topk               torch.topk(logits, k)
  sglang_topk              SGLang 0.5.23's TopKKernel<true>::transform_paged, no page table (raw indices), its plan
                           made outside the timing (kgen.peer_sglang_topk)
  sglang_plan              SGLang's TopKKernel<true>::plan alone, where it launches anything (rows beyond SGLang's
                           cluster pool; SGLang plans once per step, before the scorer)
  sglang_topk_slots        sglang_topk with its page table (the block table, a row per query row): cache slots, the
                           peer of kgen_select_slots
and the whole step (scores and top-k)
  kgen                     torch.ops.kgen.indexer_topk's two kernels (reader, then top-k with PDL)
  kgen_slots               torch.ops.kgen.indexer_topk_slots' two kernels (the top-k's output: cache slots)
  kgen_reader+X            kgen's reader then X (X = torch.topk, sglang_topk)
  deepgemm+X               deep_gemm.fp8_paged_mqa_logits then X (fp8 keys, next_n <= 2, where deep_gemm imports)
cold (L2 flushed) and in CUDA graphs (kgen.timing.Timer). A row that is not measured is in the entry's `absent`
with the reason: its peer absent (no kit, no nvcc, no GPU, KGEN_BENCH_PEER=0), a layout or next_n the peer does
not take, or its first call failed (every row is called once before any timing, so a failing one is named, never
fatal). Ratios only between rows of one entry (`ratios`). kgen's, kgen_select's and SGLang's index sets are
checked against torch.topk's on the same logits (`set_check`); kgen's slots against kgen.score.topk_slots of
kgen_select's indices (`slots_check`: the rows whose slot sets differ).

reader_check holds the read side's cases and the DeepGEMM plumbing this module calls; it imports nothing from
here (kgen.bench runs the top-k after the reader's batches), so the import graph stays one-way.
"""

from __future__ import annotations

import time
from typing import Any

from . import peer_sglang_topk as P
from . import reader_check as RC
from .gpurun import sticky
from .layout import compute as compute_layout
from .peer_sglang import peer_enabled
from .reader_layout import readable
from .runtime import device_facts
from .spec import Spec
from .timing import Timer

TOPK_BENCH_SHAPES = tuple((b, keys) for b in (1, 8, 32, 64) for keys in (4096, 65536, 262144))
TOPK_BENCH_WHAT = __doc__.split("\n\n")[1] if __doc__ else ""

SELECTS = ("torch.topk", "sglang_topk")  # the standalone top-ks kgen_select is compared with
READER_ROWS = ("kgen_reader+torch.topk", "kgen_reader+sglang_topk")
DEEPGEMM_ROWS = ("deepgemm+torch.topk", "deepgemm+sglang_topk")
SGLANG_ROWS = ("sglang_topk", "sglang_plan", "kgen_reader+sglang_topk", "deepgemm+sglang_topk", "sglang_topk_slots")
SLOTS_ROWS = ("kgen_slots", "kgen_select_slots", "sglang_topk_slots")  # the selection as cache slots
ROWS = ("kgen", "kgen_select", *SELECTS, "sglang_plan", *READER_ROWS, *DEEPGEMM_ROWS, *SLOTS_ROWS)
TIMINGS = (("cold", {"lo": 10, "hi": 30}), ("graph", {"lo": 10, "hi": 20}))
# issue 21's goals: the fused op's time at most this fraction of the unfused step it is judged against: DeepGEMM's
# logits + the fastest top-k for fp8 keys (`deepgemm_fastest`), kgen's own reader + it for bf16 and fp4 keys
GOAL_FP8, GOAL_OTHER = 0.6, 0.7
BYTE_MODEL = ("floor_bytes: every sequence's keys read once (layout.bytes_per_token each, whatever next_n) and the "
              "int32 indices written (rows x k x 4 B): what any fused step moves; floor_us: those bytes at the run's "
              "copy bandwidth (copy.gbps, bytes read + written per second: the practical limit the writer's "
              "fraction of copy uses). logits_bytes: the fp32 rows an unfused step writes and its top-k reads "
              "(rows x max_seq_len x 4 B, each way), which a fused step need not move. Per timing mode: goal_us "
              "(the goal's fraction of its base row's time), goal_over_floor (< 1: the goal asks for less time than "
              "reading the keys once takes at copy speed, so no kernel that reads them can meet it where they come "
              "from memory: cold, or keys_exceed_l2) and kgen_over_floor. q, weights and the block table are not "
              "counted.")
_IMPORT = object()  # bench_topk's default: DeepGEMM as reader_check.peer_module finds it


class PeerState:
    """SGLang's top-k, built and loaded once per run (its occupancy probe on the device, then nvcc), or why it is
    absent. `peer`: one already loaded (a script's, or a test's stand-in with Peer's prepare / launch / record)."""

    def __init__(self, enabled: bool = True, peer=None):
        self.peer = peer
        self.why: str | None = None if peer is not None else "disabled (KGEN_BENCH_PEER=0)"
        self.load_s: float | None = None
        if peer is not None or not enabled:
            return
        t0 = time.perf_counter()
        try:
            self.peer, self.why = P.Peer.load(), None
        except P.PeerAbsent as e:
            self.why = str(e)[:1500]
        except Exception as e:  # noqa: BLE001 - a peer that fails to load is recorded, never fatal
            self.why = f"{type(e).__name__}: {e}"[:500]
        self.load_s = round(time.perf_counter() - t0, 1)

    def record(self) -> dict:
        rec: dict[str, Any] = {"name": P.NAME, "present": self.peer is not None, "why": self.why,
                               "kit": str(P.kit_dir())}
        if self.peer is not None:
            rec.update(self.peer.record())
        if self.load_s is not None:
            rec["load_s"] = self.load_s
        return rec


def deepgemm_record(dg, why: str | None) -> dict:
    if dg is None:
        return {"name": RC.PEER_NAME, "present": False, "why": why}
    return {"name": RC.PEER_NAME, "present": True, "version": str(getattr(dg, "__version__", "?")),
            "file": str(getattr(dg, "__file__", "?"))}


# ---------------------------------------------------------------------------------------------
# pure: ratios and set checks (tests/test_topk_bench.py runs them on given numbers)


def _fastest(t: dict, names) -> str | None:
    here = [n for n in names if isinstance(t.get(n), float)]
    return min(here, key=t.__getitem__) if here else None


def ratios(t: dict) -> dict:
    """From one timing mode's {row: us}: kgen / the fastest unfused step (`fastest_peer`: every kgen_reader+X and
    deepgemm+X row), kgen / the fastest deepgemm+X and / the fastest kgen_reader+X (issue 21's bf16 / fp4 goal is
    judged by this one: kgen's own reader, the same keys), kgen_select / the fastest standalone top-k, kgen_slots /
    kgen (what the slots cost), kgen_select_slots / SGLang's top-k with its page table. A ratio whose rows are
    absent is left out."""
    out: dict[str, Any] = {}
    for base, fastest_key, ratio_key, names in (
            ("kgen", "fastest_peer", "ratio_kgen_to_fastest_peer", READER_ROWS + DEEPGEMM_ROWS),
            ("kgen", "deepgemm_fastest", "ratio_kgen_to_deepgemm_fastest", DEEPGEMM_ROWS),
            ("kgen", "reader_fastest", "ratio_kgen_to_reader_fastest", READER_ROWS),
            ("kgen_select", "select_fastest_peer", "ratio_kgen_select_to_fastest", SELECTS),
            ("kgen_slots", "slots_base", "ratio_kgen_slots_to_kgen", ("kgen",)),
            ("kgen_select_slots", "slots_peer", "ratio_kgen_select_slots_to_sglang", ("sglang_topk_slots",))):
        best = _fastest(t, names)
        if best is not None and isinstance(t.get(base), float):
            out[fastest_key], out[ratio_key] = best, t[base] / t[best]
    return out


def floor_record(bytes_per_token: int, lens, rows: int, k: int, max_seq_len: int, copy_gbps: float | None,
                 l2_bytes: int | None = None) -> dict:
    """BYTE_MODEL's bytes of one shape (sequence lengths `lens`, `rows` query rows) and, given the run's copy
    bandwidth, the time moving them takes at copy speed; given the device's L2 size, whether the keys exceed it
    (`keys_exceed_l2`: then a graph's replays read them from memory too, and the floor binds warm as it does cold)."""
    keys = sum(int(n) for n in lens) * int(bytes_per_token)
    out: dict[str, Any] = {"floor_bytes": keys + int(rows) * int(k) * 4, "key_bytes": keys,
                           "logits_bytes": int(rows) * int(max_seq_len) * 4}
    if copy_gbps:
        out["floor_us"] = out["floor_bytes"] / (float(copy_gbps) * 1e3)
    if l2_bytes:
        out["keys_exceed_l2"] = keys > int(l2_bytes)
    return out


_GOAL_KEYS = frozenset(("goal", "goal_us", "goal_over_floor", "kgen_over_floor"))


def goal_record(t: dict, store: str, floor_us: float | None) -> dict:
    """One timing mode's goal (issue 21): its base row (`deepgemm_fastest` for fp8 keys, else `reader_fastest`, as
    `ratios` names them in `t`), goal_us, and against the byte floor goal_over_floor and kgen_over_floor. Empty where
    the base row did not run."""
    fp8 = store == "fp8_e4m3"
    base, goal = ("deepgemm_fastest", GOAL_FP8) if fp8 else ("reader_fastest", GOAL_OTHER)
    row = t.get(base)
    if not isinstance(row, str) or not isinstance(t.get(row), float):
        return {}
    out: dict[str, Any] = {"goal": goal, "goal_base": row, "goal_us": goal * t[row]}
    if floor_us:
        out["goal_over_floor"] = out["goal_us"] / floor_us
        if isinstance(t.get("kgen"), float):
            out["kgen_over_floor"] = t["kgen"] / floor_us
    return out


def set_check(got, want_values, want_indices, logits, vis) -> dict:
    """A top-k's int32 [rows, k] `got` against torch.topk's (values, indices) on the same fp32 `logits`, `vis`
    each row's visible length (all CPU tensors). Rows longer than k: the rows whose set differs from torch.topk's,
    and of those the rows where it differs beyond ties (a key in one set and not the other whose logit is not the
    row's k-th value, an index out of [0, L), a repeated index); short rows: exactly 0..L-1 then -1, any order."""
    k = got.shape[1]
    out: dict[str, Any] = {"rows_checked": 0, "rows_differing": 0, "rows_differing_beyond_ties": 0,
                           "keys_swapped": 0, "short_rows": 0, "short_rows_wrong": 0, "examples": []}
    for r in range(got.shape[0]):
        n, mine = int(vis[r]), got[r].tolist()
        if n <= k:
            out["short_rows"] += 1
            out["short_rows_wrong"] += int(sorted(mine) != [-1] * (k - n) + list(range(n)))
            continue
        out["rows_checked"] += 1
        chosen, theirs = set(mine), set(want_indices[r].tolist())
        if chosen == theirs and len(chosen) == k:
            continue
        out["rows_differing"] += 1
        out["keys_swapped"] += len(chosen - theirs)
        kth, row = float(want_values[r].min()), logits[r]
        ties = len(chosen) == k and all(0 <= i < n and float(row[i]) == kth for i in chosen ^ theirs)
        if not ties:
            out["rows_differing_beyond_ties"] += 1
            if len(out["examples"]) < 4:
                out["examples"].append({"row": r, "only_here": sorted(chosen - theirs)[:8],
                                        "only_torch": sorted(theirs - chosen)[:8], "kth": kth})
    return out


# ---------------------------------------------------------------------------------------------
# one shape


def _sglang_rows(torch, peer, logits, vis, k: int, reader, rows: dict, absent: dict, e: dict, paged=None):
    """SGLang's rows on the reader's logits (`reader` writes `logits`, rows 16-B strided where it can:
    aligned_reader): (plan, select, indices, metadata, slots), or None with every SGLang row in `absent`. The plan
    is made here, outside every timing, as SGLang makes it once per step. `paged` (page table, page size): the
    sglang_topk_slots row too, its output `slots` (else None)."""
    scores = P.padded_scores(torch, logits)
    e["sglang_scores"] = "the logits" if scores is logits else f"a copy, rows padded to {scores.stride(0)}"
    plan, select, indices, meta = peer.prepare(scores, vis, k)
    meta.fill_(-1)
    plan()
    torch.cuda.synchronize()
    # SGLang's own test of a written plan: a plan that launched nothing leaves the metadata as it was
    e["sglang_plan_written"] = bool(int(meta[0, 1]) != -1)
    if not e["sglang_plan_written"]:
        meta.zero_()  # what SGLang's top-k reads where no plan was made
        absent["sglang_plan"] = "launches nothing at this row count (SGLang plans only for its cluster pool)"
    else:
        rows["sglang_plan"] = plan
    rows["sglang_topk"] = select
    slots = None
    if paged is not None:  # (the block table a row per query row, the page size): the slots, on the same plan
        _, rows["sglang_topk_slots"], slots, slots_meta = peer.prepare(scores, vis, k, page_table=paged[0],
                                                                       page_size=paged[1])
        slots_meta.copy_(meta)  # the plan depends on the lengths alone
    if scores is logits:
        rows["kgen_reader+sglang_topk"] = lambda: (reader(), select())
    else:  # (unreached from bench_topk_case, whose reader writes aligned rows) a copy would add a pass
        absent["kgen_reader+sglang_topk"] = "the reader's logits rows are not 16-byte strided"
    return plan, select, indices, meta, slots


def aligned_reader(spec: Spec, args: tuple):
    """(launch, logits) of kgen's reader whose logits rows SGLang's top-k reads in place: max_seq_len rounded up
    to P.SCORE_ALIGN columns (the columns past it hold -inf, as an engine's padded row does; the keys read are the
    same), where the case's own max_seq_len is not a multiple of it; else None."""
    msl = int(args[-1])
    width = P.aligned_width(msl)
    return None if width == msl else RC.launcher(spec, (*args[:-1], width))


def bench_topk_case(torch, timer, spec: Spec, batch: int, keys: int, dist: str, next_n: int, k: int, *,
                    seed: int = 0, peer=None, sglang=None, copy_gbps: float | None = None) -> dict:
    """One shape: every row of TOPK_BENCH_WHAT that can run (`peer`: deep_gemm or None; `sglang`: SGLang's
    loaded top-k or None), cold and graph, the ratios, the byte floor and the goal against it (BYTE_MODEL; the
    floor's time where the run's `copy_gbps` is given), and the set checks."""
    from .ops.topk import prepare, prepare_select
    from .score import same_sets, topk_slots, visible_lengths

    lens = RC.batch_lens(batch, keys, dist, seed, next_n)
    msl = max(lens)
    args = RC.make_case(spec, lens, next_n=next_n, seed=seed, extra_pages=0, max_seq_len=msl)
    q, weights, cache, table, seq_lens, _ = args
    fused, fused_idx = prepare(spec, q, weights, cache, table, seq_lens, msl, k)
    reader, logits = RC.launcher(spec, args)
    reader()  # the logits every standalone top-k reads
    select, select_idx = prepare_select(spec, logits, seq_lens, k)
    fused_slots, fused_slots_out = prepare(spec, q, weights, cache, table, seq_lens, msl, k, slots=True)
    select_slots, select_slots_out = prepare_select(spec, logits, seq_lens, k, block_table=table)
    vis = visible_lengths(seq_lens.cpu(), next_n).to(torch.int32).to(logits.device)
    kk = min(k, msl)
    e: dict[str, Any] = {"variant": spec.name, "store": spec.store.dtype, "batch": batch, "keys": keys,
                         "lengths": dist, "next_n": next_n, "k": k, "rows": int(vis.numel()), "max_seq_len": msl,
                         "total_keys": sum(lens)}
    l2 = device_facts(logits.device.index).l2_bytes if logits.is_cuda else None
    e.update(floor_record(compute_layout(spec).bytes_per_token, lens, e["rows"], k, msl, copy_gbps, l2))
    grid = getattr(select, "grid", None)  # as planned for this device (kgen.topk_plan.topk_cluster)
    if grid:
        e["topk_cluster"] = int(grid[0])
    rows: dict[str, Any] = {"kgen": fused, "kgen_select": select, "torch.topk": lambda: torch.topk(logits, kk, dim=1),
                            "kgen_reader+torch.topk": lambda: (reader(), torch.topk(logits, kk, dim=1)),
                            "kgen_slots": fused_slots, "kgen_select_slots": select_slots}
    absent: dict[str, str] = {}
    sg = None
    if sglang is None:
        absent.update({n: "the SGLang top-k peer is absent (the run's topk.peer.sglang says why)" for n in SGLANG_ROWS})
    else:
        try:
            wide = aligned_reader(spec, args)
            if wide is not None:
                e["sglang_reader_max_seq_len"] = int(wide[1].shape[1])
                wide[0]()
            sg_reader, sg_logits = wide if wide is not None else (reader, logits)
            per_row = table.repeat_interleave(next_n, dim=0).contiguous()  # SGLang's page table: a row per query
            sg = _sglang_rows(torch, sglang, sg_logits[:, :msl], vis, k, sg_reader, rows, absent, e,
                              paged=(per_row, spec.layout.page_size))
        except Exception as ex:  # noqa: BLE001 - recorded per row
            failed = f"SGLang's top-k did not prepare: {type(ex).__name__}: {ex}"[:400]
            absent.update({n: failed for n in SGLANG_ROWS if n not in rows and n not in absent})
    why = RC.peer_takes(spec, next_n)
    if peer is not None and not why:
        dg_call, _ = RC.peer_call(peer, spec, args, next_n)

        def dg_logits():  # the visible part of DeepGEMM's wider rows, as the engines slice it before their top-k
            return dg_call()[:, :msl]

        rows["deepgemm+torch.topk"] = lambda: torch.topk(dg_logits(), kk, dim=1)
        if sg is not None:
            _, _, sg_idx, meta, _ = sg
            dg_out = torch.empty_like(sg_idx)
            rows["deepgemm+sglang_topk"] = lambda: sglang.launch(dg_logits(), vis, dg_out, meta)
    else:
        why = why or "deep_gemm does not import"
        absent.update({n: why for n in DEEPGEMM_ROWS if n not in absent})
    e["peer"] = {"name": RC.PEER_NAME, "present": "deepgemm+torch.topk" in rows}  # DeepGEMM, as before
    if "deepgemm+torch.topk" not in rows:
        e["peer"]["why"] = why
    for name, fn in list(rows.items()):  # one call each first: a row that cannot run is named, not timed
        try:
            fn()
            torch.cuda.synchronize()
        except Exception as ex:  # noqa: BLE001 - recorded per row
            absent[name] = f"{type(ex).__name__}: {ex}"[:400]
            del rows[name]
            if sticky(absent[name]):
                raise  # the context is gone: every later row would only repeat it
            torch.cuda.synchronize()
    e["absent"] = absent
    for how, kw in TIMINGS:
        m = timer.cold if how == "cold" else timer.warm
        t: dict[str, Any] = {}
        for name, fn in rows.items():
            r = m(fn, **kw)
            t[name] = r["ms"] * 1e3  # us
            if "graph_error" in r:
                t.setdefault("graph_errors", {})[name] = r["graph_error"]
        t.update(ratios(t))
        t.update(goal_record(t, e["store"], e.get("floor_us")))
        e[how] = t
    # the sets, after the timings (each output written once more from the logits above)
    want = torch.topk(logits, kk, dim=1)
    want_vals, want_idx = want.values.cpu(), want.indices.cpu().to(torch.int32)
    logits_cpu, vis_cpu = logits.cpu(), vis.cpu()
    for name, launch, indices in (("kgen", fused, fused_idx), ("kgen_select", select, select_idx)):
        if name in rows:
            launch()
            torch.cuda.synchronize()
            e[f"check_{name}"] = set_check(indices.cpu(), want_vals, want_idx, logits_cpu, vis_cpu)
    if sg is not None and "sglang_topk" in rows:
        plan, sg_select, sg_idx, _, _ = sg
        sg_idx.fill_(-2)  # poisoned: every slot must be written
        plan()
        torch.cuda.synchronize()  # the plan done before the top-k reads it (its reads come before its PDL wait)
        sg_select()
        torch.cuda.synchronize()
        e["check_sglang"] = set_check(sg_idx.cpu(), want_vals, want_idx, logits_cpu, vis_cpu)
    if "kgen_select" in rows:  # the slots: rows whose set differs from kgen's indices through the table
        want_slots = topk_slots(select_idx.cpu(), table.cpu(), next_n, spec.layout.page_size)
        slot_rows: list[tuple[str, Any, Any]] = [("kgen_slots", fused_slots, fused_slots_out),
                                                 ("kgen_select_slots", select_slots, select_slots_out)]
        if sg is not None and sg[4] is not None:
            slot_rows.append(("sglang_topk_slots", rows.get("sglang_topk_slots"), sg[4]))
        for name, launch, out in slot_rows:
            if name in rows:
                launch()
                torch.cuda.synchronize()
                e.setdefault("slots_check", {})[name] = len(same_sets(out.cpu(), want_slots))
    if "check_kgen" in e:  # the keys kgen bench wrote before the peers' checks
        e["rows_checked"] = e["check_kgen"]["rows_checked"]
        e["rows_differing_from_torch_topk"] = e["check_kgen"]["rows_differing"]
    return e


# ---------------------------------------------------------------------------------------------
# the run


def topk_cases(specs: list[Spec], shapes=TOPK_BENCH_SHAPES, ks=RC.TOPK_KS) -> list[tuple]:
    """(spec, batch, keys, dist, next_n, k): for the first fp8 variant (DeepGEMM's layout) every shape x k at
    next_n = 1 (equal lengths) and next_n = 2 (lengths +-30 %), the other readable variants at B 1 and 32 x 64K
    keys."""
    mine = [s for s in specs if readable(s)]
    full = next((s for s in mine if s.store.dtype == "fp8_e4m3"), mine[0] if mine else None)
    cases = []
    for spec in mine:
        for batch, keys in shapes if spec is full else ((1, 65536), (32, 65536)):
            for k in ks:
                cases.append((spec, batch, keys, "equal", 1, k))
                cases.append((spec, batch, keys, "pm30", 2, k))
    return cases


def bench_topk(specs: list[Spec], shapes=TOPK_BENCH_SHAPES, *, ks=RC.TOPK_KS, say=print, timer=None,
               cases: list | None = None, on_result=None, sglang: PeerState | None = None, deepgemm=_IMPORT,
               copy: dict | None = None) -> dict:
    """`kgen bench`'s top-k rows over topk_cases (`cases` overrides the list: (spec, batch, keys, dist, next_n, k)
    tuples); `sglang`: SGLang's top-k as loaded once for the run (default: loaded here unless KGEN_BENCH_PEER=0);
    `deepgemm`: deep_gemm or None (default: imported where it can be); `copy`: the run's copy bandwidth
    (kgen.timing.copy_bandwidth; each shape's byte floor is timed by its gbps). `on_result(out)` runs after each
    shape (a partial file). A sticky CUDA error (the context lost) ends the run, said in `stopped`."""
    torch = RC._torch()
    timer = timer or Timer(torch)
    dg, why = RC.peer_module() if deepgemm is _IMPORT else (deepgemm, None if deepgemm else "not asked")
    state = sglang if sglang is not None else PeerState(peer_enabled())
    say(f"top-k peer {P.NAME}: " + ("present" if state.peer is not None else f"absent: {state.why}"))
    if cases is None:
        cases = topk_cases(specs, shapes, ks)
    results: list[dict] = []
    dg_rec = deepgemm_record(dg, why)
    # name / present / why at the top: DeepGEMM's, the keys of the JSON before SGLang's rows joined
    peers = {**{n: dg_rec[n] for n in ("name", "present") + (("why",) if "why" in dg_rec else ())},
             "deepgemm": dg_rec, "sglang": state.record()}
    out: dict[str, Any] = {"what": TOPK_BENCH_WHAT, "byte_model": BYTE_MODEL, "peer": peers, "results": results}
    copy_gbps = (copy or {}).get("gbps")
    if copy:
        out["copy"] = copy
    for spec, batch, keys, dist, next_n, k in cases:
        try:
            e = bench_topk_case(torch, timer, spec, batch, keys, dist, next_n, k, peer=dg, sglang=state.peer,
                                copy_gbps=copy_gbps)
        except Exception as ex:  # noqa: BLE001 - recorded per shape
            e = {"variant": spec.name, "batch": batch, "keys": keys, "lengths": dist, "next_n": next_n, "k": k,
                 "error": f"{type(ex).__name__}: {ex}"[:1000]}
            if not sticky(e["error"]):
                torch.cuda.synchronize()
        results.append(e)
        say(topk_line(e))
        if on_result is not None:
            on_result(out)
        if "error" in e and sticky(e["error"]):
            out["stopped"] = f"the CUDA context is lost after {len(results)} of {len(cases)} shape(s)"
            say(f"top-k: stopping: {out['stopped']}")
            break
    return out


def topk_line(e: dict) -> str:
    head = (f"{e['variant']:20s} B={e['batch']:<3d} keys={e['keys']:<7d} {e['lengths']:6s} n={e['next_n']} "
            f"k={e['k']:<5d}")
    if "error" in e:
        return f"{head} ERROR {e['error']}"
    parts = [f"floor {e['floor_us']:.1f} us"] if "floor_us" in e else []
    for how in ("cold", "graph"):
        t = e[how]
        vals = " ".join(f"{n} {v:.1f}" for n, v in t.items()
                        if isinstance(v, float) and not n.startswith("ratio") and n not in _GOAL_KEYS)
        rs = " ".join(f"{n.removeprefix('ratio_')} {v:.2f}" for n, v in t.items() if n.startswith("ratio"))
        goal = f", goal/floor {t['goal_over_floor']:.2f}" if "goal_over_floor" in t else ""
        parts.append(f"{how}: {vals} us ({rs}{goal})")
    checks = " ".join(f"{n.removeprefix('check_')} {c['rows_differing_beyond_ties']}/{c['rows_checked']}"
                      f"+{c['short_rows_wrong']}/{c['short_rows']}" for n, c in e.items() if n.startswith("check_"))
    slots = " ".join(f"{n} {c}" for n, c in e.get("slots_check", {}).items())
    return (f"{head} " + " | ".join(parts) + f" | beyond ties/long + wrong/short: {checks}"
            + (f" | slot rows differing: {slots}" if slots else "")
            + (f" | absent {', '.join(sorted(e['absent']))}" if e.get("absent") else ""))
