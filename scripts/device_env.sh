# The shared start of the device-side lab scripts (bench/writer_*.sh, scripts/reader_device_*.sh), sourced
# from the repository root (or its copy under .dev/): install the carried wheels (`make wheels` -> .whl/,
# or WHL=DIR) into /tmp/site, put this source tree first on PYTHONPATH (kgen runs from the tree, never
# pip-installed), and define OUT, PY, step and fast_fp8_spec. scripts/device_run.sh, the main GPU job,
# does the same with a fallback site and per-step status; it stays self-contained (docs/gpu.md).
OUT=${OUT:-$PWD/device-out}
mkdir -p "$OUT"
PY=${KGEN_PY:-python3}
export KGEN_CACHE_DIR=${KGEN_CACHE_DIR:-/tmp/kgen-cache} PYTHONUNBUFFERED=1
if [ -z "${KGEN_SKIP_WHEELS:-}" ]; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "${WHL:-.whl}"/*.whl \
    || { echo "FATAL: installing the carried wheels failed"; exit 3; }
fi
export PYTHONPATH=/tmp/site:$PWD
T0=$(date +%s)

step() { echo "=== [$(( $(date +%s) - T0 )) s] $*"; }
lim() { timeout -s INT -k 10 "$@"; }  # lim SECONDS CMD...: a step under its own time limit
# the GPU, its clocks, temperature and power at the start of a run (a power-capped clock shows here)
gpu_clocks() {
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv
}

# fast_fp8_spec PATH: the shipped fp8 indexer renamed dsv4_indexer_fp8_fast, with `numerics: fast`.
fast_fp8_spec() {
  sed 's/^name: dsv4_indexer_fp8$/name: dsv4_indexer_fp8_fast/' specs/dsv4/indexer_fp8.yaml > "$1" && echo "numerics: fast" >> "$1"
}

# profile_step DEFAULT_LIMIT: with PROFILE_SPECS set, scripts/device_run.sh's ncu profile of those specs at 1M
# tokens (-> $OUT/ncu.txt) under T_PROFILE (default DEFAULT_LIMIT) seconds, and its headline lines.
profile_step() {
  [ -n "${PROFILE_SPECS:-}" ] || return 0
  step "profile $PROFILE_SPECS"
  OUT=$OUT KGEN_SKIP_WHEELS=1 timeout -k 10 "${T_PROFILE:-$1}" bash scripts/device_run.sh profile > "$OUT/profile.log" 2>&1
  echo "profile rc $?"
  grep -E "^---|Registers Per|Achieved Occupancy|Theoretical Occ|DRAM Throughput|Compute \(SM\) Thr|Executed Instructions  |Duration" \
    "$OUT/ncu.txt" | head -30
}
