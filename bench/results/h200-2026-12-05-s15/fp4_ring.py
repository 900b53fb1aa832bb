"""fp4 keys' reader on rings of 2-8 stages (kReaderWgStages; the shipped default 3), fp8's shipped reader beside it
as the per-key yardstick, in one process on the same tensors per shape (cold: L2 flushed before each call; graph:
replays; each launch timed in order and in reverse order). Runs in any tree since session 13.

    [FP4_RINGS=2,3] python bench/results/h200-2026-12-05-s15/fp4_ring.py OUT.json
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch

from kgen import reader_check as rc
from kgen import reader_layout as RL
from kgen.layout import compute
from kgen.timing import Timer
from kgen.validate import validate_paths

SHAPES = [(32, 65536, "equal", 1), (128, 16384, "uniform", 1), (1, 65536, "equal", 1), (32, 65536, "equal", 2)]
RINGS = tuple(int(r) for r in os.environ.get("FP4_RINGS", "2,3,4,6,8").split(","))


def main() -> None:
    out = Path(sys.argv[1])
    fp4, fp8 = validate_paths([Path("specs/dsv4/indexer_fp4.yaml"), Path("specs/dsv4/indexer_fp8.yaml")]).specs()
    timer, data = Timer(torch), {"results": []}
    for b, k, dist, n in SHAPES:
        row = {"batch": b, "keys": k, "lengths": dist, "next_n": n}
        runs = {}
        for spec, tunes in ((fp8, {"fp8": None}), (fp4, {f"fp4 s{r}": {"kReaderWgStages": r} for r in RINGS})):
            lens = rc.batch_lens(b, k, dist, 0, n)
            args = rc.make_case(spec, lens, next_n=n, seed=0, extra_pages=0, max_seq_len=max(lens))
            row[f"{spec.name} keys"] = sum(lens)
            if n > 1 and spec is fp4:
                tunes["fp4 s3 pairs"] = {"kReaderWgPairs": 1}
            for name, tune in tunes.items():
                if tune and not RL.reader_wg_enabled(compute(spec), tune):
                    continue
                runs[name], _ = rc.launcher(spec, args, tune)
        times = {name: {"cold": [], "graph": []} for name in runs}
        for seq in (list(runs), list(runs)[::-1]):
            for name in seq:
                times[name]["cold"].append(timer.cold(runs[name], lo=10, hi=30)["ms"] * 1e3)
                times[name]["graph"].append(timer.warm(runs[name], lo=6, hi=15)["ms"] * 1e3)
        row["us"] = {name: {how: sum(v) / 2 for how, v in t.items()} for name, t in times.items()}
        data["results"].append(row)
        print(f"{b:4d} x {k:6d} {dist:7s} n={n} | " + " | ".join(
            f"{name} {t['cold']:.1f}/{t['graph']:.1f}" for name, t in row["us"].items()), flush=True)
        out.write_text(json.dumps(data, indent=1))
        del runs
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
