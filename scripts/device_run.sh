#!/usr/bin/env bash
# The ONE command run on the GPU machine (docs/gpu.md). From the repository root there:
#
#   bash scripts/device_run.sh [all|test|bench|pytest|preflight] [--quick]
#
#   preflight  install the carried wheels, print nvidia-smi + versions, load and run one kernel
#   pytest     preflight + `python3 -m pytest -m gpu -q` (shipped variants + random valid specs)
#   test       preflight + pytest + `kgen test specs/dsv4.yaml specs/dsv32_indexer.yaml --json`
#   sample     preflight + `kgen test --sample 50` (random accepted specs, a few N each)
#   bench      preflight + `kgen bench ... --json $OUT/bench.json`
#   all        (default) preflight + pytest + test, then bench in the time left (it stops starting cases
#              25 s before its limit; none when less than a minute is left): the whole run ends inside the
#              device tool's 600 s. The GPU tests alone take about 270 s of a fresh machine (session 12:
#              265 s of test time over 249 tests, compiles included), so `all`'s bench is partial; the
#              bench's own call (`bench`) runs it whole
#   profile    preflight + ncu of each PROFILE_SPECS variant at 1M tokens (speed of light, warp
#              stalls, instruction mix) and a SASS opcode histogram of its cubin, under $OUT/ncu.txt
#   --quick    fewer token counts and samples, no torch.compile (about 3 minutes)
#
# Needs: the wheels of `make wheels` in .whl/ (carry [".whl"]); writes under $OUT (the device tool
# sets it; default ./device-out): run.log (everything), test.json, bench.json, junit.xml,
# summary.txt. kgen runs from this source tree (PYTHONPATH), never pip-installed. Exit 0 only if
# every step that ran passed. Step time limits: T_PYTEST, T_TEST, T_BENCH (seconds). Local dry run
# (no GPU: every GPU step reports it and fails cleanly):
#   KGEN_SKIP_WHEELS=1 KGEN_PY=.venv/bin/python OUT=/tmp/out bash scripts/device_run.sh all --quick
set -uo pipefail
cd "$(dirname "$0")/.."

MODE=all
QUICK=0
for a in "$@"; do
  case "$a" in
    all|test|sample|bench|pytest|preflight|profile) MODE=$a ;;
    --quick|quick) QUICK=1 ;;
    -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
    *) echo "device_run.sh: unknown argument '$a' (try --help)" >&2; exit 2 ;;
  esac
done

OUT=${OUT:-$PWD/device-out}
mkdir -p "$OUT"

main() {
PY=${KGEN_PY:-python3}              # the image's python3 is /opt/torch/.venv/bin/python3 (3.12, torch)
SPECS=${KGEN_SPECS:-"specs/dsv4.yaml specs/dsv32_indexer.yaml"}   # KGEN_SPECS narrows a run
export PYTHONUNBUFFERED=1
export KGEN_CACHE_DIR=${KGEN_CACHE_DIR:-/tmp/kgen-cache}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
T0=$(date +%s)
STATUS=()

elapsed() { echo $(( $(date +%s) - T0 )); }
step() { echo; echo "=== [$(elapsed) s] $*"; }
record() { STATUS+=("$1: $2"); }

USER_T_BENCH=${T_BENCH:-}           # a limit the caller set is kept; else `all` gives the bench the time left
if [ "$QUICK" = 1 ]; then
  TEST_TOKENS="--tokens 1 --tokens 7 --tokens 4097 --tokens 65536"
  BENCH_TOKENS="--tokens 64 --tokens 65536"
  export KGEN_GPU_SAMPLES=${KGEN_GPU_SAMPLES:-6} KGEN_BENCH_COMPILE=${KGEN_BENCH_COMPILE:-0}
  : "${T_PYTEST:=120}" "${T_TEST:=120}" "${T_BENCH:=150}"
else
  TEST_TOKENS=""                      # kgen test's defaults: 1 7 64 4097 65536 1048576
  BENCH_TOKENS=""                     # kgen bench's defaults: 1 64 4096 65536 1048576
  export KGEN_GPU_SAMPLES=${KGEN_GPU_SAMPLES:-16}
  case "$MODE" in   # each mode's steps together end inside the device tool's 600 s
    all) : "${T_PYTEST:=330}" "${T_TEST:=150}" ;;  # bench: the time left (below)
    test) : "${T_PYTEST:=330}" "${T_TEST:=240}" ;;
    *) : "${T_PYTEST:=540}" "${T_TEST:=540}" "${T_BENCH:=540}" ;;
  esac
  : "${T_PYTEST:=540}" "${T_TEST:=540}" "${T_BENCH:=540}"
