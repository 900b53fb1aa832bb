"""kgen.host_cost's timing on the CPU, a stand-in for torch.cuda recording what the loops ask of the device: the
ways take turns loop by loop, each loop starts after a sync (and, busy, behind one sleeping kernel), and a way that
costs more per call measures more."""

from __future__ import annotations

import time
import types

from kgen import host_cost as HC


def fake_torch(log: list):
    cuda = types.SimpleNamespace(synchronize=lambda: log.append("sync"),
                                 _sleep=lambda cycles: log.append(("sleep", cycles)))
    return types.SimpleNamespace(cuda=cuda)


def spin(us: float) -> None:
    end = time.perf_counter() + us * 1e-6
    while time.perf_counter() < end:
        pass


def test_ways_take_turns_and_each_loop_starts_synced():
    log: list = []
    ways = {"a": lambda: log.append("a"), "b": lambda: log.append("b")}
    out = HC.time_ways(fake_torch(log), ways, calls=3, loops=2)
    assert set(out) == {"a", "b"} and all(len(v) == 2 for v in out.values())
    timed = log[log.index("sync"):]  # after the warm-up calls
    assert timed == ["sync", "a", "a", "a", "sync", "b", "b", "b"] * 2 + ["sync"]


def test_a_busy_loop_starts_behind_one_sleeping_kernel():
    log: list = []
    HC.time_ways(fake_torch(log), {"a": lambda: log.append("a")}, busy=True, calls=2, loops=3)
    timed = log[log.index("sync"):]
    assert timed == ["sync", ("sleep", HC.SLEEP_CYCLES), "a", "a"] * 3 + ["sync"]


def test_a_dearer_call_measures_more():
    out = HC.medians(HC.time_ways(fake_torch([]), {"cheap": lambda: None, "dear": lambda: spin(200)}, calls=20,
                                  loops=3))
    assert out["dear"] >= 200 > out["cheap"]
