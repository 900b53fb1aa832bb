"""The summary at the end of a writer lab script (bench/writer_*.sh): for each `kgen test --json` file
given, its verdict, case count, failing cases, byte-exact cases and smallest equal fraction, and every
case with values off by a code or scales off by ulps (numerics: fast); for a `lab.json`
(bench/writer_experiments.py), one line per run. A file that is missing or unreadable is said so.

    python3 bench/lab_summary.py OUT test.json sample.json lab.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def test_lines(name: str, d: dict) -> list[str]:
    res = d["results"]
    bad = [e for e in res if not e.get("ok")]
    lines = [f"{name}: ok={d['ok']} interrupted={d.get('interrupted')} cases={len(res)} failing={len(bad)} "
             f"byte-exact={sum(e.get('fraction') == 1.0 for e in res)} "
             f"min fraction={min((e.get('fraction', 0) for e in res), default=0):.6f}"]
    lines += [f"  FAIL {e.get('variant')} {e.get('tokens')} {e.get('reason') or e.get('error')}" for e in bad[:5]]
    lines += [f"  {e['variant']} N={e['tokens']} diff values {e.get('diff_values')}/{e.get('written_values')} "
              f"max codes {e.get('max_code_distance')} scales {e.get('scale_mismatches')} "
              f"max ulps {e.get('max_scale_distance')}"
              for e in res if e.get("diff_values") or e.get("scale_mismatches")][:12]
    return lines


def lab_lines(d: dict) -> list[str]:
    return [f"{r['spec']:<24} {r['headers']:<3} N={r['tokens']:<8} regs {r['registers']:<3} cold {r['cold_us']:8.2f} "
            f"({r['cold_fraction']:.3f}) graph {r['graph_us']:8.2f} ({r['graph_fraction']:.3f}) "
            f"ref {r['equal_to_reference']} same {r['same_bytes_as_first']}" for r in d["runs"]]


def main(argv: list[str]) -> None:
    out = Path(argv[0])
    for name in argv[1:]:
        try:
            d = json.loads((out / name).read_text())
            print("\n".join(lab_lines(d) if "runs" in d else test_lines(name, d)))
        except Exception as e:  # noqa: BLE001 - a summary reports what it cannot read and goes on
            print(name, "unreadable:", e)


if __name__ == "__main__":
    main(sys.argv[1:])