fi
# bench stops starting new cases 25 s before its limit; torch.compile gets at most 40 % of it
export KGEN_BENCH_BUDGET_S=${KGEN_BENCH_BUDGET_S:-$(( T_BENCH - 25 ))}
export KGEN_BENCH_COMPILE_BUDGET_S=${KGEN_BENCH_COMPILE_BUDGET_S:-$(( T_BENCH * 2 / 5 ))}

# ---------------------------------------------------------------------------------------------
step "wheels -> /tmp/site (mode $MODE, quick $QUICK)"
if [ -n "${KGEN_SKIP_WHEELS:-}" ]; then
  echo "KGEN_SKIP_WHEELS set: using $PY's own packages"
elif ls .whl/*.whl >/dev/null 2>&1; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    || { echo "FATAL: installing the carried wheels failed"; exit 3; }
  # the same without cuda-core/bindings/pathfinder: the fallback onto the image's cuda-python
  nocuda=$(ls .whl/*.whl | grep -v -E '/cuda_(core|bindings|pathfinder)-' || true)
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site-nocuda $nocuda \
    || echo "warning: the fallback site /tmp/site-nocuda could not be installed"
else
  echo "warning: no .whl/*.whl here: run 'make wheels' and call the device tool with carry [\".whl\"]"
fi
export PYTHONPATH=/tmp/site:$PWD

step "machine"
nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv || true
nvidia-smi -L || true

versions() {
  "$PY" - <<'PYEOF'
import importlib.metadata as m, sys
print("python", sys.version.split()[0], sys.executable)
for n in ("torch", "cuda-core", "cuda-bindings", "cuda-pathfinder", "nvidia-cuda-nvrtc", "nvidia-cuda-runtime",
          "numpy", "pydantic", "pydantic-core", "ruamel.yaml", "libcst", "typer", "rich", "jinja2", "filelock",
          "platformdirs", "pytest", "hypothesis"):
    try:
        d = m.distribution(n)
        print(f"  {n:22} {d.version:14} {d.locate_file('')}")
    except m.PackageNotFoundError:
        print(f"  {n:22} MISSING")
try:
    import torch
    print("torch cuda", torch.version.cuda, "available", torch.cuda.is_available(),
          torch.cuda.get_device_name() if torch.cuda.is_available() else "")
except Exception as e:
    print("torch:", e)
try:
    from kgen.toolchain import nvrtc_version
    print("nvrtc:", nvrtc_version())
except Exception as e:
    print("nvrtc:", e)
PYEOF
}

preflight() {
  # one small kernel through the whole path: validate, compile, load, launch, compare
  timeout -k 10 180 "$PY" - <<'PYEOF'
import sys, time
t = time.perf_counter()
from kgen.gpurun import run_case
from kgen.runtime import device_info, load
from kgen.validate import validate_paths
spec = validate_paths(["specs/indexer_bf16.yaml"]).specs()[0]
print("device:", device_info())
loaded = load(spec, verbose=True)
print(f"loaded {loaded.uri} for {loaded.arch}: {loaded.registers()} registers")
c = run_case(spec, 64, seed=0)
print(f"preflight: {spec.name} N=64 ok={c.ok} equal={c.fraction:.6f} ({time.perf_counter() - t:.1f} s)", c.reason)
sys.exit(0 if c.ok else 1)
PYEOF
}

step "versions"
versions
step "preflight"
if preflight; then
  record preflight ok
else
  rc=$?
  if [ -d /tmp/site-nocuda ]; then
    step "preflight failed (rc $rc) with the carried cuda-python; retrying with the image's"
    export PYTHONPATH=/tmp/site-nocuda:$PWD
    versions
    if preflight; then record preflight "ok (image's cuda-python)"; else rc=$?; record preflight "FAILED rc $rc"; fi
  else
    record preflight "FAILED rc $rc"
  fi
fi
if [[ "${STATUS[*]}" == *"preflight: FAILED"* ]]; then
  # a kernel mismatch still shows in the tests; a broken toolchain would only repeat itself
  if [ "$MODE" = preflight ]; then echo "${STATUS[@]}"; exit 1; fi
  echo "preflight failed: continuing so that every step reports its own error"
fi

run_pytest() {
  step "pytest -m gpu (limit ${T_PYTEST} s, ${KGEN_GPU_SAMPLES} random specs)"
  timeout -s INT -k 20 "$T_PYTEST" "$PY" -m pytest -m gpu -q --maxfail=25 -p no:cacheprovider --junitxml="$OUT/junit.xml" tests/
  local rc=$?
  record pytest "$([ $rc = 0 ] && echo ok || echo "FAILED rc $rc")"
}

run_test() {
  step "kgen test $SPECS $TEST_TOKENS (limit ${T_TEST} s)"
  # shellcheck disable=SC2086
  timeout -s INT -k 20 "$T_TEST" "$PY" -m kgen.cli test $SPECS $TEST_TOKENS --json > "$OUT/test.json"
  local rc=$?
  record "kgen test" "$([ $rc = 0 ] && echo ok || echo "FAILED rc $rc")"
}

run_sample() {
  local k=${KGEN_TEST_SAMPLE:-50}
  step "kgen test --sample $k: random specs the validator accepts (limit ${T_SAMPLE:-150} s)"
  timeout -s INT -k 20 "${T_SAMPLE:-150}" "$PY" -m kgen.cli test --sample "$k" --seed "${KGEN_SEED:-$RANDOM}" --json > "$OUT/sample.json"
  local rc=$?
  record "kgen test --sample $k" "$([ $rc = 0 ] && echo ok || echo "FAILED rc $rc")"
}

run_bench() {
  step "kgen bench $SPECS $BENCH_TOKENS (limit ${T_BENCH} s, compile budget ${KGEN_BENCH_COMPILE_BUDGET_S} s)"
  # shellcheck disable=SC2086
  timeout -s INT -k 20 "$T_BENCH" "$PY" -m kgen.cli bench $SPECS $BENCH_TOKENS --json "$OUT/bench.json"
  local rc=$?
  record "kgen bench" "$([ $rc = 0 ] && echo ok || echo "FAILED rc $rc")"
}

run_profile() {
  local specs=${PROFILE_SPECS:-"specs/dsv4/indexer_fp8.yaml specs/indexer_bf16.yaml specs/dsv32_indexer.yaml specs/dsv4/indexer_fp4.yaml"}
  step "profile: ncu + SASS of $specs"
  for s in $specs; do
    echo "--- $s" | tee -a "$OUT/ncu.txt"
    timeout -k 10 150 ncu --clock-control none -k regex:norm_rope_store -s 1 -c 1 \
      --section SpeedOfLight --section WarpStateStats --section InstructionStats --section Occupancy \
      --section LaunchStats --section MemoryWorkloadAnalysis --section SchedulerStats \
      "$PY" bench/profile_kernel.py "$s" --tokens 1048576 2>&1 | grep -v "^==PROF==" | tee -a "$OUT/ncu.txt" | tail -60
  done
  step "SASS opcode histograms"
  local names
  names=$("$PY" -c 'import sys; from kgen.validate import validate_paths; print(" ".join(s.name for s in validate_paths(sys.argv[1:]).specs()))' $specs)
  for f in $(for n in $names; do ls "$KGEN_CACHE_DIR/$n"/sm_90a-*/kernel.cubin 2>/dev/null; done); do
    echo "--- $f"
    cuobjdump -sass "$f" | grep -oE '/\*[0-9a-f]{4}\*/\s+(@!?U?P[0-9T]+\s+)?[A-Z0-9_.]+' | awk '{print $NF}' | sed 's/\..*//' \
      | sort | uniq -c | sort -rn | head -25 | tr '\n' ' '; echo
    cuobjdump -sass "$f" > "$OUT/$(basename "$(dirname "$(dirname "$f")")").sass" 2>/dev/null || true
  done 2>&1 | tee -a "$OUT/ncu.txt"
  record profile ok
}

