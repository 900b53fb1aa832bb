#!/usr/bin/env bash
# reader4, device run 3: run 2's correctness steps again (run 2 wrote more files than a call brings back:
# its test and pytest logs were lost), the SM clock / power / throttle reasons sampled while the fp8
# default is benched, everything packed into one archive.
#   run(command="bash .dev/reader/bench/results/h200-2026-11-30/reader4/run3.sh", carry=[".dev/reader", ".whl"])
cd "$(dirname "$0")/../../../.."  # the repository copy (.dev/reader)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site ../../.whl/*.whl
export PYTHONPATH=/tmp/site:$PWD KGEN_CACHE_DIR=/tmp/kcache PYTHONUNBUFFERED=1
W=/tmp/r3; mkdir -p $W
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.limit --format=csv,noheader | tee $W/gpu3.txt
timeout 70 python3 -m kgen.reader_check test specs/dsv4.yaml specs/dsv32_indexer.yaml --sample 20 --tunes '[null, {"kReaderWgStages": 4}]' --json $W/test3.json > $W/test3.log 2>&1
echo "test rc=$?"; grep -v "^ok " $W/test3.log | cut -c1-300 | tail -6
timeout 40 python3 -m pytest -q -p no:cacheprovider tests/test_gpu_indexer.py > $W/pytest3.log 2>&1
echo "pytest rc=$?"; tail -2 $W/pytest3.log
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active --format=csv -lms 100 > $W/smi3.csv 2>&1 &
SMI=$!
timeout 40 python3 -m kgen.reader_check bench specs/dsv4/indexer_fp8.yaml --bench-shapes 128x65536,32x65536 --tunes '[null, {"kReaderWgStages": 2}]' --json $W/bench3.json > $W/bench3.log 2>&1
echo "bench rc=$?"; cut -c1-200 $W/bench3.log | tail -5
kill $SMI
awk -F', ' 'NR>1 {n++; c+=$2; p+=$4; if ($2+0 > 0 && ($2+0 < mn || mn == 0)) mn=$2+0; if ($4+0 > mp) mp=$4+0; r[$6]++} END {print "samples", n, "mean SM MHz", c/n, "min", mn, "mean W", p/n, "max W", mp; for (k in r) print "throttle reasons", k, r[k]}' $W/smi3.csv
tar czf $OUT/run3.tgz -C $W .
