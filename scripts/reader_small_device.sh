#!/usr/bin/env bash
# The reader's small-shape run (issue 20: the prologue), one device call, from staged copies of this tree and
# of the tree it is compared with (BASE, e.g. main), both under the lead's checkout:
#   run(command="cd .xfer/reader2 && ln -sfn ../../.whl .whl && ln -sfn ../../.peers .peers && bash scripts/reader_small_device.sh",
#       carry=[".xfer/reader2", ".whl", ".peers"], timeout_s=240)
# 1. the peer (DeepGEMM, .peers/deepgemm) built in the background,
# 2. correctness (this tree): `kgen test --readers-only` (shipped variants: ragged lengths, next_n 1-4;
#    SAMPLE sampled specs) and the reader's GPU pytest,
# 3. speed: scripts/reader_mtp_bench.py at SHAPES (fp8 keys, the peer beside kgen in the same process, cold and
#    graph, each timed in order and in reverse order), once in BASE's tree and once in this one, each in its
#    own process (kgen's cubins from that tree's headers, the same DeepGEMM build); in this tree also
#    SHAPES_MTP (next_n 1 / 2 / 4 on the same keys: the one-token cubin, the pair cubin, its register split).
# T_TEST, T_PYTEST, T_BENCH_BASE, T_BENCH_HEAD: step limits (s; defaults 60, 35, 35, 80).
# Writes $OUT/{test.json,test.log,pytest.log,bench_base.json,bench_head.json,bench.log,peer_build.log}.
cd "$(dirname "$0")/.."
HEAD_TREE=$PWD
BASE=${BASE:-$PWD/_base}
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site ${WHL:-.whl}/*.whl
export PYTHONPATH=/tmp/site:$PWD KGEN_CACHE_DIR=/tmp/kcache PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv,noheader
T0=$(date +%s)
if [ -f .peers/deepgemm/build_on_device.sh ]; then
  (bash .peers/deepgemm/build_on_device.sh > /tmp/peer_env 2> $OUT/peer_build.log; echo "peer build $(( $(date +%s) - T0 )) s" >> $OUT/peer_build.log) &
  PEER_PID=$!
fi
if [ "${T_TEST:-60}" -gt 0 ]; then
  timeout ${T_TEST:-60} python3 -m kgen test --readers-only specs/dsv4.yaml specs/dsv32_indexer.yaml --sample ${SAMPLE:-8} --json > $OUT/test.json 2> $OUT/test.log
  echo "test rc=$? [$(( $(date +%s) - T0 )) s]"
  grep -c "^ok " $OUT/test.log; grep -v "^ok " $OUT/test.log | cut -c1-300 | tail -12
fi
if [ "${T_PYTEST:-35}" -gt 0 ]; then
  timeout ${T_PYTEST:-35} python3 -m pytest -q -x -p no:cacheprovider tests/test_gpu_indexer.py -k "${PYTEST_K:-matches_the_torch_path}" > $OUT/pytest.log 2>&1
  echo "pytest rc=$? [$(( $(date +%s) - T0 )) s]"; tail -4 $OUT/pytest.log
fi
PEERPATH=
if [ -n "${PEER_PID:-}" ]; then
  wait $PEER_PID
  eval "$(cat /tmp/peer_env)"
  PEERPATH=${PYTHONPATH%%:*}
  echo "$(tail -1 $OUT/peer_build.log) [$(( $(date +%s) - T0 )) s]"
fi
SHAPES=${SHAPES:-1:4096:equal:1,1:65536:equal:1,32:4096:equal:1,1:262144:equal:1,128:4096:equal:1,32:65536:uniform:1}
# this tree only: MTP on the same keys (the pair cubin and its register split beside the one-token cubin)
SHAPES_MTP=${SHAPES_MTP:-32:65536:equal:1,32:65536:equal:2,32:65536:equal:4}
for which in base head; do
  tree=$([ $which = base ] && echo $BASE || echo $HEAD_TREE)
  [ -d "$tree/kgen" ] || { echo "no tree $tree"; continue; }
  shapes=$SHAPES$([ $which = head ] && [ -n "$SHAPES_MTP" ] && echo ,$SHAPES_MTP)
  (cd $tree && PYTHONPATH=/tmp/site:$tree:$PEERPATH MTP_CONTROL=0 MTP_SHAPES=$shapes \
     timeout $([ $which = base ] && echo ${T_BENCH_BASE:-35} || echo ${T_BENCH_HEAD:-80}) \
     python3 $HEAD_TREE/scripts/reader_mtp_bench.py $OUT/bench_$which.json specs/dsv4/indexer_fp8.yaml 2>&1 \
     | sed "s/^/$which /" | tee -a $OUT/bench.log | cut -c1-300)
  echo "bench $which [$(( $(date +%s) - T0 )) s]"
done
