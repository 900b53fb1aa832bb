"""The reader cubins a launch may load (kgen.reader_plan.ring_tunes) for sm_90a, compiled by NVRTC on the CPU: no
spill, and registers within the plan (kgen.reader_layout.reader_wg_plan_registers), so __launch_bounds__' CTAs
per SM never squeeze a cubin into spilling. Cached like tests/test_compile.py (the kgen cache)."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("cuda.core")  # NVRTC

from kgen import reader_layout as RL  # noqa: E402
from kgen.compile import compile_rendered  # noqa: E402
from kgen.layout import compute  # noqa: E402
from kgen.load import load_document  # noqa: E402
from kgen.reader_plan import ring_tunes  # noqa: E402
from kgen.render import render_reader  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def _cache_env(tmp_path_factory, monkeypatch):
    # the same cache as test_compile.py's (same basetemp path): cubins built there are hits here
    monkeypatch.setenv("KGEN_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "kgen-cache"))


def _readable_variants() -> list:
    seen, out = set(), []
    for path in sorted((ROOT / "specs").glob("*.yaml")):
        for v in load_document(path).variants:
            if v.spec is not None and RL.readable(v.spec) and v.spec.name not in seen:
                seen.add(v.spec.name)
                out.append(v.spec)
    return out


VARIANTS = _readable_variants()


def test_every_readable_shipped_variant_is_checked():
    assert {s.name for s in VARIANTS} >= {"dsv32_indexer_fp8", "dsv4_indexer_bf16", "dsv4_indexer_fp4",
                                          "dsv4_indexer_fp8"}


@pytest.mark.parametrize("spec", VARIANTS, ids=lambda s: s.name)
def test_the_cubins_a_launch_may_load_fit_their_plan_without_spilling(spec):
    lay = compute(spec)
    for tune in ring_tunes(spec, None):
        k = compile_rendered(render_reader(spec, tune=tune), "sm_90a", progress=None)
        assert k.spill_bytes == 0, f"{spec.name} {tune} spills {k.spill_bytes} B: {k.log}"
        assert "serialized" not in k.log, f"{spec.name} {tune}: wgmma serialized"
        if not RL.reader_wg_enabled(lay, tune):
            continue
        planned = RL.reader_wg_planned_registers(lay, tune)
        tma, pairs = RL.reader_wg_tma(lay, tune), RL.reader_wg_pairs(lay, tune)
        stages = RL.reader_wg_stages(lay, tune)
        ctas = RL.reader_wg_ctas_per_sm(lay, 1, stages, tma, RL.reader_wg_consumers(lay, tune), pairs)
        assert k.registers is not None and k.registers <= planned, f"{spec.name} {tune}: {k.registers} > {planned}"
        # the plan's CTAs per SM hold the registers ptxas gave each thread
        assert ctas * RL.reader_wg_threads(lay, tune) * k.registers <= RL.READER_SM_REGISTERS


def test_the_cp_async_cubins_are_planned_at_what_they_use():
    # at 5 CTAs of 128 threads (96 registers as allocated) the cp.async fp8 cubin of 64-key pages spilled
    # 252 B; planned at 128 registers it gets 4
    spec = next(s for s in VARIANTS if s.name == "dsv4_indexer_fp8")
    lay, tune = compute(spec), {"kReaderWgTma": 0}
    assert RL.reader_wg_planned_registers(lay, tune) == 128
    assert RL.reader_wg_ctas_per_sm(lay, 1, RL.reader_wg_stages(lay, tune)) == 4
    k = compile_rendered(render_reader(spec, tune=tune), "sm_90a", progress=None)
    assert k.spill_bytes == 0 and k.registers <= 128


def test_fp4_cubins_are_planned_at_the_floor_five_ctas_an_sm():
    # the fp4 widening by bit placement (reader/convert.cuh) leaves the cp.async fp4 cubin 96 registers without a
    # spill (the byte-permute one spilled 152 B at 96): 5 CTAs of 128 threads an SM, 20 warps where 4 CTAs had 16;
    # sampled layouts too (head_dim 256, pages smaller than a tile), at their own plans
    from kgen.reader_check import sample_readable

    spec = next(s for s in VARIANTS if s.name == "dsv4_indexer_fp4")
    lay = compute(spec)
    assert RL.reader_wg_planned_registers(lay) == RL.READER_WG_REGISTERS == 96
    assert RL.reader_wg_ctas_per_sm(lay, 1, RL.reader_wg_stages(lay)) == 5
    sampled = [s for s in sample_readable(60, seed=1) if s.store.dtype == "fp4_e2m1" and RL.reader_wg_enabled(
        compute(s))]
    picked = [spec, *[s for s in sampled if s.head_dim == 256][:1],
              *[s for s in sampled if s.layout.page_size < RL.READER_WG_TILE_KEYS][:1]]
    assert len(picked) == 3
    for s in picked:  # (head_dim 256: shared memory holds 3 CTAs, whose bounds leave ptxas more registers)
        k = compile_rendered(render_reader(s), "sm_90a", progress=None)
        lay_s = compute(s)
        ctas = RL.reader_wg_ctas_per_sm(lay_s, 1, RL.reader_wg_stages(lay_s))
        assert k.spill_bytes == 0 and ctas * RL.reader_threads() * k.registers <= RL.READER_SM_REGISTERS, (s.name,
                                                                                                          k.log)


def test_fp8_keys_of_64_byte_rows_take_four_head_passes_and_do_not_spill():
    from kgen.reader_check import sample_readable

    # the mma.sync path (the wgmma path reads no 64-B rows): at 2 passes ptxas spilled 16 B for these layouts
    specs = [s for s in sample_readable(20) if s.store.dtype == "fp8_e4m3" and s.head_dim == 64][:3]
    assert specs
    for spec in specs:
        assert RL.reader_constants(compute(spec))["kReaderHeadPasses"] == RL.READER_HEAD_PASSES_BY_ROW[
            ("fp8_e4m3", 64)]
        for tune in ring_tunes(spec, None):
            k = compile_rendered(render_reader(spec, tune=tune), "sm_90a", progress=None)
            assert k.spill_bytes == 0, f"{spec.name} {tune} spills {k.spill_bytes} B"
