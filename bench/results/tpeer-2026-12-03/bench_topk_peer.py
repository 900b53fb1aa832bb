"""The top-k peers beside kgen's (issue 21): SGLang's DeepSeek-V4 top-k (kgen.peer_sglang_topk) and torch.topk on
the reader's logits, and the fused rows, all in one process on the same tensors; one JSON file, written after
every shape (a run cut by its time limit keeps what it measured).

Per shape (B x keys, k, lengths equal or +-30 %, next_n; rows = B * next_n, row j of a sequence of length L
sees L - next_n + 1 + j keys) on fp8 keys: the reader's logits once, then on those logits
  kgen_select         kgen's top-k kernel alone (kgen.ops.topk.prepare_select)
  torch.topk          torch.topk(logits, k)
  sglang_topk         SGLang's TopKKernel<true>::transform_paged, no page table (raw indices), its plan made before
  sglang_plan         SGLang's TopKKernel<true>::plan alone (once per step in SGLang; launches nothing for small B)
and the fused rows (scores and top-k)
  kgen                torch.ops.kgen.indexer_topk's two kernels
  kgen_reader+X       kgen's reader then X (X = torch.topk, sglang_topk)
  deepgemm+X          deep_gemm.fp8_paged_mqa_logits then X (where deep_gemm imports; next_n <= 2)
cold (L2 flushed) and in CUDA graphs (kgen.timing.Timer). SGLang's and kgen's sets are checked against
torch.topk's on the same logits for rows longer than k (differences counted, and those explained by ties at the
k-th value), and SGLang's short rows against 0..L-1 then -1.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

WHAT = __doc__.split("\n\n")[1] if __doc__ else ""
FAMILY = "specs/dsv4.yaml"
VARIANT = "dsv4_indexer_fp8"


def cases(batches, keys, ks, lengths) -> list[tuple[int, int, str, int, int]]:
    """(B, keys, dist, next_n, k): every length mode of `lengths` in its order, shapes inside (the first mode
    covers the whole matrix before the next begins, so a cut run keeps whole modes)."""
    return [(b, n, dist, nn, k) for dist, nn in lengths for k in ks for b in batches for n in keys]


def _set_check(torch, got, want_vals, want_idx, logits, vis, k: int) -> dict:
    """Rows longer than k: how many select another set than torch.topk, and how many of those differ only in
    keys equal to the row's k-th value (ties); short rows: 0..L-1 then -1 (unordered)."""
    long_rows = (vis > k).nonzero().flatten()
    out: dict[str, Any] = {"rows_checked": int(long_rows.numel()), "rows_differing": 0,
                           "rows_differing_beyond_ties": 0, "keys_swapped": 0}
    if long_rows.numel():
        a = torch.sort(got[long_rows].to(torch.int64), dim=1).values
        b = torch.sort(want_idx[long_rows].to(torch.int64), dim=1).values
        diff = long_rows[(a != b).any(dim=1)]
        out["rows_differing"] = int(diff.numel())
        for r in diff.tolist():
            mine, theirs = set(got[r].tolist()), set(want_idx[r].tolist())
            extra = sorted(mine - theirs)
            kth, row = float(want_vals[r].min()), logits[r].cpu()
            bad = [i for i in extra if i < 0 or i >= int(vis[r]) or float(row[i]) != kth]
            out["keys_swapped"] += len(extra)
            out["rows_differing_beyond_ties"] += int(bool(bad) or len(mine) != k)
    short = (vis <= k).nonzero().flatten().tolist()
    wrong = 0
    for r in short:
        n = int(vis[r])
        row = torch.sort(got[r].to(torch.int64)).values
        want = torch.cat([torch.full((k - n,), -1, dtype=torch.int64, device=row.device),
                          torch.arange(n, dtype=torch.int64, device=row.device)])
        wrong += int(not torch.equal(row, want))
    out["short_rows"] = len(short)
    out["short_rows_wrong"] = wrong
    return out


