"""Wall time of the CPU-only CLI paths, as a user feels them (fresh processes).

    .venv/bin/python bench/cli_speed.py [--repeats N] [--out bench/results/cli_speed.txt]

Times, each as the median of N runs: `kgen validate specs/*.yaml`, `kgen layout` of every shipped
spec file (all in one process, and one process per file for reference), validate + layout (goal
<= 0.5 s), and `kgen --help` (goal <= 0.3 s). Writes the figures, the load average (other work on
the machine inflates every figure) and the command that produced them to --out.
"""

from __future__ import annotations

import argparse
import os
import platform
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
KGEN = ROOT / ".venv" / "bin" / "kgen"
GOAL_VALIDATE_LAYOUT = 0.5
GOAL_HELP = 0.3


def run_once(argv: list[str]) -> float:
    t = time.perf_counter()
    p = subprocess.run(argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    elapsed = time.perf_counter() - t
    if p.returncode != 0:
        raise SystemExit(f"{shlex.join(argv)} failed ({p.returncode}): {p.stderr.decode()[-500:]}")
    return elapsed


def median_time(argv: list[str], repeats: int) -> tuple[float, list[float]]:
    run_once(argv)  # warm the page cache; not counted
    times = [run_once(argv) for _ in range(repeats)]
    return statistics.median(times), times


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "cli_speed.txt")
    args = ap.parse_args()

    top = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "specs").glob("*.yaml"))
    every = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "specs").rglob("*.yaml"))
    rows: list[tuple[str, float, list[float]]] = []
    load = os.getloadavg()

    validate = [str(KGEN), "validate", *top]
    m_validate, ts = median_time(validate, args.repeats)
    rows.append((f"kgen validate {' '.join(top)}", m_validate, ts))
    m_layout, ts = median_time([str(KGEN), "layout", *every], args.repeats)
    rows.append((f"kgen layout <all {len(every)} shipped spec files, one process>", m_layout, ts))
    per_file = 0.0
    for spec in every:
        m, ts = median_time([str(KGEN), "layout", spec], args.repeats)
        rows.append((f"kgen layout {spec}", m, ts))
        per_file += m
    m_help, ts = median_time([str(KGEN), "--help"], args.repeats)
    rows.append(("kgen --help", m_help, ts))

    total = m_validate + m_layout
    lines = [
        f"# kgen CLI wall time (fresh processes; median of {args.repeats} runs after one warm-up)",
        f"# command: {shlex.join(['.venv/bin/python', 'bench/cli_speed.py', *sys.argv[1:]])}",
        f"# host: {platform.node()} {platform.machine()} {os.cpu_count()} cpus, Python {platform.python_version()}, "
        f"{time.strftime('%Y-%m-%d %H:%M:%S')}",
        f"# load average at start: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; at end: "
        + " ".join(f"{x:.2f}" for x in os.getloadavg()),
        "",
    ]
    width = max(len(r[0]) for r in rows)
    for name, m, ts in rows:
        lines.append(f"{name:<{width}}  median {m * 1000:7.1f} ms   runs {' '.join(f'{t * 1000:.0f}' for t in ts)}")
    lines += [
        "",
        f"validate + layout of every shipped spec (2 processes): {total * 1000:.0f} ms  "
        f"(goal <= {GOAL_VALIDATE_LAYOUT * 1000:.0f} ms: {'met' if total <= GOAL_VALIDATE_LAYOUT else 'MISSED'})",
        f"validate + layout one process per spec file ({1 + len(every)} processes): "
        f"{(m_validate + per_file) * 1000:.0f} ms  (for reference: ~{len(every)} x interpreter + import start-up)",
        f"kgen --help: {m_help * 1000:.0f} ms  (goal <= {GOAL_HELP * 1000:.0f} ms: "
        f"{'met' if m_help <= GOAL_HELP else 'MISSED'})",
    ]
    text = "\n".join(lines) + "\n"
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(text, end="")


if __name__ == "__main__":
    main()
