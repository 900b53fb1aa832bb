"""Warp stall samples of each kernel in a call's ncu source page (`ncu --page source --csv --print-source sass`,
gzipped): per kernel, its samples by stall reason, and the instructions (opcode) that gather the most samples.

    python bench/results/h100-2026-12-06-s24/stalls.py CSV.GZ [TOP]
"""

from __future__ import annotations

import collections
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "h100-2026-12-05-s19"))
from sass_runs import kernels  # noqa: E402  (session 19's reader of ncu's source page)


def main() -> None:
    top = int(sys.argv[2]) if len(sys.argv) > 2 else 8
    for i, k in enumerate(kernels(sys.argv[1])):
        h = k["header"]
        reasons = [j for j, c in enumerate(h) if c.startswith("stall_") and "Not Issued" not in c]
        total = collections.Counter()
        by_op = collections.Counter()
        for r in k["rows"]:
            op = r[1].split()[0] if not r[1].split()[0].startswith("@") else r[1].split()[1]
            for j in reasons:
                n = int(r[j] or 0)
                total[h[j][6:]] += n
                by_op[(op.split(".")[0], h[j][6:])] += n
        s = sum(total.values())
        print(f"kernel {i}: {k['name'][:70]}  samples {s}")
        print("  reasons: " + ", ".join(f"{n} {100 * v / s:.1f}%" for n, v in total.most_common(top)))
        print("  opcode x reason: " + ", ".join(f"{o}/{n} {100 * v / s:.1f}%" for (o, n), v in by_op.most_common(top)))


if __name__ == "__main__":
    main()