def bench_case(torch, timer, peer, dg, spec, batch: int, keys: int, dist: str, next_n: int, k: int, seed: int = 0):
    from kgen import layout as L
    from kgen import peer_sglang_topk as P
    from kgen import reader_check as RC
    from kgen.ops.topk import prepare, prepare_select
    from kgen.score import visible_lengths

    lens = RC.batch_lens(batch, keys, dist, seed, next_n)
    msl = max(lens)
    args = RC.make_case(spec, lens, next_n=next_n, seed=seed, extra_pages=0, max_seq_len=msl)
    q, weights, cache, table, seq_lens, _ = args
    fused, fused_idx = prepare(spec, q, weights, cache, table, seq_lens, msl, k)
    reader, logits = RC.launcher(spec, args)
    reader()
    select, kgen_idx = prepare_select(spec, logits, seq_lens, k)
    vis = visible_lengths(seq_lens.cpu(), next_n).to(torch.int32).to(q.device)
    kk = min(k, msl)
    e: dict[str, Any] = {"variant": spec.name, "batch": batch, "keys": keys, "lengths": dist, "next_n": next_n,
                         "k": k, "rows": int(vis.numel()), "max_seq_len": msl, "total_keys": sum(lens)}
    rows: dict[str, Any] = {"kgen": fused, "kgen_select": select, "torch.topk": lambda: torch.topk(logits, kk, dim=1)}
    rows["kgen_reader+torch.topk"] = lambda: (reader(), torch.topk(logits, kk, dim=1))
    absent: dict[str, str] = {}
    sg = None
    if peer is not None:
        scores = P.padded_scores(torch, logits)
        e["sglang_scores"] = "the logits" if scores is logits else f"a copy, rows padded to {scores.stride(0)}"
        plan, sg_select, sg_idx, meta = peer.prepare(scores, vis, k)
        meta.fill_(-1)
        plan()
        torch.cuda.synchronize()
        e["sglang_plan_written"] = bool(int(meta[0, 1]) != -1)  # SGLang's topk_v2_plan_is_written
        if not e["sglang_plan_written"]:
            meta.zero_()
        sg = (plan, sg_select, sg_idx, meta)
        rows["sglang_topk"] = sg_select
        if e["sglang_plan_written"]:
            rows["sglang_plan"] = plan
        else:
            absent["sglang_plan"] = "launches nothing at this row count (SGLang plans only for its cluster pool)"
        if scores is logits:
            rows["kgen_reader+sglang_topk"] = lambda: (reader(), sg_select())
        else:
            absent["kgen_reader+sglang_topk"] = "the reader's logits rows are not 16-byte strided"
    else:
        absent["sglang_topk"] = "the SGLang peer is absent"
    why = RC.peer_reads(spec) or (None if next_n <= RC.PEER_MAX_NEXT_N else f"DeepGEMM takes next_n <= "
                                  f"{RC.PEER_MAX_NEXT_N}")
    if dg is not None and not why:
        lay = L.compute(spec)
        pos = torch.arange(next_n, device=q.device, dtype=torch.int32)
        ctx = (seq_lens[:, None] - next_n + 1 + pos[None, :]).clamp_min(0).to(torch.int32).contiguous()
        kv = cache.view(cache.shape[0], lay.page_size, 1, lay.page_bytes // lay.page_size)
        dmeta = dg.get_paged_mqa_logits_metadata(ctx, lay.page_size, int(dg.get_num_sms()))

        def dg_logits():
            return dg.fp8_paged_mqa_logits(q, kv, weights, ctx, table, dmeta, msl, False)[:, :msl]

        rows["deepgemm+torch.topk"] = lambda: torch.topk(dg_logits(), kk, dim=1)
        if sg is not None:
            _, _, sg_idx_dg, meta = sg
            out_dg = torch.empty_like(sg_idx_dg)

            def dg_sglang():
                peer.launch(dg_logits(), vis, out_dg, meta)

            rows["deepgemm+sglang_topk"] = dg_sglang
    else:
        absent["deepgemm"] = why or "deep_gemm does not import"
    for name, fn in list(rows.items()):  # one call each first: a row that cannot run is named, not timed
        try:
            fn()
            torch.cuda.synchronize()
        except Exception as ex:  # noqa: BLE001 - recorded per row
            torch.cuda.synchronize()
            absent[name] = f"{type(ex).__name__}: {ex}"[:400]
            del rows[name]
    e["absent"] = absent
    for how, kw in (("cold", {"lo": 10, "hi": 30}), ("graph", {"lo": 10, "hi": 20})):
        m = timer.cold if how == "cold" else timer.warm
        t: dict[str, Any] = {}
        for name, fn in rows.items():
            r = m(fn, **kw)
            t[name] = r["ms"] * 1e3  # us
            if "graph_error" in r:
                t.setdefault("graph_errors", {})[name] = r["graph_error"]
        e[how] = t
        topks = {n: t[n] for n in ("torch.topk", "sglang_topk") if n in t}
        if "kgen_select" in t and topks:
            best = min(topks, key=topks.__getitem__)
            t["select_fastest_peer"], t["ratio_kgen_select_to_fastest"] = best, t["kgen_select"] / topks[best]
        for tag, names in (("deepgemm", ("deepgemm+torch.topk", "deepgemm+sglang_topk")),
                           ("reader", ("kgen_reader+torch.topk", "kgen_reader+sglang_topk"))):
            peers = {n: t[n] for n in names if n in t}
            if "kgen" in t and peers:
                best = min(peers, key=peers.__getitem__)
                t[f"{tag}_fastest"], t[f"ratio_kgen_to_{tag}_fastest"] = best, t["kgen"] / peers[best]
    # the sets, after the timings (every row's last call wrote its output)
    fused()
    select()
    want = torch.topk(logits, kk, dim=1)
    vis_cpu = vis.cpu()
    want_vals, want_idx = want.values.cpu(), want.indices.cpu().to(torch.int32)
    torch.cuda.synchronize()
    e["check_kgen"] = _set_check(torch, fused_idx.cpu(), want_vals, want_idx, logits, vis_cpu, kk)
    e["check_kgen_select"] = _set_check(torch, kgen_idx.cpu(), want_vals, want_idx, logits, vis_cpu, kk)
    if sg is not None and "sglang_topk" in rows:
        plan, sg_select, sg_idx, meta = sg
        sg_idx.fill_(-2)
        plan()
        torch.cuda.synchronize()  # the plan done before the top-k reads it (SGLang plans before its scorer)
        sg_select()
        torch.cuda.synchronize()
        e["check_sglang"] = _set_check(torch, sg_idx.cpu(), want_vals, want_idx, logits, vis_cpu, kk)
    return e


def line(e: dict) -> str:
    head = f"B={e['batch']:<3d} keys={e['keys']:<7d} {e['lengths']:6s} n={e['next_n']} k={e['k']:<5d}"
    if "error" in e:
        return f"{head} ERROR {e['error'][:300]}"
    parts = []
    for how in ("cold", "graph"):
        t = e.get(how, {})
        vals = " ".join(f"{n} {v:.1f}" for n, v in t.items() if isinstance(v, float) and not n.startswith("ratio"))
        r = " ".join(f"{n.removeprefix('ratio_')} {v:.2f}" for n, v in t.items() if n.startswith("ratio"))
        parts.append(f"{how}: {vals} us ({r})")
    chk = e.get("check_sglang", {})
    return (f"{head} " + " | ".join(parts) + f" | sglang diff {chk.get('rows_differing', '-')}/"
            f"{chk.get('rows_checked', '-')} (beyond ties {chk.get('rows_differing_beyond_ties', '-')}) "
            f"short wrong {chk.get('short_rows_wrong', '-')} | absent {sorted(e.get('absent', {}))}"
            + "".join(f" | {n}: {why[:200]}" for n, why in e.get("absent", {}).items() if "Error" in why))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="SGLang's DSV4 top-k and torch.topk beside kgen's (issue 21)")
    ap.add_argument("--json", required=True, type=Path)
    ap.add_argument("--batches", default="1,8,32,64")
    ap.add_argument("--keys", default="4096,65536,262144")
    ap.add_argument("--ks", default="512,2048")
    ap.add_argument("--lengths", default="equal:1,pm30:2,pm30:1,equal:2",
                    help="DIST:NEXT_N modes in run order (DIST: equal or pm30)")
    ap.add_argument("--time-limit", type=float, default=140.0, help="start no shape after this many seconds")
    ap.add_argument("--no-sglang", action="store_true", help="leave the SGLang peer out (a rerun after it broke "
                    "the CUDA context)")
    a = ap.parse_args(argv)
    t0 = time.time()
    ints = lambda s: [int(x) for x in s.split(",") if x]  # noqa: E731
    lengths = [(m.split(":")[0], int(m.split(":")[1])) for m in a.lengths.split(",") if m]
    todo = cases(ints(a.batches), ints(a.keys), ints(a.ks), lengths)
    from kgen.bench import write_json_atomic

    data: dict[str, Any] = {"what": WHAT, "variant": VARIANT, "cases_planned": len(todo), "results": []}
    try:
        import torch
    except ImportError as ex:
        data["absent"] = f"torch does not import ({ex})"
        write_json_atomic(a.json, data)
        print("absent:", data["absent"])
        return 0
    from kgen import peer_sglang_topk as P

    if not torch.cuda.is_available():
        data["absent"] = "no CUDA device"
        data["sglang"] = {"name": P.NAME, "present": False, "why": "no CUDA device"}
        write_json_atomic(a.json, data)
        print("absent:", data["absent"])
        return 0
    import kgen.ops  # noqa: F401 - registers the ops
    from kgen import reader_check as RC
    from kgen.bench import environment
    from kgen.resolve import resolve_spec
    from kgen.timing import Timer

    data.update(environment(torch))
    try:
        if a.no_sglang:
            raise P.PeerAbsent("left out (--no-sglang)")
        tb = time.time()
        peer = P.Peer.load()
        data["sglang"] = {**peer.record(), "load_s": round(time.time() - tb, 1)}
    except P.PeerAbsent as ex:
        peer = None
        data["sglang"] = {"name": P.NAME, "present": False, "why": str(ex)[:1500]}
    print("sglang:", data["sglang"], flush=True)
    dg, why = RC.peer_module()
    data["deepgemm"] = RC.peer_info() if dg is not None else {"name": RC.PEER_NAME, "present": False, "why": why}
    spec = resolve_spec(f"{FAMILY}::{VARIANT}")
    timer = Timer(torch)
    for b, n, dist, nn, k in todo:
        if time.time() - t0 > a.time_limit:
            data["stopped"] = f"time limit {a.time_limit} s reached after {len(data['results'])} shapes"
            break
        try:
            e = bench_case(torch, timer, peer, dg, spec, b, n, dist, nn, k)
        except Exception as ex:  # noqa: BLE001 - recorded per shape
            torch.cuda.synchronize()
            e = {"batch": b, "keys": n, "lengths": dist, "next_n": nn, "k": k,
                 "error": f"{type(ex).__name__}: {ex}"[:1000]}
        data["results"].append(e)
        data["seconds"] = round(time.time() - t0, 1)
        write_json_atomic(a.json, data)
        print(line(e), flush=True)
    data["seconds"] = round(time.time() - t0, 1)
    write_json_atomic(a.json, data)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
