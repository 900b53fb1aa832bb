"""The reader's MTP cost on the GPU: next_n 1, 2, 4 on the same keys, the shipped cubin beside the pair cubin
(two tokens per m64n128 wgmma group, kgen.reader_plan.reader_wg_pair_tuning) and its register split
(reader_wg_split_tuning: a producer warpgroup, 3-4 consumer warpgroups, one CTA per SM; next_n 1 too), the
one-token cubin on the pair cubin's ring (kReaderWgPairs 0: which part of a difference is the ring, which the
m64n128 groups) and, where it reads the layout and next_n, DeepGEMM's fp8_paged_mqa_logits, all in one
process on the same tensors (cold: L2 flushed before each call; graph: replays), each shape's launches timed in
order and in reverse order (order effects cancel).

    python scripts/reader_mtp_bench.py OUT.json [SPEC.yaml ...]

MTP_SHAPES overrides the shapes: "B:keys:lengths:next_n,..." (lengths equal, pm30 or uniform); MTP_ALTERNATIVES=0
leaves the pair and split cubins out; MTP_SPLIT_RINGS="12,20" adds the split cubin on those rings too;
MTP_TUNES='{"NAME": {tuning}, ...}' adds those cubins (where the TMA variant reads the layout with them, or, for a
layout the TMA variant does not read (fp4), the cp.async cubin with them)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from kgen import layout as L
from kgen import reader_check as rc
from kgen import reader_layout as RL
from kgen import reader_plan as RP
from kgen.timing import Timer, _with_bw, copy_bandwidth
from kgen.validate import validate_paths

SHAPES = [(32, 65536, "equal", n) for n in (1, 2, 4)] + [(128, 16384, "uniform", n) for n in (1, 2, 4)] + [
    (1, 65536, "equal", n) for n in (1, 2)]
ONE_TOKEN = {"kReaderWgPairs": 0}
# an entry's own fields and its two fixed launches; the other launches are keys beside them (checked where an entry is
# built), so no MTP_TUNES name may be one of these
ENTRY_FIELDS = ("variant", "batch", "keys", "lengths", "next_n", "max_seq_len", "total_keys", "bytes", "tunes",
                "peer_absent", "max_abs_difference_vs_shipped", "shipped", "peer")


def shapes_of(text: str | None) -> list[tuple[int, int, str, int]]:
    if not text:
        return SHAPES
    out = []
    for item in text.split(","):
        b, k, d, n = item.split(":")
        out.append((int(b), int(k), d, int(n)))
    return out


def main() -> None:
    import torch

    out = Path(sys.argv[1])
    extra = json.loads(os.environ.get("MTP_TUNES", "{}"))
    taken = set(ENTRY_FIELDS) & set(extra)  # a launch's times sit beside the shape's fields in its entry
    if taken:
        sys.exit(f"MTP_TUNES: {', '.join(sorted(taken))} is a field of the results; name the tuning otherwise")
    paths = [Path(p) for p in sys.argv[2:]] or [Path("specs/dsv4/indexer_fp8.yaml"), Path("specs/indexer_bf16.yaml")]
    specs = validate_paths(paths).specs()
    timer = Timer(torch)
    copy = copy_bandwidth(torch, timer)
    dg, why = rc.peer_module()
    data: dict = {"copy": copy, "peer": rc.peer_info(), "results": []}
    print(f"copy {copy['gbps']:.0f} GB/s; peer: {'present' if dg else why}", flush=True)
    for spec in specs:
        lay = L.compute(spec)
        for b, k, dist, n in shapes_of(os.environ.get("MTP_SHAPES")):
            lens = rc.batch_lens(b, k, dist, 0, n)
            msl = max(lens)
            args = rc.make_case(spec, lens, next_n=n, seed=0, extra_pages=0, max_seq_len=msl)
            nbytes = sum(lens) * lay.bytes_per_token + b * n * msl * 4
            runs: dict = {}
            logits: dict = {}
            tunes = {"shipped": None}
            if os.environ.get("MTP_ALTERNATIVES", "1") == "1":  # 0: the shipped cubin (and the peer) only
                if n > 1:
                    tunes["pairs"] = RP.reader_wg_pair_tuning(lay)
                # (absent from trees older than the split: the bench runs in those too)
                split_of, is_split = getattr(RP, "reader_wg_split_tuning", None), getattr(RL, "reader_wg_split", None)
                for ring in [None, *map(int, filter(None, os.environ.get("MTP_SPLIT_RINGS", "").split(",")))]:
                    split = split_of(lay, ring and {"kReaderWgTmaStages": ring}) if split_of else None
                    if split and is_split and is_split(lay, split):
                        tunes["split" if ring is None else f"split{ring}"] = split
                ring = RP.reader_wg_pair_tuning(lay).get("kReaderWgTmaStages")
                if ring and os.environ.get("MTP_CONTROL", "1") == "1" and b * k >= 32 * 65536:
                    tunes["one_token_ring"] = {**ONE_TOKEN, "kReaderWgTmaStages": ring}
            for name, tune in extra.items():
                if RL.reader_wg_tma(lay, tune) or not RL.reader_wg_tma(lay, None):
                    tunes[name] = tune
            for name, tune in tunes.items():
                launch, lg = rc.launcher(spec, args, tune)
                runs[name], logits[name] = launch, lg
            peer_why = rc.peer_takes(spec, n)
            if dg is not None and peer_why is None:
                run_peer, _ = rc.peer_call(dg, spec, args, n)
                runs["peer"] = run_peer
            order = list(runs)
            times: dict = {name: {"cold": [], "graph": []} for name in order}
            for seq in (order, order[::-1]):
                for name in seq:
                    times[name]["cold"].append(timer.cold(runs[name], lo=15, hi=40)["ms"])
                    times[name]["graph"].append(timer.warm(runs[name], lo=8, hi=20)["ms"])
            e = {"variant": spec.name, "batch": b, "keys": k, "lengths": dist, "next_n": n, "max_seq_len": msl,
                 "total_keys": sum(lens), "bytes": nbytes, "tunes": {k2: v for k2, v in tunes.items()},
                 "peer_absent": peer_why if "peer" not in runs else None}
            assert set(e) <= set(ENTRY_FIELDS), "ENTRY_FIELDS names every field of an entry"
            for name in order:
                for how in ("cold", "graph"):
                    ms = sum(times[name][how]) / 2
                    e.setdefault(name, {})[how] = {**_with_bw({"ms": ms}, nbytes, copy["gbps"]),
                                                   "orders_ms": times[name][how]}
            # agreement: every kgen launch against the shipped one (bitwise expected: same sums per token)
            for name in logits:
                runs[name]()
            torch.cuda.synchronize()
            ref = logits["shipped"]
            e["max_abs_difference_vs_shipped"] = {
                name: float((lg.nan_to_num(0, 0, 0) - ref.nan_to_num(0, 0, 0)).abs().max())
                for name, lg in logits.items()}
            data["results"].append(e)
            line = f"{spec.name:18s} {b:4d} x {k:6d} {dist:7s} n={n}"
            for name in order:
                line += f" | {name} {e[name]['cold']['us']:.1f} / {e[name]['graph']['us']:.1f} us"
            print(line + f" | diff {e['max_abs_difference_vs_shipped']}", flush=True)
            out.write_text(json.dumps(data, indent=1))
            del runs, logits, args
            torch.cuda.empty_cache()
    out.write_text(json.dumps(data, indent=1))


if __name__ == "__main__":
    main()
