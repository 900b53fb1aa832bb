#!/usr/bin/env bash
# Session 3's writer confirmation run on the GPU machine (bench/results/h200-2026-11-30/writer3/README.md),
# steps in order, each under its own limit (seconds):
#   1. bench/writer_experiments.py --plan writer6: main's kernel and launch (OLD_INCLUDE) against this tree's
#      shipped specs, same process, N = 1 ... 1M -> lab.json, lab.txt
#   2. kgen test of every shipped variant (byte-exact, N = 1 ... 1M) -> test.json
#   3. kgen bench of the shipped specs -> bench.json, bench.txt
#   4. ncu of PROFILE_SPECS at 1M tokens -> ncu.txt, profile.log
#   5. kgen test --sample 50 --seed 31 (random accepted specs; staged shapes among them) -> sample.json
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/device_env.sh
export KGEN_BENCH_COMPILE=0
lim() { timeout -s INT -k 10 "$@"; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv
SPECS="specs/dsv4.yaml specs/dsv32_indexer.yaml"
step "lab writer6"
lim "${T_LAB:-50}" "$PY" bench/writer_experiments.py ${OLD_INCLUDE:+--old-include "$OLD_INCLUDE"} --plan writer6 \
  --json "$OUT/lab.json" > "$OUT/lab.txt" 2>&1
echo "lab rc $?"; tail -1 "$OUT/lab.txt"
step "kgen test $SPECS"
lim "${T_TEST:-60}" "$PY" -m kgen test $SPECS --json > "$OUT/test.json"; echo "test rc $?"
step "kgen bench $SPECS"
KGEN_BENCH_BUDGET_S=$(( ${T_BENCH:-60} - 10 )) lim "${T_BENCH:-60}" "$PY" -m kgen bench $SPECS \
  --json "$OUT/bench.json" > "$OUT/bench.txt" 2>&1; echo "bench rc $?"; tail -12 "$OUT/bench.txt"
profile_step 50
step "kgen test --sample 50 --seed 31"
lim "${T_SAMPLE:-45}" "$PY" -m kgen test --sample 50 --seed 31 --json > "$OUT/sample.json"; echo "sample rc $?"
step "summary"
"$PY" - "$OUT" <<'PYEOF'
import json, sys
from pathlib import Path
out = Path(sys.argv[1])
for name in ("test.json", "sample.json"):
    try:
        d = json.loads((out / name).read_text())
        bad = [e for e in d["results"] if not e.get("ok")]
        print(f"{name}: ok={d['ok']} interrupted={d.get('interrupted')} cases={len(d['results'])} failing={len(bad)} "
              f"min fraction={min(e.get('fraction', 0) for e in d['results']):.6f}")
        for e in bad[:5]:
            print("  FAIL", e.get("variant"), e.get("tokens"), e.get("reason") or e.get("error"))
    except Exception as e:
        print(name, "unreadable:", e)
try:
    lab = json.loads((out / "lab.json").read_text())
    for r in lab["runs"]:
        print(f"{r['spec']:<24} {r['headers']:<3} N={r['tokens']:<8} regs {r['registers']:<3} cold {r['cold_us']:8.2f} "
              f"({r['cold_fraction']:.3f}) graph {r['graph_us']:8.2f} ({r['graph_fraction']:.3f}) ref {r['equal_to_reference']} "
              f"same {r['same_bytes_as_first']}")
except Exception as e:
    print("lab.json unreadable:", e)
PYEOF
