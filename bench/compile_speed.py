"""Compile speed: a cold compile of the DSv4 family for 3 archs, and a warm `kgen compile specs/*.yaml`.

    .venv/bin/python bench/compile_speed.py [--runs N] [--out bench/results/compile_speed.txt]

Cold: empty cache dir, `kgen compile specs/dsv4.yaml --arch sm_90a --arch sm_100a --arch sm_120a`
(7 variants x 3 archs = 21 NVRTC compiles, in parallel threads), once with the default worker count
and once with KGEN_JOBS=1. Goal: <= 15 s on a 2-core machine.

Warm: everything cached, `kgen compile specs/*.yaml` (process start, CLI, cache lookups), min and
median of N runs; also with KGEN_WARM_SHORTCUT=0 (the full path: YAML + validate + render + key +
lookup), and the floor: `python -c pass` and `kgen --help`. Goal: <= 0.3 s.
"""

from __future__ import annotations

import argparse
import glob
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
KGEN = str(BIN / "kgen")
ARCHS = ["--arch", "sm_90a", "--arch", "sm_100a", "--arch", "sm_120a"]


def run(cmd: list[str], env: dict) -> float:
    t = time.perf_counter()
    r = subprocess.run(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    dt = time.perf_counter() - t
    if r.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({r.returncode}):\n{r.stderr}")
    return dt


def timed(cmd: list[str], env: dict, runs: int) -> tuple[float, float]:
    ts = [run(cmd, env) for _ in range(runs)]
    return min(ts), statistics.median(ts)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "compile_speed.txt")
    args = ap.parse_args()

    specs = sorted(glob.glob("specs/*.yaml", root_dir=ROOT))
    cache = Path(tempfile.mkdtemp(prefix="kgen-bench-cache-"))
    env = {**os.environ, "KGEN_CACHE_DIR": str(cache)}
    lines = [f"# {' '.join([Path(sys.executable).name, 'bench/compile_speed.py', *sys.argv[1:]])}",
             f"# {time.strftime('%Y-%m-%d %H:%M:%S')}  {platform.node()}  {os.cpu_count()} CPUs  "
             f"load avg {os.getloadavg()[0]:.2f}  python {platform.python_version()}"]
    try:
        cold_cmd = [KGEN, "compile", "specs/dsv4.yaml", *ARCHS]
        cold = run(cold_cmd, env)
        shutil.rmtree(cache)
        cold1 = run(cold_cmd, {**env, "KGEN_JOBS": "1"})
        lines += ["", "cold (empty cache): " + " ".join(["kgen", *cold_cmd[1:]]) + "  [21 NVRTC compiles]",
                  f"  default workers ({os.cpu_count()}): {cold:6.2f} s   goal <= 15 s",
                  f"  KGEN_JOBS=1:          {cold1:6.2f} s"]

        warm_cmd = [KGEN, "compile", *specs]
        run(warm_cmd, env)  # fill the cache for the other specs and record the warm shortcut
        n = args.runs
        w_min, w_med = timed(warm_cmd, env, n)
        f_min, f_med = timed(warm_cmd, {**env, "KGEN_WARM_SHORTCUT": "0"}, n)
        p_min, p_med = timed([sys.executable, "-c", "pass"], env, n)
        h_min, h_med = timed([KGEN, "--help"], env, n)
        lines += ["", f"warm (all cached), min / median of {n} runs: kgen compile {' '.join(specs)}",
                  f"  kgen compile (shortcut):             {w_min:6.3f} / {w_med:6.3f} s   goal <= 0.3 s",
                  f"  kgen compile, KGEN_WARM_SHORTCUT=0:  {f_min:6.3f} / {f_med:6.3f} s"
                  "   (YAML + validate + render + lookup)",
                  f"  floor: python -c pass:               {p_min:6.3f} / {p_med:6.3f} s",
                  f"  floor: kgen --help:                  {h_min:6.3f} / {h_med:6.3f} s   (interpreter + typer CLI)"]
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    text = "\n".join(lines) + "\n"
    print(text, end="")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)


if __name__ == "__main__":
    main()
