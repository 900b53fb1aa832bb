"""`kgen bench`'s top-k rows (kgen.topk_bench) without a GPU: the ratios from given timings, the set checks
against torch.topk (ties apart, wrong sets caught, short rows), and one shape's whole flow on CPU stand-ins (SGLang's
top-k and DeepGEMM as torch on the CPU, a timer that hands out given times): which rows run, which are absent and
why, a row failing its first call recorded rather than fatal, and the run's top-level peer records."""

from __future__ import annotations

import functools
import math
import types

import pytest

from kgen import topk_bench as TB
from kgen.score import topk_slots

torch = pytest.importorskip("torch")


def test_ratios_from_given_timings():
    t = {"kgen": 10.0, "kgen_select": 4.0, "torch.topk": 8.0, "sglang_topk": 2.0, "kgen_reader+torch.topk": 20.0,
         "kgen_reader+sglang_topk": 16.0, "deepgemm+torch.topk": 25.0, "deepgemm+sglang_topk": 12.5}
    r = TB.ratios(t)
    assert r["fastest_peer"] == "deepgemm+sglang_topk" and r["ratio_kgen_to_fastest_peer"] == pytest.approx(0.8)
    assert r["deepgemm_fastest"] == "deepgemm+sglang_topk" and r["ratio_kgen_to_deepgemm_fastest"] == 0.8
    assert r["reader_fastest"] == "kgen_reader+sglang_topk" and r["ratio_kgen_to_reader_fastest"] == 10 / 16
    assert r["select_fastest_peer"] == "sglang_topk" and r["ratio_kgen_select_to_fastest"] == 2.0
    # the standalone top-ks never count as a whole step, however fast
    assert TB.ratios({"kgen": 10.0, "sglang_topk": 1.0, "kgen_reader+torch.topk": 20.0})["fastest_peer"] == \
        "kgen_reader+torch.topk"
    # a ratio whose rows are absent is left out (a bf16 variant: no DeepGEMM; kgen's own row failed: none)
    r = TB.ratios({"kgen": 6.0, "kgen_select": 3.0, "torch.topk": 9.0, "kgen_reader+torch.topk": 12.0})
    assert set(r) == {"fastest_peer", "ratio_kgen_to_fastest_peer", "reader_fastest", "ratio_kgen_to_reader_fastest",
                      "select_fastest_peer", "ratio_kgen_select_to_fastest"}
    assert r["ratio_kgen_to_reader_fastest"] == 0.5 and r["ratio_kgen_select_to_fastest"] == 3 / 9
    assert TB.ratios({"kgen_select": 3.0, "kgen_reader+torch.topk": 12.0, "graph_errors": {}}) == {}


def test_the_byte_floor_and_the_goal_against_it():
    # two sequences of 4096 and 100 keys of 132 B, three query rows, k 512, a copy of 2000 GB/s
    f = TB.floor_record(132, [4096, 100], 3, 512, 4096, 2000.0)
    assert f["key_bytes"] == 4196 * 132 and f["floor_bytes"] == 4196 * 132 + 3 * 512 * 4
    assert f["logits_bytes"] == 3 * 4096 * 4 and f["floor_us"] == pytest.approx(f["floor_bytes"] / 2e6)
    assert "floor_us" not in TB.floor_record(132, [4096], 1, 512, 4096, None)  # no copy measured: bytes only
    assert "keys_exceed_l2" not in f  # no L2 size given
    assert TB.floor_record(132, [4096, 100], 3, 512, 4096, None, l2_bytes=4196 * 132)["keys_exceed_l2"] is False
    assert TB.floor_record(132, [4096, 101], 3, 512, 4096, None, l2_bytes=4196 * 132)["keys_exceed_l2"] is True
    t = {"kgen": 30.0, "deepgemm+sglang_topk": 40.0, "kgen_reader+sglang_topk": 20.0}
    t.update(TB.ratios(t))
    g = TB.goal_record(t, "fp8_e4m3", 30.0)  # fp8: judged against DeepGEMM + the fastest top-k, 0.6x
    assert g == {"goal": 0.6, "goal_base": "deepgemm+sglang_topk", "goal_us": pytest.approx(24.0),
                 "goal_over_floor": pytest.approx(0.8), "kgen_over_floor": pytest.approx(1.0)}
    g = TB.goal_record(t, "bf16", 10.0)  # bf16 and fp4: kgen's own reader + the fastest top-k, 0.7x
    assert g["goal_base"] == "kgen_reader+sglang_topk" and g["goal_us"] == pytest.approx(14.0)
    assert g["goal_over_floor"] == pytest.approx(1.4)
    assert "goal_over_floor" not in TB.goal_record(t, "fp8_e4m3", None)
    no_dg = {"kgen": 30.0, "kgen_reader+sglang_topk": 20.0}
    assert TB.goal_record({**no_dg, **TB.ratios(no_dg)}, "fp8_e4m3", 30.0) == {}  # the base row did not run


