#!/usr/bin/env bash
# call3 of session 27 (call2 cut to the device time left: about 300 s with the start): head = main with
# reader-lean-loop.patch applied. First base (the ring of 4, main) and head in alternating processes, one round each
# way, on the shapes where the walk's instructions show (next_n 2, short and long rows), no peer waited for; then
# head's GPU tests of the reader.
#   base packed as for call2.sh
#   run(command="bash bench/results/h200-2026-12-06-s27/call3.sh", carry=[".whl", ".xfer/pk", ".xfer/ab"])
cd "$(dirname "$0")/../../.."
source scripts/device_call.sh
tar -xJf .xfer/ab/trees.tar.xz -C .xfer
S=32:65536:equal:2,32:65536:pm30:2,128:16384:uniform:2,64:4096:pm30:2,64:8192:pm30:2,64:4096:equal:1
S=$S,1:262144:equal:1,32:65536:equal:1
ab 1 "base head" mtp 40 -- env MTP_ALTERNATIVES=0 MTP_SHAPES="$S" \
  python3 $ROOT/scripts/reader_mtp_bench.py {out} specs/dsv4/indexer_fp8.yaml
ab 1 "head base" mtpr 40 -- env MTP_ALTERNATIVES=0 MTP_SHAPES="$S" \
  python3 $ROOT/scripts/reader_mtp_bench.py {out} specs/dsv4/indexer_fp8.yaml
for t in base head; do  # the second round as mtp_<tree>_2 (reader_trees.py reads NAME_<tree>_*)
  for x in json log; do mv "$R/mtpr_${t}_1.$x" "$R/mtp_${t}_2.$x" 2>/dev/null; done
done
snap call3
in_tree head $R/pytest_head.log 150 python3 -m pytest -p no:cacheprovider -rs tests/test_gpu_indexer.py
grep -E "^(FAILED|ERROR)|passed|failed" "$R/pytest_head.log" | cut -c1-300 | head -12
pack call3
