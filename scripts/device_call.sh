# Sourced by a results folder's call scripts on the GPU machine, from the repository root
# (docs/contributing-gpu.md, "A/B calls beside the peers"). Before the call, here: `make install releases wheels`,
# the peers' kits prepared (docs/gpu.md), and packed with the released engine trees:
#   tar -cJf .xfer/pk/peers.tar.xz .peers; tar -cJf .xfer/pk/trees.tar.xz .releases/trees
# and each other tree an A/B compares as `git archive REV kgen templates specs scripts | tar -x -C .xfer/NAME`;
# the call carries [".whl", ".xfer/pk", ".xfer/NAME", ...].
#
# It installs kgen's wheels, unpacks the kits and the trees, sets the environment and starts the peers' builds in
# the background (DeepGEMM, SGLang's top-k; not with NO_PEERS=1 in the environment). Then:
#   el                         seconds since the call began, for the log
#   peers_ready                wait for both builds; deep_gemm on PYTHONPATH
#   tests_beside_peers TREE TEST...
#                              pytest of TEST... in TREE (200 s at most, $R/pytest_TREE.log) while the peers build,
#                              then peers_ready; prints the failures and the count
#   in_tree TREE LOG LIMIT CMD...
#                              CMD from TREE's root (head: this checkout; else .xfer/TREE), kgen imported from that
#                              tree, stdout and stderr to LOG, at most LIMIT seconds (SIGINT: the bench scripts
#                              write what they have); prints LOG's name, the exit status and its last line
#   ab ROUNDS TREES NAME LIMIT -- CMD...
#                              CMD in each tree of TREES ("base head"), ROUNDS rounds, the trees' processes
#                              alternating (so that a drift of the machine falls on both); an argument {out} of CMD
#                              becomes $R/NAME_<tree>_<round>.json, the log $R/NAME_<tree>_<round>.log
#   topk_ab ROUNDS TREES -- ARGS...
#                              ab of scripts/topk_shapes.py ARGS (NAME topk, 110 s a run)
#   topk_ncu TREE SHAPE...
#                              ncu of TREE's top-k and SGLang's on those shapes ($TOPK_PROFILE's script, by default
#                              bench/results/h100-2026-12-05-s19/profile_topk.py, shapes B:KEYS:LENGTHS:NEXT_N; session
#                              23's takes B:KEYS:LENGTHS:NEXT_N:K): $R/details_TREE.txt, the SASS source counters
#                              $R/src_TREE.csv.gz
#   snap NAME                  $R as it stands into $OUT/NAME.tgz: a call the device time cuts short still returns
#                              what its steps before the last snap wrote (the machine's lease ends a call at the
#                              session's device time left, which can be less than the call's timeout)
#   pack NAME                  snap NAME, then $R removed (the call's last step)
# Results go under $R.
ROOT=$PWD
[ -d .peers ] || tar -xJf .xfer/pk/peers.tar.xz
[ -d .releases/trees ] || tar -xJf .xfer/pk/trees.tar.xz
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$ROOT KGEN_CACHE_DIR=/tmp/kcache PYTHONUNBUFFERED=1 KGEN_RELEASES_DIR=$ROOT/.releases
export KGEN_SGLANG_KIT=$ROOT/.peers/sglang KGEN_SGLANG_TOPK_KIT=$ROOT/.peers/sglang_topk
T0=$(date +%s)
el() { echo "[$(( $(date +%s) - T0 )) s]"; }
R=$OUT/r
mkdir -p "$R"
export R
if [ "${NO_PEERS:-0}" = 1 ]; then  # a short call that times the host: no build loads its CPUs, no peer runs
  peers_ready() { echo "peers not built (NO_PEERS=1) $(el)"; }
else
  ( bash .peers/deepgemm/build_on_device.sh > /tmp/dg_env 2> "$R/deepgemm_build.log" ) &
  DG_PID=$!
  ( timeout 150 python3 scripts/sglang_topk_peer.py build .peers/sglang_topk > "$R/sglang_topk_build.log" 2>&1 ) &
  SG_PID=$!
  peers_ready() {
    wait $SG_PID; echo "sglang top-k build rc=$? $(el)"
    wait $DG_PID; echo "deepgemm build rc=$? $(el)"
    eval "$(cat /tmp/dg_env)"  # deep_gemm's tree ahead of /tmp/site and the repository on PYTHONPATH
  }
fi
tests_beside_peers() {
  local tree=$1 pt
  shift
  ( in_tree "$tree" "$R/pytest_$tree.log" 200 python3 -m pytest -p no:cacheprovider -rs "$@" ) &
  pt=$!
  peers_ready
  wait $pt; echo "tests done $(el)"
  grep -E "^(FAILED|ERROR)|passed|failed" "$R/pytest_$tree.log" | cut -c1-300 | head -12
}
in_tree() {
  local tree=$1 log=$2 limit=$3 dir=$ROOT rc
  shift 3
  [ "$tree" = head ] || dir=$ROOT/.xfer/$tree
  ( cd "$dir" && PYTHONPATH=/tmp/site:$dir:$PYTHONPATH timeout -s INT "$limit" "$@" > "$log" 2>&1 )
  rc=$?
  echo "$(basename "$log") rc=$rc $(el)"; tail -1 "$log" | cut -c1-200
  return $rc
}
ab() {
  local rounds=$1 trees=$2 name=$3 limit=$4 round tree arg
  shift 5  # ROUNDS TREES NAME LIMIT --
  for round in $(seq "$rounds"); do
    for tree in $trees; do
      local out="$R/${name}_${tree}_${round}" cmd=()
      for arg in "$@"; do cmd+=("${arg//\{out\}/$out.json}"); done
      in_tree "$tree" "$out.log" "$limit" "${cmd[@]}"
    done
  done
}
topk_ab() {
  local rounds=$1 trees=$2
  shift 3  # ROUNDS TREES --
  ab "$rounds" "$trees" topk 110 -- python3 "$ROOT/scripts/topk_shapes.py" --json {out} "$@"
}
topk_ncu() {
  local tree=$1
  shift
  in_tree "$tree" "$R/ncu_$tree.log" 90 ncu --clock-control none -k regex:topk -c 12 --section SpeedOfLight \
    --section WarpStateStats --section InstructionStats --section LaunchStats --section SourceCounters \
    -o "$R/prof_$tree" python3 "$ROOT/${TOPK_PROFILE:-bench/results/h100-2026-12-05-s19/profile_topk.py}" "$@"
  ncu --import "$R/prof_$tree.ncu-rep" --page details > "$R/details_$tree.txt" 2>&1
  ncu --import "$R/prof_$tree.ncu-rep" --page source --csv --print-source sass 2> "$R/src.err" |
    gzip > "$R/src_$tree.csv.gz"
  grep -E "^  [a-zA-Z_].*\(|Duration|Executed Instructions  " "$R/details_$tree.txt" | cut -c1-120 | head -30
  rm -f "$R/prof_$tree.ncu-rep"
}
snap() { tar -czf "$OUT/$1.tgz" -C "$OUT" r; }
pack() { snap "$1" && rm -rf "$R"; }
