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


def test_read_host_cost_times_the_read_ops_and_the_peer_beside_them(monkeypatch):
    """read_host_cost's flow on the CPU (the ops' CPU implementations, an empty op at the CPU key, a stand-in for
    DeepGEMM): every op and the floor timed in both modes; the peer's reader and schedule beside them where it
    reads the layout, and said absent (with why) where it does not import."""
    import torch

    from kgen.resolve import resolve_spec

    log: list = []
    monkeypatch.setattr(torch, "cuda", fake_torch(log).cuda)
    monkeypatch.setattr(HC, "HOST_LOOPS", 1)
    monkeypatch.setattr(HC, "HOST_CALLS", 1)
    make_case, empty_op = HC.RC.make_case, HC._empty_op
    monkeypatch.setattr(HC.RC, "make_case", lambda *a, **k: make_case(*a, **{**k, "device": "cpu"}))
    monkeypatch.setattr(HC, "_empty_op", lambda torch, schema=None: empty_op(torch, device="cpu", schema=schema))

    class Peer:
        calls: list = []

        def get_num_sms(self):
            return 132

        def get_paged_mqa_logits_metadata(self, ctx, page_size, sms):
            self.calls.append("schedule")

        def fp8_paged_mqa_logits(self, q, kv, weights, ctx, table, meta, max_seq_len, clean):
            self.calls.append("logits")

    spec = resolve_spec("specs/dsv4.yaml::dsv4_indexer_fp8")
    ops = {"indexer_logits", "indexer_topk", "indexer_topk_slots", "dispatch_floor"}
    alone = HC.read_host_cost(torch, spec)
    assert alone["peer"] == {"name": HC.RC.PEER_NAME, "present": False, "why": "deep_gemm does not import"}
    assert set(alone["us_per_call"]) == set(alone["us_per_call_gpu_busy"]) == ops
    assert (alone["batch"], alone["keys"], alone["k"]) == (HC.READ_BATCH, HC.READ_KEYS, HC.READ_K)
    assert alone["host"] == HC.host_machine()  # the figures name the machine they were taken on
    beside = HC.read_host_cost(torch, spec, peer=Peer())
    assert beside["peer"]["present"] and set(beside["us_per_call"]) == ops | {"deepgemm", "deepgemm_schedule"}
    assert {"logits", "schedule"} <= set(Peer.calls)
    assert all(v > 0 for v in beside["us_per_call_gpu_busy"].values())
    assert ("sleep", HC.SLEEP_CYCLES) in log


def test_a_busy_loop_as_long_as_the_sleep_is_counted_as_paced():
    """busy_figures: a loop that lasted as long as the sleeping kernel may have waited for it (its launches filled
    the queue); it is counted, the quick way's loops are not."""
    torch = fake_torch([])
    torch.cuda._sleep = lambda cycles: spin(3000)  # a stand-in whose sleep the host waits out at the sync
    out = HC.busy_figures(torch, {"quick": lambda: None, "slow": lambda: spin(400)}, calls=10, loops=2)
    assert out["sleep_us"] >= 3000 and out["paced_loops"] == {"slow": 2}
    assert out["us_per_call"]["slow"] >= 400 > out["us_per_call"]["quick"]


def test_host_machine_names_the_cpu_model_or_none(tmp_path):
    """The CPU model from cpuinfo's first `model name` line (a host figure is only compared on the same model); a
    file without one, or none at all, gives None and the other facts still."""
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R) Platinum 8480+\n"
                    "processor\t: 1\nmodel name\t: another\n")
    got = HC.host_machine(info)
    assert got["cpu"] == "Intel(R) Xeon(R) Platinum 8480+"
    assert got["cpus"] >= 1 and got["python"].count(".") == 2
    info.write_text("processor\t: 0\nCPU implementer\t: 0x41\n")  # an Arm host's cpuinfo has no model name
    assert HC.host_machine(info)["cpu"] is None
    assert HC.host_machine(tmp_path / "absent")["cpu"] is None
