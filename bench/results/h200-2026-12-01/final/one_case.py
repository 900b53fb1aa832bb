"""One reader case on the GPU, step by step (writer, kernel, reference), each synchronized, so that a
fault is pinned to the step that made it. Used after call1's illegal address on sample_s0_53.

    python one_case.py SPEC_NAME|PATH B_INDEX [TUNE_JSON]   (SPEC_NAME: a spec of sample_readable(20, seed=0))
"""
import json
import os
import sys

import torch

if os.environ.get("ONE_CASE_LINEINFO"):  # line numbers for compute-sanitizer (another cubin: its own cache key)
    import kgen.compile as _compile

    _options = _compile.compile_options
    _compile.compile_options = lambda uri, arch: {**_options(uri, arch), "lineinfo": True}

from kgen import reader_check as rc
from kgen.reference import load_spec
from kgen.score import indexer_logits_torch

name, case = sys.argv[1], int(sys.argv[2])
tune = json.loads(sys.argv[3]) if len(sys.argv) > 3 else None
spec = load_spec(name) if name.endswith(".yaml") else next(s for s in rc.sample_readable(20, seed=0) if s.name == name)
lens, next_n = rc.correctness_cases(spec)[case]
print(spec.name, "B", len(lens), "next_n", next_n, "tune", tune, flush=True)
args = rc.make_case(spec, lens, next_n=next_n, seed=0)
torch.cuda.synchronize()
print("inputs written", flush=True)
launch, got = rc.launcher(spec, args, tune, check_bounds=True)
got.fill_(float("nan"))
launch()
torch.cuda.synchronize()
print("kernel ran", flush=True)
want = indexer_logits_torch(spec, *args, accum=torch.float64)
print(rc.compare(spec.name, "one", got, want), flush=True)
