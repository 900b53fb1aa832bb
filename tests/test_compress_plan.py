"""positions.source compress_plan: SGLang's prefill CompressPlan rows (one per compressed key) in
place of the positions array, the slot read from out_loc at the row's ragged_id. The plan's bytes,
plans laid out the way SGLang's planner lays them out, the reference's reading, the real kernel on
the CPU (tests/cpu_shim, under ASan) byte for byte against it, and the op's CPU path."""

from __future__ import annotations

import shutil

import pytest

torch = pytest.importorskip("torch")

import emulate  # noqa: E402
from kgen import inputs as I  # noqa: E402
from kgen import layout as L  # noqa: E402
from kgen import ops  # noqa: E402
from kgen import reference as R  # noqa: E402
from kgen.abi import NORM_ROPE_STORE  # noqa: E402
from kgen.rules import check_variant  # noqa: E402
from kgen.spec import Spec  # noqa: E402

BASE = {"kgen": 1, "name": "cplan", "input_dtype": "fp32", "head_dim": 128,
        "rope": {"dim": 64, "style": "interleaved", "placement": "last"}, "hadamard": True,
        "positions": {"source": "compress_plan", "compress_ratio": 4},
        "store": {"dtype": "fp8_e4m3", "scale": "fp32", "block": 128}, "layout": {"page_size": 64},
        "launch": {"warps_per_block": 4, "tokens_per_warp": 4}, "targets": ["sm_90a"]}
INVALID = L.COMPRESS_PLAN_INVALID

needs_gxx = pytest.mark.skipif(shutil.which("g++") is None, reason="no host C++ compiler")


def spec(**over) -> Spec:
    return Spec.model_validate({**BASE, **over})


def fields(plan: torch.Tensor) -> dict[str, list[int]]:
    """The five fields of each row, decoded here independently of kgen (struct offsets 0/4/6/8/12)."""
    b = plan.to(torch.int64)
    u = lambda o, n: sum(b[:, o + i] << (8 * i) for i in range(n))  # noqa: E731
    s32 = lambda v: torch.where(v >= 2**31, v - 2**32, v)  # noqa: E731
    return {"seq_len": u(0, 4).tolist(), "ragged_id": u(4, 2).tolist(), "buffer_len": u(6, 2).tolist(),
            "read_page_0": s32(u(8, 4)).tolist(), "read_page_1": s32(u(12, 4)).tolist()}


def test_plan_layout_is_sglangs_16_bytes():
    plan = R.make_compress_plan(torch.tensor([8, INVALID]), torch.tensor([0x1234, 0]), torch.tensor([3, 0]),
                                torch.tensor([7, -1]), torch.tensor([9, -1]))
    assert plan.shape == (2, L.COMPRESS_PLAN_BYTES) == (2, 16) and plan.dtype == torch.uint8
    # little-endian uint32 seq_len, uint16 ragged_id, uint16 buffer_len, int32 read_page_0 / read_page_1
    assert plan[0].tolist() == [8, 0, 0, 0, 0x34, 0x12, 3, 0, 7, 0, 0, 0, 9, 0, 0, 0]
    # the padding row: SGLang's CompressPlan::invalid() = {-1u, 0, 0, -1, -1}
    assert plan[1].tolist() == [255] * 4 + [0] * 4 + [255] * 8
    with pytest.raises(ValueError, match="uint16"):
        R.make_compress_plan(*(torch.tensor([v]) for v in (4, 1 << 16, 0, 0, 0)))


@pytest.mark.parametrize("n,ratio", [(1, 4), (7, 4), (129, 4), (300, 128)])
def test_plans_are_laid_out_like_sglangs_planner(n, ratio):
    """One row per query token whose position + 1 is a multiple of R (seq_len = position + 1), each
    ragged id once, then padding rows up to N; the rows in no particular order."""
    s = spec(positions={"source": "compress_plan", "compress_ratio": ratio})
    plan = I.compress_plan_for(s, n, 4096, torch.Generator().manual_seed(n))
    assert plan.shape == (n, 16)
    f = fields(plan)
    k = sum(v != INVALID for v in f["seq_len"])
    assert all(v == INVALID for v in f["seq_len"][k:])  # padding only after the keys
    assert all(f[c][k:] == [-1] * (n - k) for c in ("read_page_0", "read_page_1"))
    keys = f["seq_len"][:k]
    assert all(v % ratio == 0 and ratio <= v <= 4096 for v in keys)
    ids = f["ragged_id"][:k]
    assert len(set(ids)) == k and all(0 <= i < n for i in ids)
    window = 2 * ratio if ratio == 4 else ratio
    assert all(0 <= b < window for b in f["buffer_len"][:k])
    if n >= 129 and ratio == 4:  # (at ratio 128, 300 tokens hold one to three keys)
        assert n / ratio / 2 <= k <= n / ratio * 1.5 + 2  # about one key per R tokens (requests: their edges)
        assert sorted(ids) != ids  # the keys are not in ragged order


def test_reference_reads_position_and_slot_from_the_row():
    s = spec()
    #           a key  padding  seq_len < R  ragged >= N  a key (the last ragged id)  seq_len 0
    seq = torch.tensor([12, INVALID, 3, 8, 4, 0])
    rid = torch.tensor([2, 0, 1, 6, 5, 4])
    plan = R.make_compress_plan(seq, rid, torch.zeros(6), torch.zeros(6), torch.zeros(6))
    out_loc = torch.tensor([100, 101, 102, 103, 104, 105])
    pos, slots = R.compress_plan_slots(s, plan, out_loc)
    assert slots.tolist() == [102, -1, -1, -1, 105, -1]
    assert pos.tolist() == [8, 0, 0, 0, 0, 0]
    with pytest.raises(ValueError, match=r"uint8 \[N, 16\]"):
        R.compress_plan_slots(s, plan[:, :8], out_loc)