def _check(logits, vis, got):
    got = torch.tensor(got, dtype=torch.int32)
    want = torch.topk(logits, min(got.shape[1], logits.shape[1]), dim=1)
    return TB.set_check(got, want.values, want.indices.to(torch.int32), logits, torch.tensor(vis))


def test_set_check_counts_ties_apart_and_catches_wrong_sets():
    logits = torch.tensor([[5.0, 4.0, 3.0, 3.0, 1.0, -1.0], [1.0, 2.0, 3.0, 4.0, 5.0, 6.0],
                           [9.0, 8.0, 0.0, 0.0, 0.0, 0.0], [1.0, 0.0, 0.0, 0.0, 0.0, 0.0]])
    vis = [6, 6, 6, 2]
    tie = [3, 0, 1] if int(torch.topk(logits[0], 3).indices[2]) == 2 else [2, 0, 1]  # the other of the tied keys
    same = torch.topk(logits[2], 3).indices.tolist()  # torch.topk's own pick among the tied zeros
    c = _check(logits, vis, [tie, [5, 4, 0], same, [1, -1, 0]])
    assert c["rows_checked"] == 3 and c["rows_differing"] == 2 and c["rows_differing_beyond_ties"] == 1
    assert c["keys_swapped"] == 2 and c["short_rows"] == 1 and c["short_rows_wrong"] == 0
    assert c["examples"] == [{"row": 1, "only_here": [0], "only_torch": [3], "kth": 4.0}]
    # a short row must be exactly 0..L-1 then -1
    assert _check(logits, vis, [tie, [5, 4, 3], same, [1, 0, 0]])["short_rows_wrong"] == 1
    assert _check(logits, vis, [tie, [5, 4, 3], same, [1, 5, -1]])["short_rows_wrong"] == 1


def test_set_check_a_tie_key_does_not_excuse_a_dropped_larger_one():
    logits = torch.tensor([[5.0, 4.0, 4.0, 3.0, 0.0]])
    # torch.topk's two are 0 and one of the 4.0s; selecting both 4.0s drops the 5.0: wrong, not a tie
    c = _check(logits, [5], [[1, 2]])
    assert c["rows_differing"] == 1 and c["rows_differing_beyond_ties"] == 1
    # a repeated index or one past the row's length is wrong even where the logit matches
    logits = torch.tensor([[5.0, 4.0, 3.0, 4.0, float("-inf")]])
    assert _check(logits, [4], [[0, 0]])["rows_differing_beyond_ties"] == 1
    assert _check(logits, [4], [[0, 4]])["rows_differing_beyond_ties"] == 1
    for other in (1, 3):  # keys 1 and 3 tie at the k-th value: either is right
        assert _check(logits, [4], [[0, other]])["rows_differing_beyond_ties"] == 0


# ---------------------------------------------------------------------------------------------
# one shape on CPU stand-ins


