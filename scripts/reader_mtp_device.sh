#!/usr/bin/env bash
# The reader's MTP run (issue 20 item 2), one device call, from a staged copy of the tree in the lead's checkout:
#   run(command="cd .xfer/mtp && ln -sfn ../../.whl .whl && ln -sfn ../../.peers .peers && bash scripts/reader_mtp_device.sh",
#       carry=[".xfer/mtp", ".whl", ".peers"])
# 1. the peer (DeepGEMM, .peers/deepgemm) built in the background,
# 2. correctness: `kgen test --readers-only` (shipped variants: ragged lengths, next_n 1-4, the pair cubin at
#    next_n >= 2; SAMPLE sampled specs) and the reader's GPU pytest,
# 3. scripts/reader_mtp_bench.py: next_n 1 / 2 / 4 on the same keys, the pair cubin beside the one-token
#    cubin and the peer, fp8 (SHAPES_FP8) and bf16 (SHAPES_BF16).
# Writes $OUT/{test.json,test.log,pytest.log,bench_fp8.json,bench_bf16.json,bench.log,peer_build.log}.
cd "$(dirname "$0")/.."
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site ${WHL:-.whl}/*.whl
export PYTHONPATH=/tmp/site:$PWD KGEN_CACHE_DIR=/tmp/kcache PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv,noheader
T0=$(date +%s)
if [ -f .peers/deepgemm/build_on_device.sh ]; then
  (bash .peers/deepgemm/build_on_device.sh > /tmp/peer_env 2> $OUT/peer_build.log; echo "peer build $(( $(date +%s) - T0 )) s" >> $OUT/peer_build.log) &
  PEER_PID=$!
fi
if [ "${T_TEST:-70}" -gt 0 ]; then
  timeout ${T_TEST:-70} python3 -m kgen test --readers-only specs/dsv4.yaml specs/dsv32_indexer.yaml --sample ${SAMPLE:-4} --json > $OUT/test.json 2> $OUT/test.log
  echo "test rc=$? [$(( $(date +%s) - T0 )) s]"
  grep -c "^ok " $OUT/test.log; grep -v "^ok " $OUT/test.log | cut -c1-300 | tail -12
fi
if [ "${T_PYTEST:-45}" -gt 0 ]; then
  timeout ${T_PYTEST:-45} python3 -m pytest -q -x -p no:cacheprovider tests/test_gpu_indexer.py -k "${PYTEST_K:-matches_the_torch_path}" > $OUT/pytest.log 2>&1
  echo "pytest rc=$? [$(( $(date +%s) - T0 )) s]"; tail -4 $OUT/pytest.log
fi
if [ -n "${PEER_PID:-}" ]; then
  wait $PEER_PID
  eval "$(cat /tmp/peer_env)"
  PEERPATH=${PYTHONPATH%%:*}
  export PYTHONPATH=/tmp/site:$PWD:$PEERPATH
  echo "$(tail -1 $OUT/peer_build.log) [$(( $(date +%s) - T0 )) s]"
fi
if [ "${T_BENCH:-110}" -gt 0 ]; then
  MTP_SHAPES=${SHAPES_FP8:-} timeout ${T_BENCH:-110} python3 scripts/reader_mtp_bench.py $OUT/bench_fp8.json specs/dsv4/indexer_fp8.yaml 2>&1 | tee $OUT/bench.log | cut -c1-330
  echo "bench fp8 [$(( $(date +%s) - T0 )) s]"
  MTP_SHAPES=${SHAPES_BF16:-32:65536:equal:1,32:65536:equal:2,32:65536:equal:4} timeout ${T_BENCH_BF16:-40} python3 scripts/reader_mtp_bench.py $OUT/bench_bf16.json specs/indexer_bf16.yaml 2>&1 | tee -a $OUT/bench.log | cut -c1-330
  echo "bench bf16 [$(( $(date +%s) - T0 )) s]"
fi
