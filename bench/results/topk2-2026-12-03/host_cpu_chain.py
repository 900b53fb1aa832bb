"""Host microseconds per call of the native chain on this CPU machine, the driver left out: the chain of
tests/test_topk_native.py (the reader's and the top-k's native kernels on test ops' CPU keys), its entry points
swapped for C stubs built here (launch: return 0; stream and context: write the handle), against its Python
twin's way (two native ops called from Python, as `_indexer_topk_checked` does on the GPU) and each native op
alone. Median of 9 loops of 2000 calls. The GPU adds two cuLaunchKernelEx and the CUDA allocator's two
allocations (this machine's CPU allocator stands in).

    PYTHONPATH=$PWD:tests python bench/results/topk2-2026-12-03/host_cpu_chain.py
"""

from __future__ import annotations

import ctypes
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "tests"))

from test_topk_native import FP8, Chained  # noqa: E402

from kgen import reader_check as RC  # noqa: E402
from kgen.resolve import resolve_spec  # noqa: E402


def per_call_us(fn, calls: int = 2000, loops: int = 9) -> float:
    for _ in range(50):
        fn()
    out = []
    for _ in range(loops):
        t0 = time.perf_counter_ns()
        for _ in range(calls):
            fn()
        out.append((time.perf_counter_ns() - t0) / calls / 1000)
    return round(statistics.median(out), 3)


STUBS = r"""
extern "C" int stub_launch(const void*, void*, void**, void**) { return 0; }
extern "C" int stub_stream(int, void** out) { *out = (void*)0x1234; return 0; }
extern "C" int stub_context(void** out) { *out = (void*)0x7770; return 0; }
"""


def c_stubs() -> list[int]:
    d = Path(tempfile.mkdtemp())
    (d / "stubs.cc").write_text(STUBS)
    subprocess.run(["g++", "-O2", "-shared", "-fPIC", str(d / "stubs.cc"), "-o", str(d / "stubs.so")], check=True)
    lib = ctypes.CDLL(str(d / "stubs.so"))
    return [ctypes.cast(getattr(lib, n), ctypes.c_void_p).value for n in ("stub_launch", "stub_stream",
                                                                           "stub_context")]


def main() -> None:
    c = Chained(c_stubs())
    case = RC.make_case(resolve_spec(FP8), [4096], seed=0, device="cpu")
    c.op(FP8, *case, 512)  # the twins teach both shapes
    logits = c.logits_op(FP8, *case)
    lens = case[4]
    ways = {
        "chain (one dispatch: both native fast paths)": lambda: c.op(FP8, *case, 512),
        "two native ops from Python (the checked twin's way)": lambda: c.select_op(FP8, c.logits_op(FP8, *case),
                                                                                  lens, 512),
        "reader op alone": lambda: c.logits_op(FP8, *case),
        "top-k op alone": lambda: c.select_op(FP8, logits, lens, 512),
    }
    for name, fn in ways.items():
        print(f"{per_call_us(fn):8.3f} us  {name}")
    print("chain calls (native, declined):", c.chain.counts())


if __name__ == "__main__":
    main()
