# Sourced by every call script of this folder, from the repository root (kits packed as README.md says):
# installs kgen's wheels, unpacks the peers' kits and the released engine trees, sets the environment, and
# starts the peers' builds in the background (DeepGEMM, SGLang's top-k): `peers_ready` waits for both and puts
# deep_gemm on PYTHONPATH. Results go under $R (packed by `pack NAME` into $OUT/NAME.tgz).
ROOT=$PWD
[ -d .peers ] || tar -xJf .xfer/pk/peers.tar.xz
[ -d .releases/trees ] || tar -xJf .xfer/pk/trees.tar.xz
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$ROOT KGEN_CACHE_DIR=/tmp/kcache PYTHONUNBUFFERED=1 KGEN_RELEASES_DIR=$ROOT/.releases
export KGEN_SGLANG_KIT=$ROOT/.peers/sglang KGEN_SGLANG_TOPK_KIT=$ROOT/.peers/sglang_topk
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s]"; }
R=$OUT/r; mkdir -p "$R"
( bash .peers/deepgemm/build_on_device.sh > /tmp/dg_env 2> "$R/deepgemm_build.log" ) &
DG_PID=$!
( timeout 150 python3 scripts/sglang_topk_peer.py build .peers/sglang_topk > "$R/sglang_topk_build.log" 2>&1 ) &
SG_PID=$!
peers_ready() {
  wait $SG_PID; echo "sglang top-k build rc=$? $(el)"
  wait $DG_PID; echo "deepgemm build rc=$? $(el)"
  eval "$(cat /tmp/dg_env)"  # deep_gemm's tree ahead of /tmp/site and the repository on PYTHONPATH
}
pack() { tar -czf "$OUT/$1.tgz" -C "$OUT" r && rm -rf "$R"; }