# KGEN_BENCH_TOKENS / KGEN_TEST_TOKENS ("65536 1048576") override the token counts of a run
[ -n "${KGEN_BENCH_TOKENS:-}" ] && BENCH_TOKENS=$(printf -- '--tokens %s ' $KGEN_BENCH_TOKENS)
[ -n "${KGEN_TEST_TOKENS:-}" ] && TEST_TOKENS=$(printf -- '--tokens %s ' $KGEN_TEST_TOKENS)

case "$MODE" in
  profile) run_profile ;;
  pytest) run_pytest ;;
  test) run_pytest; run_test ;;
  sample) run_sample ;;
  bench) run_bench ;;
  all)
    run_pytest; run_test
    if [ "$QUICK" = 0 ] && [ -z "$USER_T_BENCH" ]; then  # the bench gets what is left of 570 s
      T_BENCH=$(( 570 - $(elapsed) ))
      export KGEN_BENCH_BUDGET_S=$(( T_BENCH - 25 )) KGEN_BENCH_COMPILE_BUDGET_S=$(( T_BENCH * 2 / 5 ))
    fi
    if [ "$T_BENCH" -ge 60 ]; then run_bench
    else step "kgen bench: skipped, $T_BENCH s left (run the bench mode)"; record "kgen bench" "skipped"; fi ;;