class FakeSGLang:
    """SGLang's top-k as Peer presents it (prepare / launch / record), its kernels torch.topk on the CPU.
    `plans`: the plan writes its metadata (SGLang plans only beyond its cluster pool); `wrong`: the top-k picks
    each row's smallest keys (a set check must catch it); `launch_fails`: launch() raises (SGLang's host check)."""

    def __init__(self, plans: bool = False, wrong: bool = False, launch_fails: bool = False):
        self.plans, self.wrong, self.launch_fails = plans, wrong, launch_fails

    def record(self):
        return {"name": "fake sglang", "present": True, "sglang": "0.5.23"}

    def _select(self, scores, vis, out):
        out.fill_(-1)
        for r in range(scores.shape[0]):
            n = int(vis[r])
            idx = torch.topk(scores[r, :n], min(n, out.shape[1]), largest=not self.wrong).indices
            out[r, :idx.numel()] = idx.to(torch.int32)

    def prepare(self, scores, vis, k, page_table=None, page_size=1):
        out = torch.empty((scores.shape[0], k), dtype=torch.int32)
        meta = torch.zeros((scores.shape[0] + 1, 2), dtype=torch.int32)

        def plan():
            if self.plans:
                meta[0] = torch.tensor([0, scores.shape[0]])

        def select():
            self._select(scores, vis, out)
            if page_table is not None:  # SGLang's transform: the table a row per query row
                out.copy_(topk_slots(out, page_table, 1, page_size))

        return plan, select, out, meta

    def launch(self, scores, vis, out, meta):
        if self.launch_fails:
            raise RuntimeError("SGLang's top-k failed: scores' row stride must be a multiple of 4")
        self._select(scores, vis, out)


class FakeDeepGEMM:
    """fp8_paged_mqa_logits as the reader's logits (the stand-ins' own) in DeepGEMM's wider, aligned rows."""

    def __init__(self, made):
        self.made = made

    def get_num_sms(self):
        return 132

    def get_paged_mqa_logits_metadata(self, ctx, page, sms):
        return None

    def fp8_paged_mqa_logits(self, *args):
        logits = self.made["logits"]
        rows, width = logits.shape
        out = logits.new_full((rows, width + 61), float("-inf"))
        out[:, :width] = logits
        return out


class GivenTimes:
    """A timer that calls each row once and hands out the given times (ms) in turn, recording them."""

    def __init__(self, ms):
        self.ms, self.given = list(ms), []

    def _next(self, fn):
        fn()
        self.given.append(self.ms.pop(0))
        return {"ms": self.given[-1]}

    def cold(self, fn, **kw):
        return self._next(fn)

    def warm(self, fn, **kw):
        r = self._next(fn)
        r["graph_error"] = "no capture here"
        return r


@pytest.fixture
def cpu_rows(monkeypatch):
    """kgen's reader, top-k and fused op as the Torch path and the reference on the CPU; returns what was made."""
    from kgen import reader_check as RC
    from kgen.ops import topk as T
    from kgen.score import indexer_logits_torch, topk_reference, topk_slots

    made: dict = {}
    orig = RC.make_case

    def make_case(*a, **kw):
        made["args"] = orig(*a, **kw, device="cpu")
        return made["args"]

    def launcher(spec, args):  # the case's reader, or (a wider max_seq_len) the one whose rows SGLang reads
        logits = indexer_logits_torch(spec, *args)
        made["logits" if args[-1] == made["args"][-1] else "aligned_logits"] = logits
        return (lambda: None), logits

    def prepare_select(spec, logits, seq_lens, k, block_table=None):
        next_n = logits.shape[0] // seq_lens.shape[0]
        out = topk_reference(logits, seq_lens, next_n, k).to(torch.int32)
        if block_table is not None:
            out = topk_slots(out, block_table, next_n, spec.layout.page_size)
        return (lambda: None), out

    def prepare(spec, q, w, cache, table, seq_lens, msl, k, slots=False):
        return prepare_select(spec, indexer_logits_torch(spec, q, w, cache, table, seq_lens, msl), seq_lens, k,
                              block_table=table if slots else None)

    monkeypatch.setattr(RC, "make_case", functools.wraps(orig)(make_case))
    monkeypatch.setattr(RC, "launcher", launcher)
    monkeypatch.setattr(T, "prepare", prepare)
    monkeypatch.setattr(T, "prepare_select", prepare_select)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    return made


