"""The read side's batches on the CPU: the lengths `kgen bench` draws (kgen.reader_check.batch_lens) and issue 20's
goals judged from its entries (batch_goals): which entries each goal reads, its bound, and the MTP cost on the same
keys."""

from __future__ import annotations

import pytest

from kgen import reader_check as rc


@pytest.mark.parametrize("dist", ["equal", "pm30", "uniform"])
def test_batch_lens_one_draw_for_every_next_n(dist):
    one = rc.batch_lens(128, 16384, dist, seed=0)
    for n in (2, 4):
        lens = rc.batch_lens(128, 16384, dist, seed=0, next_n=n)
        assert min(lens) >= n  # a sequence holds its MTP tokens' keys
        assert lens == [max(n, x) for x in one]  # the same sequences, only the shortest raised to next_n
    assert rc.batch_lens(128, 16384, dist, seed=1) != one or dist == "equal"


def test_batch_lens_rejects_an_unknown_mix():
    with pytest.raises(ValueError, match="equal, pm30 or uniform"):
        rc.batch_lens(4, 4096, "zipf", seed=0)


def entry(variant, store, b, k, dist, n, cold_ms, graph_ms, *, keys=None, speed=None, copy=None):
    e = {"variant": variant, "store": store, "batch": b, "keys": k, "lengths": dist, "next_n": n,
         "total_keys": keys if keys is not None else b * k,
         "cold": {"ms": cold_ms}, "graph": {"ms": graph_ms}}
    if copy is not None:
        e["cold"]["fraction_of_copy"], e["graph"]["fraction_of_copy"] = copy
    e["peer"] = {"present": True, "speed": dict(zip(("cold", "graph"), speed))} if speed else {"present": False}
    return e


def rows(goals, name, **where):
    return [r for r in goals[name] if all(r[k] == v for k, v in where.items())]


def test_peer_speed_asks_more_where_the_launch_is_latency_bound():
    goals = rc.batch_goals([
        entry("fp8", "fp8_e4m3", 32, 65536, "equal", 1, 1.0, 1.0, speed=(1.01, 0.99)),
        entry("fp8", "fp8_e4m3", 1, 65536, "equal", 1, 1.0, 1.0, speed=(1.1, 1.3)),
        entry("fp8", "fp8_e4m3", 32, 4096, "equal", 1, 1.0, 1.0, speed=(1.25, 1.0)),
        entry("fp8", "fp8_e4m3", 32, 65536, "uniform", 1, 1.0, 1.0, speed=(1.0, 1.0)),
        entry("bf16", "bf16", 32, 65536, "equal", 1, 1.0, 1.0),  # no peer: no speed goal
    ])
    by = {(r["batch"], r["keys"], r["lengths"]): r for r in goals["peer_speed"]}
    assert len(by) == 4
    assert by[(32, 65536, "equal")]["goal"] == rc.GOAL_PEER_SPEED
    assert by[(32, 65536, "equal")]["met"] == {"cold": True, "graph": False}
    for shape in ((1, 65536, "equal"), (32, 4096, "equal"), (32, 65536, "uniform")):
        assert by[shape]["goal"] == rc.GOAL_PEER_SPEED_LATENCY
    assert by[(1, 65536, "equal")]["met"] == {"cold": False, "graph": True}
    assert "goal_fraction_of_copy" not in by[(1, 65536, "equal")]  # no byte model in the entry: not judged


def test_peer_speed_says_what_fraction_of_copy_its_goal_asks():
    # kgen at 0.87 / 0.95 of copy and as fast as the peer: 1.2x the peer asks 1.04 / 1.14 of copy, past copy cold
    ragged = entry("fp8", "fp8_e4m3", 32, 65536, "pm30", 1, 1.0, 1.0, speed=(1.0, 1.0), copy=(0.87, 0.95))
    # half the peer's speed at 0.2 of copy: the peer is at 0.4, the goal asks 0.48
    small = entry("fp8", "fp8_e4m3", 1, 4096, "equal", 1, 1.0, 1.0, speed=(0.5, 0.5), copy=(0.2, 0.2))
    goals = rc.batch_goals([ragged, small])
    by = {r["batch"]: r for r in goals["peer_speed"]}
    assert by[32]["goal_fraction_of_copy"] == pytest.approx({"cold": 1.2 * 0.87, "graph": 1.2 * 0.95})
    assert by[1]["goal_fraction_of_copy"] == pytest.approx({"cold": 0.48, "graph": 0.48})
    assert rc.goals_line(goals) == "goals met (cold / graph): peer_speed 0 / 0 of 2 (past copy's speed cold at 1)"