def test_reference_is_the_positions_reference_at_the_plans_slots():
    """The plan's reference equals the positions-array reference at (seq_len - R, out_loc[ragged_id])."""
    s = spec()
    arr = s.model_copy(update={"positions": s.positions.model_copy(update={"source": "array"})})
    inp = I.make_inputs(s, 300, seed=4)
    pos, slots = R.compress_plan_slots(s, inp["positions"], inp["out_loc"])
    kept = int((slots >= 0).sum())
    assert 40 < kept < 80  # ~one key per 4 query tokens, some of their slots skipped by out_loc
    a, b = inp["cache"].clone(), inp["cache"].clone()
    R.norm_rope_store(s, inp["x"], inp["weight"], None, inp["freqs"], inp["positions"], inp["out_loc"], a)
    R.norm_rope_store(arr, inp["x"], inp["weight"], None, inp["freqs"], pos, slots, b)
    assert torch.equal(a, b) and not torch.equal(a, inp["cache"])
    # and not the positions reference at the row's own index (the ragged id matters)
    c = inp["cache"].clone()
    own = torch.where(slots >= 0, inp["out_loc"], torch.full_like(slots, -1))
    R.norm_rope_store(arr, inp["x"], inp["weight"], None, inp["freqs"], pos, own, c)
    assert not torch.equal(a, c)


def test_rule_positions():
    assert not check_variant(spec())[1]
    msgs = {p.message for p in check_variant(spec(rope={"dim": 0}, hadamard=False))[1] if p.rule == "positions"}
    assert any("compress plan" in m and "rope.dim is 0" in m for m in msgs)
    bad = check_variant(spec(positions={"source": "compress_plan", "compress_ratio": 0}))[1]
    assert [p.loc for p in bad if p.rule == "positions"] == [("positions", "compress_ratio")]


def test_op_takes_the_plan_in_place_of_positions():
    s = spec()
    inp = I.make_inputs(s, 5, seed=1)
    args = (inp["x"], inp["weight"], None, inp["freqs"], inp["positions"], inp["out_loc"], inp["cache"])
    ops.check_arguments(s, *args, require_cuda=False)
    with pytest.raises(ops.ArgumentError, match=r"^positions: expected uint8 \[N, 16\]"):
        ops.check_arguments(s, *args[:4], torch.zeros(5, dtype=torch.int64), *args[5:], require_cuda=False)
    with pytest.raises(ops.ArgumentError, match=r"^out_loc: "):  # a slot per query token: [N] like the plan
        ops.check_arguments(s, *args[:5], torch.zeros(6, dtype=torch.int64), args[6], require_cuda=False)


def test_cpu_op_writes_the_reference_bytes():
    s = spec()
    inp = I.make_inputs(s, 129, seed=2)
    args = tuple(v for k, v in NORM_ROPE_STORE.arguments(s, inp).items() if k != "cache")
    ref = inp["cache"].clone()
    R.norm_rope_store(s, *args, ref)
    assert not torch.equal(ref, inp["cache"])
    out = inp["cache"].clone()
    ops.norm_rope_store(s, *args, out, check_bounds=True)
    assert torch.equal(out, ref)


@needs_gxx
@pytest.mark.parametrize("over", [{}, {"input_dtype": "bf16", "head_dim": 512, "hadamard": False,
                                      "rope": {"dim": 64, "style": "neox", "placement": "last"},
                                      "positions": {"source": "compress_plan", "compress_ratio": 128},
                                      "store": {"dtype": "fp8_e4m3", "scale": "ue8m0", "block": 64,
                                                "rope_dtype": "bf16"},
                                      "layout": {"page_size": 2, "page_align": 576},
                                      "launch": {"warps_per_block": 2, "tokens_per_warp": 3}}],
                         ids=["indexer_c4", "latent_c128"])
def test_kernel_on_the_cpu_writes_the_reference_bytes(over, tmp_path):
    """The real kernel (CPU shim, ASan + UBSan: every buffer exactly sized) on SGLang-shaped plans:
    keys in planner order, padding rows, slots skipped by out_loc; byte-equal to the reference."""
    s = spec(**over)
    exe = emulate.build(s, tmp_path, sanitize=True)
    for n in (1, 7, 37, 129):
        assert emulate.launch(s, exe, tmp_path, n, seed=n) == (0, []), n


@needs_gxx
def test_kernel_skips_rows_that_would_read_outside(tmp_path):
    """Rows SGLang's planner never writes - a ragged id past out_loc, seq_len < R, padding between
    keys - are skipped without a read outside a buffer (ASan), and the keys around them are stored."""
    s = spec()
    n = 9
    inp = I.make_inputs(s, n, seed=5, skip_fraction=0.0)
    seq = torch.tensor([8, 200, INVALID, 16, 2, 44, 0, 36, 4])
    rid = torch.tensor([3, 0xFFFF, 0, 8, 1, 9, 2, 0, 7])
    inp["positions"] = R.make_compress_plan(seq, rid, torch.zeros(n), torch.zeros(n), torch.zeros(n))
    _, slots = R.compress_plan_slots(s, inp["positions"], inp["out_loc"])
    assert (slots >= 0).tolist() == [True, False, False, True, False, False, False, True, True]
    exe = emulate.build(s, tmp_path, sanitize=True)
    assert emulate.launch(s, exe, tmp_path, n, inputs=inp) == (0, [])
