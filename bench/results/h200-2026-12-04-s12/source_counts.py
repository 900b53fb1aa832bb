"""The figures of the README's sections 4 and 6 from ncu's source page (`ncu --import REP --page source --csv
--print-source sass`, gzipped): per kernel the warp instructions executed, the stall mix of the samples, the
opcode mix, the instructions most sampled, and how many instructions run how often (the loop bodies: a count of
tiles x warps). No GPU needed.

    python bench/results/h200-2026-12-04-s12/source_counts.py bench/results/h200-2026-12-04-s12/call4/r/n2_source.csv.gz
"""

from __future__ import annotations

import collections
import csv
import gzip
import sys


def kernels(path: str) -> list[tuple[str, list[list[str]]]]:
    """(kernel name, rows: the header first) of each kernel in the page."""
    out: list[tuple[str, list[str]]] = []
    with gzip.open(path, "rt") as f:
        for line in f:
            if line.startswith('"Kernel Name"'):
                out.append((line.split(",", 1)[1].strip().strip('",'), []))
            elif out:
                out[-1][1].append(line)
    return [(name, list(csv.reader(lines))) for name, lines in out]


def number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        return 0.0


def main() -> None:
    for name, rows in kernels(sys.argv[1]):
        head, data = rows[0], rows[1:]
        col = {h: i for i, h in enumerate(head)}
        executed = [number(r[col["Instructions Executed"]]) for r in data]
        samples = [number(r[col["Warp Stall Sampling (All Samples)"]]) for r in data]
        total, sampled = sum(executed), sum(samples)
        stalls = [h for h in head if h.startswith("stall_") and "Not Issued" not in h]
        mix = {h[6:]: sum(number(r[col[h]]) for r in data) / sampled for h in stalls}
        print(f"== {name[:100]}\n  warp instructions executed {total:.3e}, stall samples {sampled:.0f}")
        print("  stalls: " + ", ".join(f"{k} {v:.2f}" for k, v in sorted(mix.items(), key=lambda kv: -kv[1])[:9]))
        ops: collections.Counter = collections.Counter()
        for r, n in zip(data, executed):
            words = r[col["Source"]].split()
            op = words[1] if words and words[0].startswith("@") and len(words) > 1 else (words[0] if words else "")
            ops[op.split(".")[0]] += n
        print("  opcodes: " + ", ".join(f"{k} {v / total:.2f}" for k, v in ops.most_common(12)))
        for i in sorted(range(len(data)), key=lambda i: -samples[i])[:8]:
            print(f"  {samples[i] / sampled:5.3f} of samples: {data[i][col['Source']][:80]}")
        runs = collections.Counter(int(n) for n in executed)
        for n, k in sorted(runs.items(), key=lambda nk: -nk[0] * nk[1])[:6]:
            print(f"  {k:4d} instructions executed {n:>9} times each: {n * k / total:.3f} of all")


if __name__ == "__main__":
    main()