@pytest.fixture(scope="module")
def fp8():
    from kgen.resolve import resolve_spec

    return resolve_spec("specs/dsv4.yaml::dsv4_indexer_fp8")


def _case(spec, batch, keys, dist, next_n, k, *, sglang=None, dg=None, ms=None, copy_gbps=None):
    timer = GivenTimes(ms or [float(i + 1) for i in range(40)])
    return TB.bench_topk_case(torch, timer, spec, batch, keys, dist, next_n, k, peer=dg, sglang=sglang,
                              copy_gbps=copy_gbps), timer


def _every_row_said(e):
    for how in ("cold", "graph"):
        timed = {n for n in e[how] if n in TB.ROWS}
        assert timed.isdisjoint(e["absent"]) and timed | set(e["absent"]) == set(TB.ROWS), (how, timed, e["absent"])


def test_every_row_beside_both_peers(cpu_rows, fp8):
    # ms in row order: kgen, kgen_select, torch.topk, kgen_reader+torch.topk, kgen_slots, kgen_select_slots,
    # sglang_plan, sglang_topk, sglang_topk_slots, kgen_reader+sglang_topk, deepgemm+torch.topk, deepgemm+sglang_topk
    cold = [0.007, 0.003, 0.009, 0.002, 0.0105, 0.0045, 0.008, 0.001, 0.0015, 0.006, 0.005, 0.004]
    graph = [0.004, 0.005, 0.006, 0.001, 0.008, 0.0065, 0.008, 0.002, 0.0026, 0.009, 0.003, 0.007]
    e, timer = _case(fp8, 2, 4096, "equal", 1, 512, sglang=FakeSGLang(plans=True), dg=FakeDeepGEMM(cpu_rows),
                     ms=cold + graph, copy_gbps=1000.0)
    assert e["sglang_scores"] == "the logits" and e["sglang_plan_written"] and e["absent"] == {}
    _every_row_said(e)
    assert e["peer"] == {"name": "deep_gemm.fp8_paged_mqa_logits", "present": True}
    c, g = e["cold"], e["graph"]
    assert [round(c[n], 6) for n in c if n in TB.ROWS] == [1e3 * v for v in cold]
    assert c["fastest_peer"] == c["reader_fastest"] == "kgen_reader+torch.topk"
    assert c["ratio_kgen_to_fastest_peer"] == pytest.approx(3.5) == c["ratio_kgen_to_reader_fastest"]
    assert c["deepgemm_fastest"] == "deepgemm+sglang_topk"
    assert c["ratio_kgen_to_deepgemm_fastest"] == pytest.approx(1.75)
    assert c["select_fastest_peer"] == "sglang_topk" and c["ratio_kgen_select_to_fastest"] == pytest.approx(3.0)
    assert c["ratio_kgen_slots_to_kgen"] == pytest.approx(1.5)
    assert c["slots_peer"] == "sglang_topk_slots" and c["ratio_kgen_select_slots_to_sglang"] == pytest.approx(3.0)
    assert g["fastest_peer"] == g["reader_fastest"] == "kgen_reader+torch.topk"
    assert g["ratio_kgen_to_fastest_peer"] == pytest.approx(4.0) == g["ratio_kgen_to_reader_fastest"]
    assert g["deepgemm_fastest"] == "deepgemm+torch.topk"
    assert g["ratio_kgen_to_deepgemm_fastest"] == pytest.approx(4 / 3)
    assert g["select_fastest_peer"] == "sglang_topk" and g["ratio_kgen_select_to_fastest"] == pytest.approx(2.5)
    assert g["ratio_kgen_slots_to_kgen"] == pytest.approx(2.0)
    assert g["ratio_kgen_select_slots_to_sglang"] == pytest.approx(2.5)
    assert e["slots_check"] == {"kgen_slots": 0, "kgen_select_slots": 0, "sglang_topk_slots": 0}
    assert set(g["graph_errors"]) == set(TB.ROWS)
    for name in ("check_kgen", "check_kgen_select", "check_sglang"):
        assert e[name]["rows_checked"] == 2 and e[name]["rows_differing_beyond_ties"] == 0, (name, e[name])
    assert e["rows_checked"] == 2 and e["rows_differing_from_torch_topk"] == 0  # the keys kept from before
    # the byte floor: two sequences of 4096 keys at 132 B and two rows of 512 indices, at 1000 GB/s
    assert e["floor_bytes"] == 2 * 4096 * 132 + 2 * 512 * 4 and e["floor_us"] == pytest.approx(e["floor_bytes"] / 1e6)
    assert c["goal_base"] == "deepgemm+sglang_topk" and c["goal_us"] == pytest.approx(0.6 * 4.0)
    assert c["goal_over_floor"] == pytest.approx(2.4 / e["floor_us"]) and c["kgen_over_floor"] == pytest.approx(
        7.0 / e["floor_us"])
    line = TB.topk_line(e)
    assert "B=2" in line and "kgen_to_reader_fastest 3.50" in line and "sglang 0/2+0/0" in line
    assert f"floor {e['floor_us']:.1f} us" in line and f"goal/floor {c['goal_over_floor']:.2f}" in line
    assert "goal_us" not in line