esac

step "summary"
"$PY" - "$OUT" <<'PYEOF' | tee "$OUT/summary.txt"
import json, sys
from pathlib import Path
out = Path(sys.argv[1])
t = out / "test.json"
if t.exists() and t.stat().st_size:
    try:
        d = json.loads(t.read_text())
        by = {}
        for e in d["results"]:
            by.setdefault(e["variant"], []).append(e)
        print(f"kgen test on {d['device']['name']}: {'ALL OK' if d['ok'] else 'FAILURES'}")
        print(f"  {'variant':<30} {'N ok':<40} {'min equal %':>12} {'max dist':>8}")
        for v, es in by.items():
            ns = " ".join(f"{e['tokens']}{'' if e['ok'] else '!'}" for e in es)
            fr = min(e["fraction"] for e in es) * 100
            print(f"  {v:<30} {ns:<40} {fr:>12.6f} {max(e['max_code_distance'] for e in es):>8}")
    except Exception as e:
        print("test.json unreadable:", e)
b = out / "bench.json"
if b.exists():
    try:
        d = json.loads(b.read_text())
        print(f"kgen bench: copy {d['copy']['gbps']:.0f} GB/s, inputs {d.get('inputs')}; us per call graph (cold), % of copy (cold), x eager")
        for e in d["results"]:
            if "kgen" not in e:
                print(f"  {e['variant']:<28} {e.get('tokens', '')!s:>8} {e.get('error', e.get('skipped', ''))[:70]}")
                continue
            k, r = e["kgen"], e.get("ratios", {})
            f = lambda x, s=".1f": "-" if x is None else format(x, s)
            print(f"  {e['variant']:<28} {e['tokens']:>8} {f(k['graph']['us']):>8} ({f(k['cold']['us'])}) "
                  f"{f((r.get('graph_fraction_of_copy') or 0) * 100, '.0f'):>4}% "
                  f"({f((r.get('cold_fraction_of_copy') or 0) * 100, '.0f')}%) x{f(r.get('graph_speedup_vs_eager'))}")
    except Exception as e:
        print("bench.json unreadable:", e)
PYEOF
echo
echo "steps ($(elapsed) s):"
fail=0
for s in "${STATUS[@]}"; do echo "  $s"; [[ "$s" == *FAILED* ]] && fail=1; done
exit $fail
}

main 2>&1 | tee -a "$OUT/run.log"
exit "${PIPESTATUS[0]}"
