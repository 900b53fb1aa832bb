"""ncu's per-instruction counts of one kernel of a call's src.csv.gz (`ncu --page source --csv --print-source sass`),
folded into runs of consecutive instructions executed the same number of times: offset, length, times, their product,
stall samples and the run's notable opcodes (memory, barriers, votes). `--dump LO HI` prints the instructions between
two offsets instead. Usage: python3 sass_runs.py CSV.GZ KERNEL_INDEX [MIN_INSTRUCTIONS] [--dump LO HI]"""

from __future__ import annotations

import csv
import gzip
import re
import sys

NOTABLE = re.compile(r"(BAR|ATOMS|ATOM|RED|LDG|STG|LDS|STS|SHFL|REDUX|MATCH|EXIT|CALL|LD\.|ST\.|VOTE|MEMBAR|POPC|FLO)")


def kernels(path: str) -> list[dict]:
    out: list[dict] = []
    for row in csv.reader(gzip.open(path, "rt")):
        if len(row) >= 2 and row[0] == "Kernel Name":
            out.append({"name": row[1], "rows": []})
        elif row and row[0] == "Address":
            out[-1]["header"] = row
        elif out and row and row[0].startswith("0x"):
            out[-1]["rows"].append(row)
    return out


def main(argv: list[str]) -> None:
    k = kernels(argv[0])[int(argv[1])]
    h = k["header"]
    n_at, s_at = h.index("Instructions Executed"), h.index("Warp Stall Sampling (All Samples)")
    base = int(k["rows"][0][0], 16)
    if "--dump" in argv:
        lo, hi = (int(x, 16) for x in argv[argv.index("--dump") + 1:][:2])
        for r in k["rows"]:
            if lo <= int(r[0], 16) - base <= hi:
                print(f"{int(r[0], 16) - base:6x} {r[n_at]:>7} {r[s_at]:>4}  {r[1].strip()}")
        return
    least = int(argv[2]) if len(argv) > 2 else 0
    runs: list[dict] = []
    for r in k["rows"]:
        n, off = int(r[n_at]), int(r[0], 16) - base
        if n == 0:
            continue
        if runs and runs[-1]["n"] == n and off - runs[-1]["end"] <= 16:
            runs[-1].update(end=off, length=runs[-1]["length"] + 1, samples=runs[-1]["samples"] + int(r[s_at]))
            runs[-1]["ops"].append(r[1].strip())
        else:
            runs.append({"start": off, "end": off, "n": n, "length": 1, "samples": int(r[s_at]), "ops": [r[1].strip()]})
    print(k["name"][:90], "executed", sum(x["n"] * x["length"] for x in runs))
    for x in runs:
        if x["n"] * x["length"] < least and x["samples"] < 3:
            continue
        ops = sorted({re.split(r"[ .]", o.lstrip("@!PT0123456789 "))[0] for o in x["ops"] if NOTABLE.search(o)})
        print(f"{x['start']:6x} len {x['length']:4d} x{x['n']:7d} = {x['n'] * x['length']:8d} "
              f"samples {x['samples']:4d}  {' '.join(ops)[:90]}")


if __name__ == "__main__":
    main(sys.argv[1:])
