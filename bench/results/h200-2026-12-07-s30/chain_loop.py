"""The native chain of tests/test_topk_native.py on test ops' CPU keys (C stubs for the driver), 300000 eager calls
in a loop, for a profiler:

    PYTHONPATH=$PWD perf record -g -o /tmp/perf.data python bench/results/h200-2026-12-07-s30/chain_loop.py
    perf report -i /tmp/perf.data --no-children --sort dso
"""

from __future__ import annotations

import sys
import time

sys.path[:0] = ["tests", "bench/results/topk2-2026-12-03"]

from host_cpu_chain import c_stubs  # noqa: E402
from test_topk_native import FP8, Chained  # noqa: E402

from kgen import reader_check as RC  # noqa: E402
from kgen.resolve import resolve_spec  # noqa: E402

CALLS = 300_000

c = Chained(c_stubs())
case = RC.make_case(resolve_spec(FP8), [4096], seed=0, device="cpu")
c.op(FP8, *case, 512)  # the twins teach both shapes
t = time.perf_counter()
for _ in range(CALLS):
    c.op(FP8, *case, 512)
print(f"{(time.perf_counter() - t) / CALLS * 1e6:.3f} us per call; chain calls (native, declined): {c.chain.counts()}")