def test_sglang_rows_absent_without_the_peer_and_deepgemm_past_next_n_2(cpu_rows, fp8):
    e, _ = _case(fp8, 1, 4096, "pm30", 4, 2048, dg=FakeDeepGEMM(cpu_rows))
    _every_row_said(e)
    assert set(e["absent"]) == set(TB.SGLANG_ROWS) | set(TB.DEEPGEMM_ROWS)
    assert "SGLang top-k peer is absent" in e["absent"]["sglang_topk"]
    assert e["absent"]["deepgemm+torch.topk"] == "DeepGEMM takes next_n <= 2" == e["peer"]["why"]
    assert "check_sglang" not in e and e["check_kgen"]["short_rows"] + e["check_kgen"]["rows_checked"] == 4
    assert set(e["cold"]) >= {"reader_fastest", "select_fastest_peer"} and "deepgemm_fastest" not in e["cold"]


def test_ragged_rows_sglang_reads_a_reader_of_aligned_rows_in_place(cpu_rows, fp8):
    e, _ = _case(fp8, 2, 4096, "pm30", 2, 512, sglang=FakeSGLang(), dg=FakeDeepGEMM(cpu_rows))
    msl = e["max_seq_len"]
    assert msl % 4 and e["sglang_reader_max_seq_len"] == -(-msl // 4) * 4 and e["sglang_scores"] == "the logits"
    wide, logits = cpu_rows["aligned_logits"], cpu_rows["logits"]
    assert torch.equal(wide[:, :msl], logits) and bool((wide[:, msl:] == -math.inf).all())  # the same scores
    assert set(e["absent"]) == {"sglang_plan"} and "kgen_reader+sglang_topk" in e["cold"]
    assert e["check_sglang"]["rows_checked"] == 4 and e["check_sglang"]["rows_differing_beyond_ties"] == 0


def test_the_top_k_cluster_of_the_launch_is_recorded(cpu_rows, fp8, monkeypatch):
    from kgen.ops import topk as T

    e, _ = _case(fp8, 2, 4096, "equal", 1, 512)
    assert "topk_cluster" not in e  # a launcher that says no grid (the CPU stand-in): nothing claimed
    select = T.prepare_select

    def planned(*a, **kw):
        launch, out = select(*a, **kw)
        recorded = lambda: launch()  # noqa: E731
        recorded.grid = (4, a[1].shape[0], 1)
        return recorded, out

    monkeypatch.setattr(T, "prepare_select", planned)
    e, _ = _case(fp8, 2, 4096, "equal", 1, 512)
    assert e["topk_cluster"] == 4


def test_a_row_failing_its_first_call_is_absent_not_fatal(cpu_rows, fp8):
    e, _ = _case(fp8, 2, 4096, "equal", 1, 512, sglang=FakeSGLang(launch_fails=True), dg=FakeDeepGEMM(cpu_rows))
    _every_row_said(e)
    assert set(e["absent"]) == {"sglang_plan", "deepgemm+sglang_topk"}
    assert e["absent"]["deepgemm+sglang_topk"].startswith("RuntimeError: SGLang's top-k failed")
    assert e["cold"]["deepgemm_fastest"] == "deepgemm+torch.topk"


def test_the_set_check_catches_a_wrong_peer(cpu_rows, fp8):
    e, _ = _case(fp8, 2, 4096, "equal", 1, 512, sglang=FakeSGLang(wrong=True))
    assert e["check_sglang"]["rows_differing_beyond_ties"] == 2 and e["check_sglang"]["examples"]
    assert e["check_kgen"]["rows_differing_beyond_ties"] == 0
    assert "sglang 2/2" in TB.topk_line(e)
    assert e["slots_check"] == {"kgen_slots": 0, "kgen_select_slots": 0, "sglang_topk_slots": 2}  # its slots too


def test_a_bf16_variant_gets_the_reader_ratio(cpu_rows):
    from kgen.resolve import resolve_spec

    bf16 = resolve_spec("specs/dsv4.yaml::dsv4_indexer_bf16")
    e, _ = _case(bf16, 1, 4096, "equal", 1, 512, sglang=FakeSGLang(), dg=FakeDeepGEMM(cpu_rows))
    assert e["store"] == "bf16" and "deepgemm+torch.topk" in e["absent"] and "kgen_reader+sglang_topk" not in \
        e["absent"]
    assert e["graph"]["reader_fastest"] in TB.READER_ROWS and "ratio_kgen_to_reader_fastest" in e["graph"]


# ---------------------------------------------------------------------------------------------
# the run


def test_peer_state_records_why_it_is_absent(monkeypatch):
    off = TB.PeerState(False)
    assert off.peer is None and off.record()["why"] == "disabled (KGEN_BENCH_PEER=0)"
    assert off.record()["present"] is False and off.record()["name"] == TB.P.NAME
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    on = TB.PeerState(True)
    assert on.peer is None and "no CUDA device" in on.why and on.load_s is not None
    given = TB.PeerState(True, peer=FakeSGLang()).record()
    assert given["present"] is True and given["name"] == "fake sglang" and given["why"] is None
    monkeypatch.setenv("KGEN_BENCH_PEER", "0")
    assert not TB.peer_enabled()
    monkeypatch.setenv("KGEN_BENCH_PEER", "1")
    assert TB.peer_enabled()


def test_bench_topk_records_both_peers_and_stops_on_a_lost_context(cpu_rows, fp8, monkeypatch):
    cases = [(fp8, 1, 4096, "equal", 1, 512), (fp8, 2, 4096, "pm30", 2, 512)]
    seen = []
    out = TB.bench_topk([fp8], cases=cases, timer=GivenTimes([1.0] * 80), say=seen.append,
                        sglang=TB.PeerState(peer=FakeSGLang()), deepgemm=None, on_result=lambda o: None,
                        copy={"gbps": 2000.0})
    assert out["peer"]["sglang"]["present"] is True
    assert out["copy"] == {"gbps": 2000.0} and out["byte_model"] == TB.BYTE_MODEL
    assert out["results"][0]["floor_us"] == pytest.approx((4096 * 132 + 512 * 4) / 2e6)  # each shape at that speed
    dg = {"name": "deep_gemm.fp8_paged_mqa_logits", "present": False, "why": "not asked"}
    assert out["peer"]["deepgemm"] == dg and {n: out["peer"][n] for n in dg} == dg  # the keys from before kept
    assert [e["batch"] for e in out["results"]] == [1, 2] and "stopped" not in out
    assert seen[0].startswith(f"top-k peer {TB.P.NAME}: present")

    def lost(*a, **kw):
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    monkeypatch.setattr(TB, "bench_topk_case", lost)
    out = TB.bench_topk([fp8], cases=cases, timer=GivenTimes([]), say=seen.append,
                        sglang=TB.PeerState(False), deepgemm=None)
    assert len(out["results"]) == 1 and "illegal memory access" in out["results"][0]["error"]
    assert out["stopped"].startswith("the CUDA context is lost after 1 of 2")


def test_topk_cases_cover_fp8_fully_and_the_others_at_two_shapes():
    from kgen.resolve import resolve_spec

    fp8, bf16 = (resolve_spec(f"specs/dsv4.yaml::dsv4_indexer_{s}") for s in ("fp8", "bf16"))
    cs = TB.topk_cases([bf16, fp8])
    assert len([c for c in cs if c[0] is fp8]) == len(TB.TOPK_BENCH_SHAPES) * 2 * 2
    assert {c[1:3] for c in cs if c[0] is bf16} == {(1, 65536), (32, 65536)}
    assert {c[3:5] for c in cs} == {("equal", 1), ("pm30", 2)}


def test_kgen_bench_read_side_runs_the_topk_with_the_default_batches_only(monkeypatch, fp8):
    from kgen import bench

    calls, hosts = [], []
    timer = types.SimpleNamespace(torch="the torch module")
    monkeypatch.setattr(bench, "bench_readers", lambda specs, timer, copy, **kw: {"results": []})
    monkeypatch.setattr(TB, "bench_topk", lambda specs, **kw: calls.append((specs, kw)) or {"results": ["t"]})
    monkeypatch.setattr(bench, "read_host_cost", lambda torch, spec, peer: hosts.append((torch, spec)) or {
        "variant": spec.name, "us_per_call": {"indexer_topk": 9.0}, "us_per_call_gpu_busy": {"indexer_topk": 7.0}})
    monkeypatch.setenv("KGEN_BENCH_PEER", "0")
    out = bench.read_side([fp8], timer, {"gbps": 3000.0})
    assert out["topk"] == {"results": ["t"]} and calls[0][0] == [fp8]
    assert calls[0][1]["copy"] == {"gbps": 3000.0}  # the shapes' byte floor at the run's copy speed
    assert calls[0][1]["sglang"].peer is None and "KGEN_BENCH_PEER=0" in calls[0][1]["sglang"].why
    assert hosts == [("the torch module", fp8)] and out["host"][0]["us_per_call"] == {"indexer_topk": 9.0}
    assert "topk" not in bench.read_side([fp8], timer, {}, shapes=((1, 4096),))
    assert "host" not in bench.read_side([fp8], timer, {}, tunes=(None, {"kReaderWgStages": 3}))
    assert len(calls) == 1 and len(hosts) == 1


def test_kgen_bench_records_a_failed_host_measurement_and_goes_on(monkeypatch, fp8):
    from kgen import bench

    def fails(torch, spec, peer):
        raise RuntimeError("CUDA error: out of memory")

    monkeypatch.setattr(bench, "bench_readers", lambda specs, timer, copy, **kw: {"results": []})
    monkeypatch.setattr(TB, "bench_topk", lambda specs, **kw: {"results": []})
    monkeypatch.setattr(bench, "read_host_cost", fails)
    out = bench.read_side([fp8], types.SimpleNamespace(torch=None), {})
    assert out["host"] == [{"variant": fp8.name, "error": "RuntimeError: CUDA error: out of memory"}]
