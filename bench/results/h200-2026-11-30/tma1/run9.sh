#!/usr/bin/env bash
# tma1, device run 9: the L2 policy per launch (kgen.layout.reader_wg_evict_first: evict-first key copies
# where the launch's keys overflow the L2). The reader's GPU pytest and correctness (--sample 20), then
# fp8 (the default against kReaderWgEvictFirst 0, both orders) and bf16, in one process.
#   run(command="bash .dev/l2/bench/results/h200-2026-11-30/tma1/run9.sh", carry=[".dev/l2", ".whl"])
cd "$(dirname "$0")/../../../.."  # the repository copy (.dev/l2)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site ../../.whl/*.whl
export PYTHONPATH=/tmp/site:$PWD KGEN_CACHE_DIR=/tmp/kcache PYTHONUNBUFFERED=1
W=/tmp/t9; mkdir -p $W
python3 -c "import torch; p = torch.cuda.get_device_properties(0); print(p.name, 'L2', p.L2_cache_size)" | tee $W/gpu.txt
N='{"kReaderWgEvictFirst": 0}'
timeout 120 python3 -m pytest -q -p no:cacheprovider --junitxml=$W/junit.xml tests/test_gpu_indexer.py tests/test_tma.py > $W/pytest.log 2>&1
echo "pytest rc=$?"; tail -2 $W/pytest.log
timeout 120 python3 -m kgen.reader_check test specs/dsv4.yaml specs/dsv32_indexer.yaml --sample 20 --tunes "[null, {\"kReaderWgEvictFirst\": 1}]" \
  --json $W/test.json > $W/test.log 2>&1
echo "reader test rc=$?"; grep -v "^ok " $W/test.log | cut -c1-300 | tail -3
timeout 80 python3 -m kgen.reader_check bench specs/dsv4/indexer_fp8.yaml --tunes "[null, $N]" --json $W/bench_fp8.json > $W/bench_fp8.log 2>&1
echo "bench fp8 rc=$?"; cut -c20-122 $W/bench_fp8.log | grep " x " | tail -14
timeout 80 python3 -m kgen.reader_check bench specs/dsv4/indexer_fp8.yaml --tunes "[$N, null]" --json $W/bench_fp8_rev.json > $W/bench_fp8_rev.log 2>&1
echo "bench fp8 reversed rc=$?"; cut -c20-122 $W/bench_fp8_rev.log | grep " x " | tail -14
timeout 80 python3 -m kgen.reader_check bench specs/indexer_bf16.yaml --tunes "[null, $N]" --json $W/bench_bf16.json > $W/bench_bf16.log 2>&1
echo "bench bf16 rc=$?"; cut -c20-122 $W/bench_bf16.log | grep " x " | tail -14
tar czf $OUT/run9.tgz -C $W .
