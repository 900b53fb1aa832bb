#!/usr/bin/env bash
# The reader's GPU run (issue 20), one device call, from a staged copy of the tree in the lead's checkout:
#   run(command="cd .xfer/reader && ln -sfn ../../.whl .whl && ln -sfn ../../.peers .peers && bash scripts/reader_device_run.sh",
#       carry=[".xfer/reader", ".whl", ".peers"])
# 1. the peer: DeepGEMM built on the machine where .peers/deepgemm holds its sources (docs/gpu.md, "The peer"),
#    in the background while steps 2 and 3 run (they do not need it),
# 2. correctness: `kgen test --readers-only` (shipped readable variants, SAMPLE random readable specs: ragged
#    lengths, next_n up to 4) and the reader's GPU pytest,
# 3. PROFILE_SHAPES (B x keys list, fp8 keys, one launch each): ncu of the reader (`kgen bench --profile`),
# 4. speed: `kgen bench --readers-only` (kgen.reader_check.BATCH_SHAPES) of SPECS_BENCH, DeepGEMM's
#    fp8_paged_mqa_logits beside the fp8 layout in the same process.
# Writes $OUT/{test,pytest,bench}.log, test.json, bench.json, and with PROFILE_SHAPES $OUT/more.tgz (ncu.txt).
# T_TEST, T_PYTEST, T_BENCH, T_NCU: step limits (s).
cd "$(dirname "$0")/.."  # the repository root (or its copy under .xfer/)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site ${WHL:-.whl}/*.whl
export PYTHONPATH=/tmp/site:$PWD KGEN_CACHE_DIR=/tmp/kcache PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
MORE=/tmp/more; mkdir -p $MORE
T0=$(date +%s)
if [ -f .peers/deepgemm/build_on_device.sh ]; then
  (bash .peers/deepgemm/build_on_device.sh > /tmp/peer_env 2> $OUT/peer_build.log; echo "peer build $(( $(date +%s) - T0 )) s" >> $OUT/peer_build.log) &
  PEER_PID=$!
fi
SAMPLE=${SAMPLE:-12}
if [ "${T_TEST:-150}" -gt 0 ]; then
  timeout ${T_TEST:-150} python3 -m kgen test --readers-only specs/dsv4.yaml specs/dsv32_indexer.yaml --sample $SAMPLE --json > $OUT/test.json 2> $OUT/test.log
  echo "test rc=$? [$(( $(date +%s) - T0 )) s]"
  grep -v "^ok " $OUT/test.log | cut -c1-400 | tail -25
fi
if [ "${T_PYTEST:-90}" -gt 0 ]; then
  timeout ${T_PYTEST:-90} python3 -m pytest -q -p no:cacheprovider tests/test_gpu_indexer.py > $OUT/pytest.log 2>&1
  echo "pytest rc=$? [$(( $(date +%s) - T0 )) s]"; tail -5 $OUT/pytest.log
fi
FP8=specs/dsv4/indexer_fp8.yaml
if [ -n "${PROFILE_SHAPES:-}" ]; then
  timeout -k 5 ${T_NCU:-45} ncu --clock-control none -k regex:indexer_logits -c 9 --section LaunchStats \
    --section Occupancy --section SpeedOfLight --section WarpStateStats --section SchedulerStats \
    --section MemoryWorkloadAnalysis python3 -m kgen bench --readers-only $FP8 --profile $PROFILE_SHAPES > $MORE/ncu.txt 2>&1
  echo "ncu rc=$? [$(( $(date +%s) - T0 )) s]"
  grep -E "^  [a-z_:]+.*indexer_logits|Duration|Registers Per|Achieved Occupancy|Theoretical Occupancy|Block Limit Reg|Block Limit Shared|Grid Size|Warp Cycles Per Issued|No Eligible" $MORE/ncu.txt | sed 's/  */ /g' | cut -c1-120
fi
if [ -n "${PEER_PID:-}" ]; then
  wait $PEER_PID
  eval "$(cat /tmp/peer_env)"
  PEERPATH=${PYTHONPATH%%:*}  # the peer's tree, first
  export PYTHONPATH=/tmp/site:$PWD:$PEERPATH
  echo "$(tail -1 $OUT/peer_build.log): $(python3 -c 'import deep_gemm; print(deep_gemm.__file__)' 2>&1 | tail -1)"
fi
SPECS_BENCH=${SPECS_BENCH:-specs/dsv4/indexer_fp8.yaml specs/indexer_bf16.yaml specs/dsv4/indexer_fp4.yaml}
if [ "${T_BENCH:-240}" -gt 0 ]; then
  timeout ${T_BENCH:-240} python3 -m kgen bench --readers-only $SPECS_BENCH --json $OUT/bench.json > $OUT/bench.log 2>&1
  echo "bench rc=$? [$(( $(date +%s) - T0 )) s]"
  cut -c1-260 $OUT/bench.log | tail -80
fi
[ -n "$(ls $MORE)" ] && tar -C /tmp -czf $OUT/more.tgz more