def test_mtp_cost_on_the_same_keys_and_per_key_where_they_differ():
    goals = rc.batch_goals([
        entry("fp8", "fp8_e4m3", 32, 65536, "equal", 1, 2.0, 1.0),
        entry("fp8", "fp8_e4m3", 32, 65536, "equal", 2, 2.2, 1.2),
        entry("fp8", "fp8_e4m3", 32, 65536, "equal", 4, 2.6, 1.5),
        entry("fp8", "fp8_e4m3", 128, 16384, "uniform", 1, 1.0, 1.0, keys=1000),
        entry("fp8", "fp8_e4m3", 128, 16384, "uniform", 2, 1.2, 1.2, keys=1200),  # an older run's second draw
        entry("fp8", "fp8_e4m3", 1, 4096, "equal", 2, 1.0, 1.0),  # no next_n 1 entry of its shape: not judged
    ])
    two = rows(goals, "mtp_cost", batch=32, next_n=2)[0]
    assert two["same_keys"] and two["goal"] == rc.GOAL_MTP_COST[2]
    assert two["value"] == pytest.approx({"cold": 1.1, "graph": 1.2})
    assert two["met"] == {"cold": True, "graph": False}
    four = rows(goals, "mtp_cost", batch=32, next_n=4)[0]
    assert four["goal"] == rc.GOAL_MTP_COST[4] and four["met"] == {"cold": True, "graph": False}
    ragged = rows(goals, "mtp_cost", batch=128)[0]
    assert not ragged["same_keys"]
    assert ragged["value"] == pytest.approx({"cold": 1.0, "graph": 1.0})  # 1.2x the time for 1.2x the keys
    assert len(goals["mtp_cost"]) == 3


def test_bf16_copy_from_32_x_64k_and_fp4_per_key_against_fp8():
    goals = rc.batch_goals([
        entry("bf16", "bf16", 32, 65536, "pm30", 1, 1.0, 1.0, copy=(0.86, 0.84)),
        entry("bf16", "bf16", 64, 32768, "equal", 1, 1.0, 1.0, copy=(0.9, 0.9)),
        entry("bf16", "bf16", 1, 1048576, "equal", 1, 1.0, 1.0, copy=(0.5, 0.5)),  # below 32 x 64K keys: no goal
        entry("fp8", "fp8_e4m3", 32, 65536, "pm30", 2, 1.0, 2.0),
        entry("fp4", "fp4_e2m1", 32, 65536, "pm30", 2, 0.9, 3.0),
        entry("fp4", "fp4_e2m1", 32, 4096, "equal", 1, 1.0, 1.0),  # no fp8 entry of its shape
        {"variant": "fp8", "batch": 1, "keys": 4096, "lengths": "equal", "next_n": 1, "error": "boom"},
    ])
    bf16 = goals["bf16_fraction_of_copy"]
    assert [(r["batch"], r["keys"]) for r in bf16] == [(32, 65536), (64, 32768)]
    assert bf16[0]["met"] == {"cold": True, "graph": False} and bf16[0]["goal"] == rc.GOAL_BF16_COPY
    (fp4,) = goals["fp4_per_key_over_fp8"]
    assert fp4["fp8"] == "fp8" and fp4["value"] == pytest.approx({"cold": 0.9, "graph": 1.5})
    assert fp4["met"] == {"cold": True, "graph": False}


def test_goals_line_counts_each_mode():
    goals = rc.batch_goals([entry("fp8", "fp8_e4m3", 32, 65536, "equal", 1, 1.0, 1.0, speed=(1.01, 0.99)),
                            entry("fp8", "fp8_e4m3", 64, 32768, "equal", 1, 1.0, 1.0, speed=(1.02, 1.03))])
    assert rc.goals_line(goals) == "goals met (cold / graph): peer_speed 2 / 1 of 2"
    assert rc.goals_line(rc.batch_goals([])) == "goals met (cold / graph): none judged"
