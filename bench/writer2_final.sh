#!/usr/bin/env bash
# Session 2's writer verification of the landed state on the GPU machine (bench/results/h200-2026-11-30/writer2):
#   1. kgen test --sample 50 --seed 31 (the sampler draws per-N launch shapes and numerics fast) -> sample.json
#   2. kgen test of the fp8 indexer with numerics: fast (its stated tolerance)                 -> test_fast.json
#   3. pytest -m gpu (shipped variants through the op at N up to 65536, CUDA graphs, PDL)      -> pytest.txt
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/device_env.sh
FAST=/tmp/indexer_fp8_fast.yaml
fast_fp8_spec "$FAST"
step "kgen test --sample 50 --seed 31"
timeout -s INT -k 10 "${T_SAMPLE:-70}" "$PY" -m kgen test --sample 50 --seed 31 --json > "$OUT/sample.json"; echo "sample rc $?"
if [ "${T_FAST:-30}" != 0 ]; then
  step "kgen test $FAST"
  timeout -s INT -k 10 "${T_FAST:-30}" "$PY" -m kgen test $FAST --json > "$OUT/test_fast.json"; echo "test fast rc $?"
fi
step "pytest -m gpu ${PYTEST_K:+-k $PYTEST_K}"
KGEN_GPU_SAMPLES=${KGEN_GPU_SAMPLES:-4} timeout -s INT -k 10 "${T_PYTEST:-90}" "$PY" -m pytest -m gpu -q -p no:cacheprovider \
  ${PYTEST_K:+-k "$PYTEST_K"} tests/ > "$OUT/pytest.txt" 2>&1; echo "pytest rc $?"; tail -6 "$OUT/pytest.txt"
step "summary"
"$PY" - "$OUT" <<'PYEOF'
import json, sys
from pathlib import Path
out = Path(sys.argv[1])
for name in ("sample.json", "test_fast.json"):
    try:
        d = json.loads((out / name).read_text())
        res = d["results"]
        bad = [e for e in res if not e.get("ok")]
        print(f"{name}: ok={d['ok']} interrupted={d.get('interrupted')} cases={len(res)} failing={len(bad)} "
              f"byte-exact={sum(e.get('fraction') == 1.0 for e in res)}")
        for e in bad[:5]:
            print("  FAIL", e.get("variant"), e.get("tokens"), e.get("reason") or e.get("error"))
        fast = [e for e in res if e.get("diff_values") or e.get("scale_mismatches")]
        for e in fast[:12]:
            print(f"  {e['variant']} N={e['tokens']} diff values {e.get('diff_values')}/{e.get('written_values')} "
                  f"max codes {e.get('max_code_distance')} scales {e.get('scale_mismatches')} "
                  f"max ulps {e.get('max_scale_distance')}")
    except Exception as e:
        print(name, "unreadable:", e)
PYEOF
