"""positions.source decode_plan: SGLang's per-token 16-byte DecodePlan in place of the positions
array (the rule, the reference's reading of the plan, the op's argument check). The kernel's
reading is checked against the reference on the CPU (tests/test_kernel_asan.py, plan_* specs) and
on the GPU (tests/test_gpu.py)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from kgen import inputs as I  # noqa: E402
from kgen import layout as L  # noqa: E402
from kgen import ops  # noqa: E402
from kgen import reference as R  # noqa: E402
from kgen.rules import check_variant  # noqa: E402
from kgen.spec import Spec  # noqa: E402

BASE = {"kgen": 1, "name": "p", "input_dtype": "fp32", "head_dim": 128,
        "rope": {"dim": 64, "style": "interleaved", "placement": "last"}, "hadamard": True,
        "positions": {"source": "decode_plan"},
        "store": {"dtype": "fp8_e4m3", "scale": "fp32", "block": 128}, "layout": {"page_size": 64},
        "targets": ["sm_90a"]}


def spec(**over) -> Spec:
    d = {**BASE, **over}
    return Spec.model_validate(d)


def test_plan_layout_is_sglangs_16_bytes():
    plan = R.make_decode_plan(torch.tensor([8, 2**32 - 1]), torch.tensor([5, -1]), torch.tensor([7, 0]),
                              torch.tensor([9, 3]))
    assert plan.shape == (2, L.DECODE_PLAN_BYTES) and plan.dtype == torch.uint8
    # little-endian uint32 seq_len, int32 write_loc, read_page_0, read_page_1
    assert plan[0].tolist() == [8, 0, 0, 0, 5, 0, 0, 0, 7, 0, 0, 0, 9, 0, 0, 0]
    assert plan[1, :8].tolist() == [255] * 8
    assert L.DECODE_PLAN_FIELDS == ("seq_len", "write_loc", "read_page_0", "read_page_1")


def test_plan_positions_follow_the_compressor():
    s = spec()
    seq = torch.tensor([4, 8, 6, 0, 3, 12, 12, 2**32 - 4, 400])
    wl = torch.tensor([0, 1, 2, 3, 4, -1, 5, 6, 7])
    p0 = torch.tensor([0, 0, 0, 0, 0, 0, -1, 0, 0])
    pos, emit = R.plan_positions(s, R.make_decode_plan(seq, wl, p0, torch.zeros(9)))
    # emitted: seq % 4 == 0, seq >= 4, write_loc >= 0, read_page_0 >= 0 (uint32 seq_len: 2^32 - 4 too)
    assert emit.tolist() == [True, True, False, False, False, False, False, True, True]
    assert pos.tolist() == [0, 4, 0, 0, 0, 0, 0, 2**32 - 8, 396]
    s128 = spec(positions={"source": "decode_plan", "compress_ratio": 128})
    pos, emit = R.plan_positions(s128, R.make_decode_plan(torch.tensor([128, 132, 256]), torch.zeros(3),
                                                          torch.zeros(3), torch.zeros(3)))
    assert emit.tolist() == [True, False, True] and pos.tolist() == [0, 0, 128]


def test_reference_writes_only_emitting_tokens():
    """The plan's reference equals the positions reference with non-emitting tokens skipped."""
    s = spec()
    arr = s.model_copy(update={"positions": s.positions.model_copy(update={"source": "array"})})
    inp = I.make_inputs(s, 300, seed=4)
    pos, emit = R.plan_positions(s, inp["positions"])
    assert 0.5 < float(emit.float().mean()) < 0.8  # make_inputs mixes in every non-emitting kind
    a, b = inp["cache"].clone(), inp["cache"].clone()
    R.norm_rope_store(s, inp["x"], inp["weight"], None, inp["freqs"], inp["positions"], inp["out_loc"], a)
    loc = torch.where(emit, inp["out_loc"], torch.full_like(inp["out_loc"], -1))
    R.norm_rope_store(arr, inp["x"], inp["weight"], None, inp["freqs"], pos, loc, b)
    assert torch.equal(a, b) and not torch.equal(a, inp["cache"])


def test_rule_positions():
    assert not check_variant(spec())[1]
    msgs = {p.message for p in check_variant(spec(rope={"dim": 0}))[1] if p.rule == "positions"}
    assert any("rope.dim is 0" in m for m in msgs)
    bad = check_variant(spec(positions={"source": "decode_plan", "compress_ratio": 0}))[1]
    assert [p.loc for p in bad if p.rule == "positions"] == [("positions", "compress_ratio")]
    warn = check_variant(spec(positions={"source": "array", "compress_ratio": 8}))[1]
    assert [p.severity for p in warn if p.rule == "positions"] == ["warning"]


def test_op_takes_the_plan_in_place_of_positions():
    s = spec()
    inp = I.make_inputs(s, 5, seed=1)
    args = (inp["x"], inp["weight"], None, inp["freqs"], inp["positions"], inp["out_loc"], inp["cache"])
    ops.check_arguments(s, *args, require_cuda=False)
    with pytest.raises(ops.ArgumentError, match=r"^positions: expected uint8 \[N, 16\]"):
        ops.check_arguments(s, *args[:4], torch.zeros(5, dtype=torch.int64), *args[5:], require_cuda=False)
    raw = torch.zeros(5 * 16 + 8, dtype=torch.uint8)
    with pytest.raises(ops.ArgumentError, match="16-byte aligned"):
        ops.check_arguments(s, *args[:4], raw[8:].view(5, 16), *args[5:], require_cuda=False)
