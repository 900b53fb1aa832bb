"""The benchmarks' clock: cold and CUDA-graph timings on the GPU, and the copy bandwidth they are compared with.

One job, shared by `kgen bench`'s writer, reader and host parts (kgen.bench, kgen.reader_check): how a
call is timed (bench/results/h200-2026-11-30/README.md states the method and its figures):
  cold  - a 256 MiB memset flushes L2 before each call; CUDA events around the call only; the
          median of >= 20 calls;
  graph - many calls back to back captured in one CUDA graph; per-call time = replay / calls, the
          median of the replays;
and the practical bandwidth limit they are read against (a 1 GiB device-to-device copy).
"""

from __future__ import annotations

import statistics

FLUSH_BYTES = 256 << 20
COPY_BYTES = 1 << 30
COLD_MIN_REPS = 20
GRAPH_BYTES_PER_REPLAY = 256 << 20  # calls per graph: about this many modelled bytes, 20..200 calls
GRAPH_MIN_CALLS, GRAPH_MAX_CALLS = 20, 200
TARGET_SECONDS = 0.25  # time spent per measurement (sets the repetition count)


def graph_calls(nbytes: int) -> int:
    """Calls captured per graph: enough that a replay is long next to its launch, bounded."""
    return int(max(GRAPH_MIN_CALLS, min(GRAPH_MAX_CALLS, GRAPH_BYTES_PER_REPLAY // max(nbytes, 1))))




def gbps(nbytes: int, ms: float | None) -> float | None:
    return None if not ms or ms <= 0 else nbytes / (ms * 1e-3) / 1e9


class Timer:
    def __init__(self, torch):
        self.torch = torch
        self.flush = torch.empty(FLUSH_BYTES, dtype=torch.uint8, device="cuda")

    def _reps(self, once_ms: float, lo: int, hi: int) -> int:
        return int(max(lo, min(hi, TARGET_SECONDS * 1e3 / max(once_ms, 1e-3))))

    def once_ms(self, fn) -> float:
        t = self.torch
        e0, e1 = t.cuda.Event(enable_timing=True), t.cuda.Event(enable_timing=True)
        e0.record()
        fn()
        e1.record()
        e1.synchronize()
        return e0.elapsed_time(e1)

    def cold(self, fn, *, warmup: int = 3, lo: int = COLD_MIN_REPS, hi: int = 100) -> dict:
        """L2 flushed by a 256 MiB memset before each call; events around the call only."""
        t = self.torch
        for _ in range(warmup):
            fn()
        reps = self._reps(self.once_ms(fn), lo, hi)
        pairs = []
        for _ in range(reps):
            self.flush.zero_()
            e0, e1 = t.cuda.Event(enable_timing=True), t.cuda.Event(enable_timing=True)
            e0.record()
            fn()
            e1.record()
            pairs.append((e0, e1))
        t.cuda.synchronize()
        ms = [a.elapsed_time(b) for a, b in pairs]
        return {"ms": statistics.median(ms), "min_ms": min(ms), "reps": reps}

    def loop(self, fn, *, launches: int = GRAPH_MIN_CALLS, warmup: int = 2, lo: int = 3, hi: int = 30) -> dict:
        """Back to back: events around `launches` calls, divided."""
        t = self.torch
        for _ in range(warmup):
            fn()
        one = self.once_ms(fn)
        reps = self._reps(one * launches, lo, hi)
        ms = []
        for _ in range(reps):
            e0, e1 = t.cuda.Event(enable_timing=True), t.cuda.Event(enable_timing=True)
            e0.record()
            for _ in range(launches):
                fn()
            e1.record()
            e1.synchronize()
            ms.append(e0.elapsed_time(e1) / launches)
        return {"ms": statistics.median(ms), "min_ms": min(ms), "reps": reps, "launches": launches, "how": "loop"}

    def graph(self, fn, *, launches: int = GRAPH_MIN_CALLS, lo: int = 20, hi: int = 50) -> dict:
        """Back to back: `launches` calls captured in a CUDA graph, replayed, divided."""
        t = self.torch
        side = t.cuda.Stream()
        side.wait_stream(t.cuda.current_stream())
        with t.cuda.stream(side):
            for _ in range(3):
                fn()
        t.cuda.current_stream().wait_stream(side)
        t.cuda.synchronize()
        g = t.cuda.CUDAGraph()
        with t.cuda.graph(g, stream=side):  # the stream the warm-up ran on: nothing is created in capture
            for _ in range(launches):
                fn()
        g.replay()
        t.cuda.synchronize()
        reps = self._reps(self.once_ms(g.replay), lo, hi)
        pairs = []
        for _ in range(reps):
            e0, e1 = t.cuda.Event(enable_timing=True), t.cuda.Event(enable_timing=True)
            e0.record()
            g.replay()
            e1.record()
            pairs.append((e0, e1))
        t.cuda.synchronize()
        ms = [a.elapsed_time(b) / launches for a, b in pairs]
        del g
        return {"ms": statistics.median(ms), "min_ms": min(ms), "reps": reps, "launches": launches, "how": "graph"}

    def warm(self, fn, **kw) -> dict:
        """Graph replay; if capture fails, a loop (the error is kept)."""
        try:
            return self.graph(fn, **kw)
        except Exception as e:  # noqa: BLE001
            self.torch.cuda.synchronize()
            r = self.loop(fn)
            r["graph_error"] = f"{type(e).__name__}: {e}"[:500]
            return r

    def peak_extra(self, fn) -> int:
        t = self.torch
        t.cuda.synchronize()
        t.cuda.reset_peak_memory_stats()
        base = t.cuda.memory_allocated()
        fn()
        t.cuda.synchronize()
        return int(t.cuda.max_memory_allocated() - base)


def _with_bw(r: dict, nbytes: int, copy_gbps: float | None) -> dict:
    r = dict(r)
    r["us"] = r["ms"] * 1e3
    r["gbps"] = gbps(nbytes, r["ms"])
    if copy_gbps and r["gbps"]:
        r["fraction_of_copy"] = r["gbps"] / copy_gbps
    return r


def copy_bandwidth(torch, timer: Timer) -> dict:
    src = torch.empty(COPY_BYTES, dtype=torch.uint8, device="cuda").random_()
    dst = torch.empty_like(src)
    warm = timer.loop(lambda: dst.copy_(src), launches=5, lo=5, hi=20)
    nbytes = 2 * COPY_BYTES
    return {"bytes": nbytes, "ms": warm["ms"], "gbps": gbps(nbytes, warm["ms"]),
            "what": "1 GiB device-to-device copy_, bytes read + written, median"}
