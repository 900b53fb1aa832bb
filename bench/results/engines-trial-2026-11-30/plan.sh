#!/bin/bash
# The DecodePlan/CompressPlan-reading spec on a fresh copy of the SGLang trial tree, then a prefill and a
# decode step through the patched tree's own kgen_indexer.store (CPU). Run from the kgen repository root
# (K: the python that runs kgen; its python must import kgen and torch).
K="${K:-python -m kgen}"
PY="${PY:-python}"
S=/tmp/sglang-real
D=$(dirname "$0")
run() { echo "\$ $*"; "$@"; echo "[exit $?]"; }
git -C $S checkout -q . && git -C $S clean -qfdx
echo "== the DecodePlan-reading spec (what SGLang's store hands the op), on a fresh copy"
run $K patch --engine sglang --root $S specs/sglang/indexer_bf16_plan.yaml -o /tmp/p2.diff
echo "\$ git -C $S apply --check /tmp/p2.diff && git -C $S apply /tmp/p2.diff"
git -C $S apply --check /tmp/p2.diff && git -C $S apply /tmp/p2.diff; echo "[exit $?]"
run $K audit --engine sglang --root $S specs/sglang/indexer_bf16_plan.yaml specs/dsv4/indexer_fp8.yaml
echo "== a prefill and a decode step through the patched store (kgen's op on CPU tensors)"
run $PY $D/prefill_probe.py $S
git -C $S checkout -q . && git -C $S clean -qfdx
