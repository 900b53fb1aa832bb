"""The read side on the CPU: kgen::indexer_logits renders and NVRTC-compiles for sm_90a, its
static_assert twins fire (unreadable spec, tampered byte constants, writer rules first), the ABI table
and the launch split, the argument checks (each names its argument, before any launch), and the real
kernel source run by the CPU emulation (tests/reader_shim) against kgen.score's Torch path."""

from __future__ import annotations

import dataclasses
import re
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from kgen import layout as L  # noqa: E402
from kgen import reader_check as rc  # noqa: E402
from kgen import reader_layout as RL  # noqa: E402
from kgen import reader_plan as RP  # noqa: E402
from kgen.abi import INDEXER_LOGITS, ArgumentError  # noqa: E402
from kgen.arch import DeviceFacts  # noqa: E402
from kgen.diagnostics import KgenError  # noqa: E402
from kgen.ops import reader as ops_reader  # noqa: E402
from kgen.reference import load_spec  # noqa: E402
from kgen.render import include_dirs, render_reader, render_variant  # noqa: E402
from kgen.score import indexer_logits_torch  # noqa: E402
from kgen.spec import Spec  # noqa: E402
from strategies import ROOT  # noqa: E402

SPECS = ROOT / "specs"
INDEXER = {"fp8": "dsv4/indexer_fp8.yaml", "fp4": "dsv4/indexer_fp4.yaml", "bf16": "indexer_bf16.yaml",
           "dsv32": "dsv32_indexer.yaml"}
ASSERT_RE = re.compile(r'static assertion failed with "\[([a-z0-9-]+)\]')


def spec_of(key: str) -> Spec:
    return load_spec(SPECS / INDEXER[key])


def with_(spec: Spec, **fields) -> Spec:
    """spec with nested fields replaced, e.g. with_(s, store={"rope_dtype": "bf16"})."""
    data = spec.model_dump()
    for k, v in fields.items():
        data[k] = {**data[k], **v} if isinstance(v, dict) else v
    return Spec.model_validate(data)


@pytest.fixture(scope="session")
def cache(tmp_path_factory):
    from kgen.cache import Cache

    return Cache(tmp_path_factory.mktemp("reader-cache"))


def compile_log(rv, cache) -> tuple[object, str]:
    from kgen.compile import CompileError, compile_rendered

    try:
        k = compile_rendered(rv, "sm_90a", cache=cache, progress=None)
        return k, k.log
    except CompileError as e:
        return None, e.log


# ---------------------------------------------------------------------------------------------
# support, render, compile


def test_shipped_indexer_variants_are_readable_and_latent_packed_is_not():
    for key in INDEXER:
        assert RL.reader_problems(spec_of(key)) == [], key
    packed = load_spec(SPECS / "dsv4/latent_fp8_p64.yaml")
    problems = RL.reader_problems(packed)
    assert any("kept RoPE span" in p for p in problems)
    assert not RL.readable(with_(spec_of("fp8"), store={"block": 32}))  # 4 fp8 scales per key
    assert not RL.readable(with_(spec_of("bf16"), store={"dtype": "fp16"}))


def test_render_variant_adds_the_reader_files_only_for_readable_specs():
    files = render_variant(spec_of("fp8")).files
    assert {"dsv4_indexer_fp8/logits_config.cuh", "dsv4_indexer_fp8/indexer_logits.cu"} <= set(files)
    packed = render_variant(load_spec(SPECS / "dsv4/latent_fp8_p64.yaml")).files
    assert not any("logits" in k for k in packed)
    with pytest.raises(KgenError, match="indexer_logits cannot read"):
        render_reader(load_spec(SPECS / "dsv4/latent_fp8_p64.yaml"))


def test_reader_config_is_the_writers_config_plus_reader_constants():
    spec = spec_of("fp8")
    rv = render_reader(spec)
    cfg = rv.files["dsv4_indexer_fp8/logits_config.cuh"]
    assert '#include "config.cuh"' in cfg and "struct dsv4_indexer_fp8 : kgen_cfg::dsv4_indexer_fp8" in cfg
    for name, value in RL.reader_constants(L.compute(spec)).items():
        assert f"static constexpr long long {name} = {value};" in cfg
    assert f"static_assert(sizeof(Params) == {INDEXER_LOGITS.size}" in cfg
    # the byte constants come from the writer's config, rendered once
    assert rv.files["dsv4_indexer_fp8/config.cuh"] == render_variant(spec).files["dsv4_indexer_fp8/config.cuh"]
    assert rv.kernel == "indexer_logits" and rv.name_expression == "kgen::indexer_logits<kgen_reader::dsv4_indexer_fp8>"


@pytest.mark.parametrize("key", sorted(INDEXER))
def test_shipped_reader_compiles_for_sm90a_without_spills(key, cache):
    # every cubin a shipped launch may load: the default and the ring of small launch shapes
    for tune in rc.ring_tunes(spec_of(key), None):
        k, log = compile_log(render_reader(spec_of(key), tune=tune), cache)
        assert k is not None, log[-3000:]
        assert k.spill_bytes == 0 and 0 < k.registers <= 255, (tune, log)
        assert "serialized" not in log, (tune, log)  # ptxas kept the wgmma asynchronous


@pytest.mark.parametrize("key", sorted(INDEXER))
def test_pair_cubin_compiles_within_its_planned_registers(key, cache):
    # two MTP tokens per m64n128 group (what `kgen test` runs on the MTP cases): no spill, the wgmma kept
    # asynchronous, ptxas within the registers the plan gives each thread (RL.READER_WG_*PAIR_REGISTERS)
    spec = spec_of(key)
    lay = L.compute(spec)
    tune = RP.reader_wg_pair_tuning(lay)
    assert RL.reader_wg_pairs(lay, tune)
    k, log = compile_log(render_reader(spec, tune=tune), cache)
    assert k is not None, log[-3000:]
    planned = RL.READER_WG_TMA_PAIR_REGISTERS if RL.reader_wg_tma(lay, tune) else RL.READER_WG_PAIR_REGISTERS
    assert k.spill_bytes == 0 and "serialized" not in log and k.registers <= planned, (k.registers, log[-2000:])


@pytest.mark.parametrize("key", ["fp8", "bf16"])
def test_split_cubin_compiles_without_serializing(key, cache):
    # the pair cubin with the register split (scripts/reader_mtp_bench.py measures it): the consumers at
    # their setmaxnreg registers keep the wgmma asynchronous and do not spill
    spec = spec_of(key)
    tune = RP.reader_wg_split_tuning(L.compute(spec))
    assert RL.reader_wg_split(L.compute(spec), tune)
    k, log = compile_log(render_reader(spec, tune=tune), cache)
    assert k is not None, log[-3000:]
    assert k.spill_bytes == 0 and "serialized" not in log, log[-2000:]


@pytest.mark.parametrize("key", ["fp8", "bf16"])
@pytest.mark.parametrize("ring", [(6, 1), (8, 2), (4, 2), (12, 3), (8, 4)])
def test_tma_rings_compile_with_their_twins_agreeing(key, ring, cache):
    # rings other than the default: CTAs per SM bound by shared memory or by the planned registers
    # (RL.READER_WG_TMA_REGISTERS and its twin), 1-4 consumer warpgroups
    stages, consumers = ring
    tune = {"kReaderWgTma": 1, "kReaderWgTmaStages": stages, "kReaderWgConsumers": consumers}
    spec = spec_of(key)
    if not RL.reader_wg_tma(L.compute(spec), tune):
        pytest.skip("the ring does not fit")
    k, log = compile_log(render_reader(spec, tune=tune), cache)
    assert k is not None, log[-3000:]
    assert k.spill_bytes == 0 and "serialized" not in log, log


def test_reader_support_twin_fires_for_an_unreadable_spec(cache):
    k, log = compile_log(render_reader(load_spec(SPECS / "dsv4/latent_fp8_p64.yaml"), force=True), cache)
    assert k is None
    assert ASSERT_RE.findall(log) == ["reader-support"], log[-2000:]


@pytest.mark.parametrize("file,old,new,rule", [
    ("config.cuh", "kPageBytes = 8448;", "kPageBytes = 8464;", "reader-layout"),  # the writer's constant
    ("config.cuh", "kScaleStride = 4;", "kScaleStride = 8;", "reader-layout"),
    ("logits_config.cuh", "kReaderGroups = 2;", "kReaderGroups = 3;", "reader-constants"),
    ("logits_config.cuh", "kReaderKeyVectorBytes = 16;", "kReaderKeyVectorBytes = 8;", "reader-constants"),
])
def test_reader_twins_fire_for_a_tampered_byte_constant(file, old, new, rule, cache):
    rv = render_reader(spec_of("fp8"))
    key = f"dsv4_indexer_fp8/{file}"
    assert old in rv.files[key]
    files = {**rv.files, key: rv.files[key].replace(old, new)}
    k, log = compile_log(replace(rv, files=files), cache)
    assert k is None
    assert rule in ASSERT_RE.findall(log), log[-2000:]


def test_writer_rule_twins_fire_first_under_no_validate(cache):
    # scale_stride 2 breaks rule scale-stride (not a multiple of the 4-B scale); rendered without validation
    bad = with_(spec_of("fp8"), layout={"scale_stride": 2})
    k, log = compile_log(render_reader(bad, force=True), cache)
    assert k is None
    ids = set(ASSERT_RE.findall(log))
    assert "scale-stride" in ids and not any(i.startswith("reader-") for i in ids), ids


# ---------------------------------------------------------------------------------------------
# ABI table and launch split


def test_abi_table_packs_the_struct_the_config_asserts():
    names = [f.name for f in INDEXER_LOGITS.fields]
    assert names == ["cache_map", "q", "weights", "cache", "block_table", "seq_lens", "logits", "num_pages",
                     "batch", "next_n", "max_pages", "max_seq_len"]
    # the 128-B tensor map at offset 0, then 6 pointers, 1 int64, 4 int32, padded to the map's 64-B alignment
    assert [s.offset for s in INDEXER_LOGITS.slots][:2] == [0, 128]
    assert INDEXER_LOGITS.alignment == 64 and INDEXER_LOGITS.size == 256 == -(-(128 + 6 * 8 + 8 + 4 * 4) // 64) * 64
    assert INDEXER_LOGITS.version == 2
    values = (bytes(range(128)), *range(1, 12))
    assert INDEXER_LOGITS.unpack(INDEXER_LOGITS.pack(values)) == dict(zip(names, values, strict=True))
    from kgen.abi import KERNELS

    assert KERNELS["indexer_logits"] is INDEXER_LOGITS


@pytest.mark.parametrize("B,next_n,keys", [(1, 1, 4096), (1, 1, 65536), (32, 1, 4096), (128, 1, 65536),
                                           (3, 7, 1000), (2, 2, 1), (1, 1, 0)])
def test_reader_launch_covers_every_logit(B, next_n, keys):
    spec = spec_of("bf16")
    (gx, gy, gz), threads, smem, per = RP.reader_launch(spec, B, next_n, keys, 132)
    step = RL.READER_WARPS * RL.READER_WARP_KEYS
    assert threads == RL.reader_threads() and per % step == 0
    # the kernel derives its slice as ceil(keys / gx) rounded up to whole iterations: it must cover
    per_cta = -(-keys // gx)
    kernel_per = -(-per_cta // step) * step
    assert gx * kernel_per >= keys and kernel_per <= per
    tpc = RL.reader_tokens_per_cta(spec)
    assert gy == B and gz == -(-next_n // tpc) and smem == min(tpc, next_n) * RL.reader_q_token_bytes(spec)
    assert smem <= RL.READER_SMEM_BYTES
    if (B, keys) == (1, 4096):
        assert gx >= 32  # a short context is split over many SMs


def work_split(seq_lens: list[int], next_n: int, max_seq_len: int, tpc: int, ctas: int) -> list[dict]:
    """The kernel's split (kgen::detail::wg::Work), restated: per CTA its tiles and (row, key) cells."""
    groups = -(-next_n // tpc)
    tm = -(-max_seq_len // 64)
    pairs = []
    for b, n in enumerate(seq_lens):
        for g in range(groups):
            t0 = g * tpc
            ntok = min(tpc, next_n - t0)
            end = min(max(n - next_n + t0 + ntok, 0), max_seq_len)
            pairs.append((b, t0, ntok, -(-end // 64)))
    tiles = [(p, i) for p, (*_, nt) in enumerate(pairs) for i in range(nt)]
    fills = [(p, nt + j) for p, (*_, nt) in enumerate(pairs) for j in range(tm - nt)]
    kt, kf = -(-len(tiles) // ctas), -(-len(fills) // ctas)
    out = []
    for c in range(ctas):
        mine, cells = tiles[c * kt:(c + 1) * kt], []
        for p, i in mine + fills[c * kf:(c + 1) * kf]:
            b, t0, ntok, _ = pairs[p]
            keys = range(64 * i, min(64 * i + 64, max_seq_len))
            cells += [(b * next_n + t0 + t, k) for t in range(ntok) for k in keys]
        out.append({"tiles": len(mine), "pairs": len({p for p, _ in mine}), "cells": cells})
    return out


@pytest.mark.parametrize("key", ["fp8", "bf16", "dsv32", "fp4"])
@pytest.mark.parametrize("B,next_n,keys", [(1, 1, 4096), (1, 1, 65536), (1, 1, 262144), (32, 1, 4096),
                                           (128, 1, 65536), (3, 7, 1000), (2, 2, 1), (1, 1, 63), (500, 3, 70000),
                                           (64, 4, 16384)])
def test_wgmma_launch_is_one_wave_of_the_keys_rows_have(key, B, next_n, keys):
    spec = spec_of(key)
    lay = L.compute(spec)
    stages = RL.reader_wg_stages(lay)
    assert RL.reader_wgmma(lay, stages) and RL.reader_wg_enabled(lay)
    tma = RL.reader_wg_tma(lay)  # the shipped default where it reads the layout: bf16 and fp8 keys
    assert tma == (key != "fp4")
    (gx, gy, gz), threads, smem, per = RP.reader_launch(spec, B, next_n, keys, 132, wgmma=True)
    tpc = RL.reader_wg_tokens_per_cta(lay, stages, tma)
    # every next_n up to 4 from one staging of the keys (bf16 and fp4 too: whole tiles staged or converted)
    assert tpc == RL.READER_WG_MAX_TOKENS == 4
    assert threads == (RL.reader_wg_tma_threads(RL.reader_wg_consumers(lay)) if tma else 128)
    assert (gy, gz) == (1, 1)
    ntok = min(tpc, next_n)
    assert smem == RL.reader_wg_smem_bytes(lay, ntok, stages, tma) <= RL.READER_MAX_SMEM_BYTES
    slots = 132 * RL.reader_wg_ctas_per_sm(lay, ntok, stages, tma, RL.reader_wg_consumers(lay))
    tiles = B * -(-next_n // tpc) * -(-keys // 64)
    assert gx == max(1, min(slots, tiles))  # one wave, never more CTAs than tiles
    assert per == -(-max(tiles, 1) // gx) * 64
    if (B, keys) == (1, 4096):
        assert gx == 64  # a short context: one tile per CTA, 64 SMs busy


@pytest.mark.parametrize("seed", range(6))
def test_work_split_covers_every_logit_once_and_balances_keys(seed):
    import random

    rng = random.Random(seed)
    next_n = rng.randint(1, 6)
    msl = rng.choice([1, 63, 64, 65, 700, 3000])
    lens = [rng.choice([0, 1, next_n, rng.randint(0, msl + 100)]) for _ in range(rng.randint(1, 12))]
    tpc = rng.choice([1, 2, 4])
    ctas = rng.choice([1, 3, 17, 200])
    split = work_split(lens, next_n, msl, tpc, ctas)
    cells = [c for s in split for c in s["cells"]]
    assert len(cells) == len(set(cells)) == len(lens) * next_n * msl  # every logit, once
    counts = [s["tiles"] for s in split]
    total = sum(-(-max(0, min(n - next_n + t0 + min(tpc, next_n - t0), msl)) // 64)
                for n in lens for t0 in range(0, next_n, tpc))
    assert sum(counts) == total and max(counts) == -(-total // ctas)  # the tiles the rows really have, evenly


def test_work_split_keeps_equal_lengths_on_pair_boundaries():
    # 32 x 4K keys on 264 CTAs: 8 tiles each, 8 CTAs per sequence, no CTA changes q
    split = work_split([4096] * 32, 1, 4096, 4, 264)
    assert [s["tiles"] for s in split] == [8] * 256 + [0] * 8 and max(s["pairs"] for s in split) == 1
    # a ragged batch: still the tiles the rows have, split evenly (some CTAs cross sequences)
    split = work_split([100, 5000, 64, 3000], 2, 5000, 4, 10)
    assert sum(s["tiles"] for s in split) == 2 + 79 + 1 + 47 and max(s["pairs"] for s in split) == 3


def test_wgmma_path_choice():
    from kgen.arch import has_wgmma
    from kgen.reader_layout import runs_wgmma

    assert has_wgmma("sm_90a") and not any(has_wgmma(t) for t in ("sm_90", "sm_100a", "sm_100f", "sm_80", "x"))
    fp8, bf16, fp4 = spec_of("fp8"), spec_of("bf16"), spec_of("fp4")
    assert runs_wgmma(fp8, "sm_90a") and runs_wgmma(bf16, "sm_90a")
    # fp4: its packed rows are staged as stored and widened into the registers of the bf16 A operand; q is a
    # bf16 row (2 chunks of 128 B, as bf16 keys'); no converted tile in shared memory
    assert runs_wgmma(fp4, "sm_90a") and not runs_wgmma(fp4, "sm_100a") and not runs_wgmma(fp4, None)
    lay4 = L.compute(fp4)
    assert RL.reader_wg_chunks(lay4) == RL.reader_wg_chunks(L.compute(bf16)) == 2
    assert RL.reader_wg_smem_bytes(lay4, 1, 3) == 1024 + 3 * (64 * (64 + 4) + 64 * 4) + 2 * 8192 + 4 * 64
    assert RL.reader_wg_tokens_per_cta(lay4, 3) == 4 and RL.reader_wg_ctas_per_sm(lay4, 1, 3) == 5
    c4 = RL.reader_constants(lay4)
    assert c4["kReaderWgmma"] == 1 and c4["kReaderWgChunks"] == 2 and c4["kReaderWgMinBlocks"] == 5
    # fp4 layouts the path cannot stage: scale bytes of a token not whole 4-B words at 4-B aligned offsets
    odd = with_(fp4, layout={"scale_stride": 6})
    assert not RL.reader_wg_enabled(L.compute(odd))
    # head_dim 384: a packed row is 12 pieces of 16 B, which do not split 128 threads into whole passes
    assert RL.reader_wg_enabled(L.compute(with_(fp4, head_dim=256)))
    assert not RL.reader_wg_enabled(L.compute(with_(fp4, head_dim=384)))
    assert not runs_wgmma(fp8, "sm_90") and not runs_wgmma(fp8, None)  # the CPU emulation: mma.sync
    # layouts the path cannot stage: ue8m0 scale bytes, rows that are not whole 128-B atoms
    assert not RL.reader_wg_enabled(L.compute(with_(fp8, store={"scale": "ue8m0"})))
    assert not RL.reader_wg_enabled(L.compute(with_(fp8, head_dim=64)))
    assert not runs_wgmma(fp8, "sm_90a", {"kReaderWgmma": 0})
    c = RL.reader_constants(L.compute(fp8), {"kReaderWgmma": 0})
    assert c["kReaderWgmma"] == 0 and c["kReaderWgChunks"] == 0 and c["kReaderWgTokensPerCta"] == 0


# the TMA variant on a ring of 8 stages (module-level TMA, below, is the variant on its default ring)
TMA_RING8 = {"kReaderWgTma": 1, "kReaderWgTmaStages": 8, "kReaderWgConsumers": 2}


def test_tma_variant_reads_whole_page_tiles_of_bf16_and_fp8_keys():
    from kgen.reader_layout import runs_wgmma

    fp8, bf16, dsv32, fp4 = (spec_of(k) for k in ("fp8", "bf16", "dsv32", "fp4"))
    for s in (fp8, bf16, dsv32):
        lay = L.compute(s)
        assert RL.reader_wg_tma_layout(lay) and RL.reader_wg_tma(lay)  # the default where it reads the layout
        assert RL.reader_wg_tma(lay, TMA_RING8) and runs_wgmma(s, "sm_90a", TMA_RING8) and not RL.reader_wg_tma(lay, CP)
    assert not RL.reader_wg_tma_layout(L.compute(fp4)) and not RL.reader_wg_tma(L.compute(fp4), TMA_RING8)
    # a tile must lie in one page (one box), fp8's 64 scales one 16-B aligned 256-B copy
    assert not RL.reader_wg_tma_layout(L.compute(with_(fp8, layout={"page_size": 32})))
    assert RL.reader_wg_tma_layout(L.compute(with_(fp8, layout={"page_size": 128})))
    assert not RL.reader_wg_tma_layout(L.compute(with_(fp8, layout={"scale_stride": 8})))
    # where the variant does not read, kReaderWgTma 1 renders the cp.async variant (the constant says so)
    assert RL.reader_constants(L.compute(fp4), TMA_RING8)["kReaderWgTma"] == 0
    assert RL.reader_constants(L.compute(fp8), {**TMA_RING8, "kReaderWgmma": 0})["kReaderWgTma"] == 0

    lay = L.compute(fp8)
    # per stage: 64 rows of 128 B, 64 scale words, two 8-B mbarriers; per token q (64 x 128 B) and weights;
    # the producer's published share (32 B) and its mbarrier
    assert RL.reader_wg_smem_bytes(lay, 1, 8, tma=True) == 1024 + 8 * (8192 + 256 + 16) + (8192 + 256) + 40
    assert RL.reader_wg_tma_threads(2) == 2 * 128 + 32
    # large CTAs: registers bind (planned at what ptxas uses, reader_wg_plan_registers) before shared memory does
    tma_regs = RL.reader_wg_plan_registers("fp8_e4m3", True, False)
    assert tma_regs >= RL.READER_WG_TMA_REGISTERS
    assert RL.reader_wg_ctas_per_sm(lay, 1, 4, tma=True, consumers=2) == 65536 // (288 * tma_regs) == 2
    assert RL.reader_wg_ctas_per_sm(lay, 1, 16, tma=True, consumers=2) == 1  # 144.9 KB of shared memory
    # small cp.async CTAs: never so many that __launch_bounds__ leaves a thread fewer than the registers
    # ptxas uses (32-key pages, a 2-stage ring: 8 CTAs fit by shared memory, 4 by registers at 128)
    small = L.compute(with_(fp8, layout={"page_size": 32}))
    assert RL.reader_wg_smem_bytes(small, 1, 2) * 8 < RL.READER_SM_SHARED_BYTES
    cp_regs = RL.reader_wg_plan_registers("fp8_e4m3", False, False)
    assert cp_regs >= RL.READER_WG_REGISTERS
    assert RL.reader_wg_ctas_per_sm(small, 1, 2) == 65536 // (128 * cp_regs) == 4
    c = RL.reader_constants(lay, TMA_RING8)
    assert c["kReaderWgTma"] == 1 and c["kReaderWgMinBlocks"] == 2 and c["kReaderWgTokensPerCta"] == 4
    (gx, gy, gz), threads, smem, per = RP.reader_launch(fp8, 128, 1, 65536, 132, wgmma=True, tune=TMA_RING8)
    assert threads == 288 and smem == RL.reader_wg_smem_bytes(lay, 1, 8, tma=True) and (gy, gz) == (1, 1)
    assert gx == 2 * 132 and gx * per >= 128 * 65536
    # next_n 4: q of 4 tokens beside the 8 stages, still 2 CTAs per SM
    assert RL.reader_wg_ctas_per_sm(lay, 4, 8, tma=True, consumers=2) == 2
    # the ring is the CTA's: no shallow ring for small launches
    assert RP.reader_wg_shape_tune(lay, TMA_RING8, 1, 1, 4096, 132) == TMA_RING8
    assert RP.reader_wg_shape_tune(lay, CP, 1, 1, 4096, 132) == {**CP, "kReaderWgStages": 2}


def test_launch_follows_the_loaded_target_and_tuning(monkeypatch):
    import dataclasses

    spec, args = _case("fp8", lens=(5, 70))
    checked = dataclasses.replace(ops_reader.check(spec, *args, require_cuda=False), device=H200)
    msl = checked.dims["max_seq_len"]
    cases = [(None, None, False), ("sm_90a", None, True), ("sm_90a", {"kReaderWgmma": 0}, False),
             ("sm_90", None, False), ("sm_100a", None, False), ("sm_90a", {"kReaderWgStages": 6}, True)]
    for target, tune, wg in cases:
        a = dataclasses.replace(checked, target=target, tune=tune)
        want = RP.reader_launch(spec, 2, 1, msl, 132, wgmma=wg, tune=tune)[:3]
        for _ in range(2):  # the second time from the memo
            assert RP.launch_of(a) == want and a.grid() == want[:2], (target, tune)
            assert INDEXER_LOGITS.shared_bytes(a) == want[2] and INDEXER_LOGITS.prefers_shared(a) is wg
    # a TMA ring of 6 stages of 8.25 KB: past 48 KB, the launch opts in (fp8's default ring of 4 stays below)
    six = dataclasses.replace(checked, target="sm_90a", tune={"kReaderWgTmaStages": 6})
    assert INDEXER_LOGITS.shared_bytes(six) > 48 * 1024 >= INDEXER_LOGITS.shared_bytes(
        dataclasses.replace(checked, target="sm_90a"))


CP = {"kReaderWgTma": 0}  # the cp.async variant of the sm_90a path


def test_ring_by_launch_shape():
    # the cp.async variant's rule (CP: the TMA variant, the default where it reads, has one ring: below)
    fp8, bf16 = L.compute(spec_of("fp8")), L.compute(spec_of("bf16"))
    shallow, per_sm = RP.READER_WG_SHAPE_STAGES["fp8_e4m3"]
    assert RL.reader_wg_stages(fp8, CP) == 4 and shallow == 2
    # fp8: the shallow ring below `per_sm` staged keys per SM, the default from there on
    assert RP.reader_wg_shape_tune(fp8, CP, 1, 1, 262144, 132) == {**CP, "kReaderWgStages": 2}
    assert RP.reader_wg_shape_tune(fp8, CP, 32, 1, 65536, 132) == {**CP, "kReaderWgStages": 2}
    assert RP.reader_wg_shape_tune(fp8, CP, 64, 1, 65536, 132) == {**CP, "kReaderWgStages": 2}
    assert RP.reader_wg_shape_tune(fp8, CP, 128, 1, 65536, 132) == CP
    edge = per_sm * 132
    assert RP.reader_wg_shape_tune(fp8, CP, 1, 1, edge, 132) == CP
    assert RP.reader_wg_shape_tune(fp8, CP, 1, 1, edge - 1, 132) == {**CP, "kReaderWgStages": 2}
    # MTP tokens share one staging of the keys (up to 4 per CTA): next_n 4 stages what next_n 1 does
    assert RP.reader_wg_shape_tune(fp8, CP, 1, 4, edge, 132) == CP
    assert RP.reader_wg_shape_tune(fp8, CP, 1, 4, edge - 1, 132) == {**CP, "kReaderWgStages": 2}
    assert RP.reader_wg_shape_tune(fp8, CP, 1, 5, edge // 2, 132) == CP
    # fewer SMs: fewer keys make an SM's share
    assert RP.reader_wg_shape_tune(fp8, CP, 32, 1, 65536, 16) == CP
    # a tuning that fixes the ring keeps it; other overrides keep the rule
    assert RP.reader_wg_shape_tune(fp8, {**CP, "kReaderWgStages": 4}, 1, 1, 4096, 132) == {**CP, "kReaderWgStages": 4}
    assert RP.reader_wg_shape_tune(fp8, {**CP, "kReaderWgL2Prefetch": 256}, 1, 1, 4096, 132) == {
        **CP, "kReaderWgL2Prefetch": 256, "kReaderWgStages": 2}
    # the shipped default (the TMA variant) keeps its ring at every shape
    assert RL.reader_wg_tma(fp8) and RP.reader_wg_shape_tune(fp8, None, 1, 1, 4096, 132) is None
    # bf16 has no rule
    assert RP.reader_wg_shape_tune(bf16, None, 1, 1, 4096, 132) is None
    assert rc.ring_tunes(spec_of("bf16"), CP) == [CP]
    assert rc.ring_tunes(spec_of("fp8"), CP) == [CP, {**CP, "kReaderWgStages": 2}]
    # the TMA variant's cubins: the default, the evict-first L2 policy of launches the L2 cannot hold, and (fp8) the
    # keys in registers of MTP launches, with either policy
    assert rc.ring_tunes(spec_of("bf16"), None) == [None, {"kReaderWgEvictFirst": 1}]
    keys = {"kReaderWgKeyRegisters": 1}
    for key in ("fp8", "dsv32"):
        assert rc.ring_tunes(spec_of(key), None) == [None, {"kReaderWgEvictFirst": 1}, keys,
                                                     {**keys, "kReaderWgEvictFirst": 1}]
    # fp4 (the cp.async variant, no shape rule for its ring): its keys in registers on a ring of 2 at MTP launches
    assert rc.ring_tunes(spec_of("fp4"), None) == [None, {"kReaderWgStages": 2, **keys}]


def test_evict_first_where_the_launch_overflows_the_l2():
    fp8, bf16 = L.compute(spec_of("fp8")), L.compute(spec_of("bf16"))
    l2 = 50 * 2**20
    ef = {"kReaderWgEvictFirst": 1}
    # fp8 keys are 132 B: 32 x 4K (17 MB) and 1 x 256K (35 MB) stay normal, 32 x 64K and 128 x 4K do not fit
    assert RP.reader_wg_shape_tune(fp8, None, 32, 1, 4096, 132, l2) is None
    assert RP.reader_wg_shape_tune(fp8, None, 1, 1, 262144, 132, l2) is None
    assert RP.reader_wg_shape_tune(fp8, None, 32, 1, 65536, 132, l2) == ef
    assert RP.reader_wg_shape_tune(fp8, None, 128, 1, 4096, 132, l2) == ef
    edge = l2 // 132  # keys whose bytes just fill the L2
    assert RP.reader_wg_shape_tune(fp8, None, 1, 1, edge, 132, l2) is None
    assert RP.reader_wg_shape_tune(fp8, None, 1, 1, edge + 1, 132, l2) == ef
    # MTP: up to 4 tokens share a staging of the keys, 5 tokens read them twice (both with the keys in registers)
    keys = {"kReaderWgKeyRegisters": 1}
    assert RP.reader_wg_shape_tune(fp8, None, 1, 4, edge, 132, l2) == keys
    assert RP.reader_wg_shape_tune(fp8, None, 1, 5, edge, 132, l2) == {**keys, **ef}
    # bf16 keys are 256 B: 1 x 256K overflows
    assert RP.reader_wg_shape_tune(bf16, None, 1, 1, 262144, 132, l2) == ef
    # an unknown L2 (0), a tuning that fixes the policy, the cp.async variant: no rule
    assert RP.reader_wg_shape_tune(fp8, None, 128, 1, 65536, 132, 0) is None
    off = {"kReaderWgEvictFirst": 0}
    assert RP.reader_wg_shape_tune(fp8, off, 128, 1, 65536, 132, l2) == off
    assert RP.reader_wg_shape_tune(fp8, CP, 128, 1, 65536, 132, l2) == CP
    # the launch: the device's L2 (kgen.arch.DeviceFacts in the checked arguments), memoized with the shape
    a = dataclasses.replace(ops_reader.check(spec_of("fp8"), *_case("fp8", lens=(5, 70))[1], require_cuda=False),
                            device=DeviceFacts(0, 132, 1, 90))
    assert RP.launch_tune(a, "sm_90a") == {"kReaderWgEvictFirst": 1}  # keys overflow a 1-B L2


H200 = DeviceFacts(index=0, sm_count=132, l2_bytes=0, capability=90)  # 0: an L2 nobody reported (no L2 rule)


def test_pair_cubin_plan_and_its_shape_rule(monkeypatch):
    from kgen.reader_layout import runs_wgmma

    fp8, bf16, fp4 = (L.compute(spec_of(k)) for k in ("fp8", "bf16", "fp4"))
    assert RP.READER_WG_PAIR_STAGES == {}  # measured slower: no launch shape loads it (reader_plan)
    assert RP.reader_wg_pair_ring(fp4) is None  # no TMA variant, no pair ring
    for lay in (fp8, bf16):
        pair = RP.reader_wg_pair_tuning(lay)
        assert pair == {"kReaderWgTmaStages": RP.reader_wg_pair_ring(lay), "kReaderWgPairs": 1}
        assert RL.reader_wg_pairs(lay, pair) and RL.reader_wg_tma(lay, pair) and not RL.reader_wg_pairs(lay)
        assert RL.reader_wg_tokens_per_cta(lay, RL.reader_wg_stages(lay, pair), tma=True) == 4
        # one CTA per SM at the pair registers; its ring as many key bytes as the one-token cubin's two CTAs
        consumers = RL.reader_wg_consumers(lay, pair)
        assert RL.reader_wg_ctas_per_sm(lay, 1, RL.reader_wg_stages(lay, pair), True, consumers, True) == 1
        assert RL.reader_wg_tma_threads(consumers) * RL.READER_WG_TMA_PAIR_REGISTERS <= RL.READER_SM_REGISTERS
        stages = RL.reader_wg_stages(lay)
        assert RP.reader_wg_pair_ring(lay) == stages * RL.reader_wg_ctas_per_sm(
            lay, 1, stages, True, consumers)
        rv = render_reader(lay.spec, tune=pair).files[f"{lay.spec.name}/logits_config.cuh"]
        assert "kReaderWgPairs = 1;" in rv and "kReaderWgMinBlocks = 1;" in rv
        # three consumer warpgroups do not fit one SM at the pair registers: no pairs there
        assert not RL.reader_wg_pairs(lay, {**pair, "kReaderWgTmaStages": 12, "kReaderWgConsumers": 3})
        # the shape rule, where a key dtype has a ring: MTP launches of the TMA variant load the pair cubin
        monkeypatch.setitem(RP.READER_WG_PAIR_STAGES, lay.spec.store.dtype, RP.reader_wg_pair_ring(lay))
        assert RP.reader_wg_shape_tune(lay, None, 32, 1, 65536, 132) is None
        for n in (2, 3, 4, 5):
            assert RP.reader_wg_shape_tune(lay, None, 32, n, 65536, 132) == pair
        # pairs off: the one-token cubin, fp8's holding its tile in the A registers (READER_WG_KEY_REGISTER_TOKENS)
        held = {"kReaderWgKeyRegisters": 1} if lay is fp8 else {}
        assert RP.reader_wg_shape_tune(lay, {"kReaderWgPairs": 0}, 32, 2, 65536, 132) == {"kReaderWgPairs": 0, **held}
        three = {"kReaderWgConsumers": 3, "kReaderWgTmaStages": 12}  # no room for pairs: the one-token cubin
        assert RP.reader_wg_shape_tune(lay, three, 32, 2, 65536, 132) == {**three, **held}
        assert pair in rc.ring_tunes(lay.spec, None)
    # the cp.async variants: a tuning may ask for pairs where a CTA holds two tokens (2 CTAs per SM)
    assert RP.reader_wg_shape_tune(fp8, CP, 128, 2, 65536, 132) == CP
    assert RP.reader_wg_shape_tune(fp4, {"kReaderWgKeyRegisters": 0}, 128, 2, 65536, 132) == {
        "kReaderWgKeyRegisters": 0} and runs_wgmma(spec_of("fp4"), "sm_90a")
    assert RL.reader_wg_pairs(fp4, {"kReaderWgPairs": 1}) and RL.reader_wg_pairs(fp8, {**CP, "kReaderWgPairs": 1})
    assert not RL.reader_wg_pairs(bf16, {**CP, "kReaderWgPairs": 1})  # one token per CTA (two chunks per row)
    assert RL.reader_wg_ctas_per_sm(fp4, 1, 3, pairs=True) == 2


def test_keys_in_registers_where_the_tma_variant_runs_fp8_tiles_of_one_chunk():
    fp8, bf16, fp4 = (L.compute(spec_of(k)) for k in ("fp8", "bf16", "fp4"))
    keys = {"kReaderWgKeyRegisters": 1}
    assert RL.reader_wg_key_registers(fp8, keys) and not RL.reader_wg_key_registers(fp8)
    assert not RL.reader_wg_key_registers(fp8, {**keys, **CP})  # the cp.async variant stages wgmma's shared operand
    assert not RL.reader_wg_key_registers(fp8, {**keys, "kReaderWgPairs": 1})  # m64n128 groups read A from smem
    assert not RL.reader_wg_key_registers(bf16, keys)  # bf16's A would be 32 registers a thread
    # fp4's cp.async cubin converts its tile into the A registers once for all tokens at head_dim 128: asked for, its
    # tokens are two m64n32 groups each; not with pairs, nor at head_dim 256 (two groups converted per token)
    assert RL.reader_wg_key_registers(fp4, keys) and not RL.reader_wg_key_registers(fp4)
    assert not RL.reader_wg_key_registers(fp4, {**keys, "kReaderWgPairs": 1})
    assert not RL.reader_wg_key_registers(L.compute(with_(spec_of("fp4"), head_dim=256)), keys)
    # fp4's MTP launches pick it, on READER_WG_KEY_REGISTER_STAGES' ring unless the tuning fixes one; next_n 1 not
    fp4_mtp = {"kReaderWgStages": RP.READER_WG_KEY_REGISTER_STAGES["fp4_e2m1"], **keys}
    assert RP.READER_WG_KEY_REGISTER_TOKENS["fp4_e2m1"] == 2 and fp4_mtp["kReaderWgStages"] == 2
    assert RP.reader_wg_shape_tune(fp4, None, 32, 4, 65536, 132) == fp4_mtp
    assert RP.reader_wg_shape_tune(fp4, None, 1, 2, 4096, 132) == fp4_mtp
    assert RP.reader_wg_shape_tune(fp4, None, 32, 1, 65536, 132) is None
    assert RP.reader_wg_shape_tune(fp4, {"kReaderWgStages": 4}, 32, 4, 65536, 132) == {"kReaderWgStages": 4, **keys}
    assert RP.reader_wg_shape_tune(fp4, {"kReaderWgPairs": 1}, 32, 4, 65536, 132) == {"kReaderWgPairs": 1}
    assert fp4_mtp in rc.ring_tunes(fp4.spec, None)
    wide4 = L.compute(with_(spec_of("fp4"), head_dim=256))  # two groups converted per token: not held
    assert RP.reader_wg_shape_tune(wide4, None, 32, 4, 65536, 132) is None
    wide = L.compute(with_(spec_of("fp8"), head_dim=256, store={"block": 256}, host={}))  # 2 chunks: 32 registers
    assert RL.reader_wg_tma(wide) and not RL.reader_wg_key_registers(wide, keys)
    name = fp8.spec.name
    assert "kReaderWgKeyRegisters = 0;" in render_reader(fp8.spec).files[f"{name}/logits_config.cuh"]
    assert "kReaderWgKeyRegisters = 1;" in render_reader(fp8.spec, tune=keys).files[f"{name}/logits_config.cuh"]
    # picked per launch: MTP launches of READER_WG_KEY_REGISTER_TOKENS tokens or more, unless the tuning says
    least = RP.READER_WG_KEY_REGISTER_TOKENS["fp8_e4m3"]
    assert RP.reader_wg_shape_tune(fp8, None, 32, least, 65536, 132) == keys
    assert RP.reader_wg_shape_tune(fp8, None, 32, least - 1, 65536, 132) is None
    assert RP.reader_wg_shape_tune(fp8, {"kReaderWgKeyRegisters": 0}, 32, 4, 65536, 132) == {"kReaderWgKeyRegisters": 0}
    assert RP.reader_wg_shape_tune(bf16, None, 32, 4, 65536, 132) is None
    assert "kReaderWgKeyRegisters" not in RP.reader_wg_shape_tune(fp8, CP, 32, 4, 65536, 132)
    assert keys in rc.ring_tunes(fp8.spec, None)


def test_register_split_plan():
    fp8, bf16, fp4 = (L.compute(spec_of(k)) for k in ("fp8", "bf16", "fp4"))
    # fp8: 4 consumer warpgroups (640 threads launch at 65536 // 640 -> 96 registers; the producer gives back
    # 128 x (96 - 24), so each consumer takes (640 x 96 - 128 x 24) // 512 -> 112); bf16: 3 (512 at 128 -> 160)
    for lay, consumers, launch, regs in ((fp8, 4, 96, 112), (bf16, 3, 128, 160)):
        split = RP.reader_wg_split_tuning(lay)
        assert split["kReaderWgSplit"] == 1 and split["kReaderWgPairs"] == 1
        assert split["kReaderWgConsumers"] == consumers
        assert RL.reader_wg_split(lay, split) and RL.reader_wg_pairs(lay, split) and not RL.reader_wg_split(lay)
        stages = RL.reader_wg_stages(lay, split)
        assert stages % consumers == 0 and RL.reader_wg_tokens_per_cta(lay, stages, tma=True) == 4
        threads = RL.reader_wg_threads(lay, split)
        assert threads == (consumers + 1) * 128
        assert RL.reader_wg_launch_registers(threads) == launch
        assert RL.reader_wg_split_registers(consumers) == regs == RL.reader_wg_planned_registers(lay, split)
        # the warpgroups trade within the CTA's launch registers, and the CTA fits the SM
        assert consumers * 128 * regs + 128 * RL.READER_WG_SPLIT_PRODUCER_REGISTERS <= threads * launch
        assert threads * launch <= RL.READER_SM_REGISTERS
        assert RL.reader_wg_ctas_per_sm(lay, 1, stages, True, consumers, True, True) == 1
        (gx, _, _), launched, _, _ = RP.reader_launch(lay.spec, 32, 2, 65536, 132, wgmma=True, tune=split, lay=lay)
        assert launched == threads and gx == 132
        rv = render_reader(lay.spec, tune=split).files[f"{lay.spec.name}/logits_config.cuh"]
        assert "kReaderWgSplit = 1;" in rv and "kReaderWgMinBlocks = 1;" in rv
        assert f"kReaderWgSplitConsumerRegisters = {regs};" in rv
        assert f"kReaderWgSplitLaunchRegisters = {launch};" in rv
        # no split without pairs or the TMA variant
        assert not RL.reader_wg_split(lay, {**split, "kReaderWgPairs": 0})
        assert RP.reader_wg_split_tuning(lay) not in rc.ring_tunes(lay.spec, None)  # no launch loads it by shape
    # 5 consumer warpgroups leave each 65536 // 768 -> 80, less the producer's share: below the pair cubin's least
    assert RL.reader_wg_split_registers(5) < RL.READER_WG_SPLIT_MIN_CONSUMER_REGISTERS
    assert RL.reader_wg_split_registers(0) == 0  # a split of no consumers plans none (was the 240 cap)
    assert not RL.reader_wg_split(fp8, {**RP.reader_wg_split_tuning(fp8), "kReaderWgConsumers": 5,
                                        "kReaderWgTmaStages": 20})
    assert not RL.reader_wg_split(fp4, RP.reader_wg_split_tuning(fp4))  # the cp.async variant: no producer


def test_launch_tune_follows_the_arch_and_the_shape():
    spec, args = _case("fp8", lens=(5, 70))
    a = dataclasses.replace(ops_reader.check(spec, *args, require_cuda=False), device=H200)
    assert RP.launch_tune(a, "sm_90a") is None  # the TMA variant: one ring; no L2 known: no L2 rule
    assert RP.launch_tune(a, "sm_90a", CP) == {**CP, "kReaderWgStages": 2}  # a small launch: the shallow ring
    assert RP.launch_tune(a, "sm_90a", CP) == {**CP, "kReaderWgStages": 2}  # memoized
    assert RP.launch_tune(a, "sm_90a", {**CP, "kReaderWgStages": 4}) == {**CP, "kReaderWgStages": 4}
    assert RP.launch_tune(a, "sm_90") is None  # the mma.sync path has no ring
    assert RP.launch_tune(a, "sm_90a", {"kReaderWgmma": 0}) == {"kReaderWgmma": 0}
    spec_b, args_b = _case("bf16", lens=(5, 70))  # one SM: 2 x 70 keys are still below its share
    b = dataclasses.replace(ops_reader.check(spec_b, *args_b, require_cuda=False), device=DeviceFacts(0, 1, 0, 90))
    assert RP.launch_tune(b, "sm_90a") is None


@pytest.mark.parametrize("variant,old,new", [
    ("fp8", "kReaderWgChunks = 1;", "kReaderWgChunks = 2;"),
    ("fp8", "kReaderWgTokensPerCta = 4;", "kReaderWgTokensPerCta = 3;"),
    ("fp8", "kReaderWgMinBlocks = 2;", "kReaderWgMinBlocks = 3;"),
    ("fp8", "kReaderWgChunkBytes = 128;", "kReaderWgChunkBytes = 64;"),
    # fp4: q's chunks are the bf16 widening of head_dim
    ("fp4", "kReaderWgChunks = 2;", "kReaderWgChunks = 1;"),
    ("fp4", "kReaderWgMinBlocks = 5;", "kReaderWgMinBlocks = 4;"),
    # the pair cubin: one CTA per SM at its registers; no pairs where a CTA holds one token
    ("fp8-pairs", "kReaderWgMinBlocks = 1;", "kReaderWgMinBlocks = 2;"),
    ("bf16-cp", "kReaderWgPairs = 0;", "kReaderWgPairs = 1;"),
])
def test_wgmma_constant_twins_fire(variant, old, new, cache):
    variant, _, how = variant.partition("-")
    tune = {"pairs": {"kReaderWgPairs": 1, "kReaderWgTmaStages": 16}, "cp": CP, "": None}[how]
    rv = render_reader(spec_of(variant), tune=tune)
    key = f"{spec_of(variant).name}/logits_config.cuh"
    assert old in rv.files[key]
    k, log = compile_log(replace(rv, files={**rv.files, key: rv.files[key].replace(old, new)}), cache)
    assert k is None
    assert "reader-constants" in ASSERT_RE.findall(log), log[-2000:]


def test_fp4_operand_conversion_matches_the_mma_sync_widening(tmp_path):
    # the wgmma path widens fp4 by placing the codes' bits and a bf16x2 multiply (e2m1x8_bf16), the mma.sync path
    # (checked against the Torch path below) by float arithmetic (e2m1x2_bf16): the header's own two
    # functions on the CPU, every scale byte x every code byte in every position of the word, bit for bit
    shim = ROOT / "tests" / "reader_shim"
    exe = tmp_path / "e2m1_convert"
    r = subprocess.run(["g++", "-std=c++20", "-O1", "-ffp-contract=off", "-w", "-include", str(shim / "reader_shim.h"),
                        "-I", str(shim), "-I", str(ROOT / "tests" / "cpu_shim"), "-I", str(include_dirs()[0]),
                        str(shim / "e2m1_convert.cc"), "-o", str(exe)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
    run = subprocess.run([str(exe)], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0 and run.stdout.strip().endswith("0 mismatches in 2097152 values"), run.stdout[-2000:]


def test_a_long_cases_pages_are_all_distinct():
    # past one chunk of written tokens no page repeats (a repeat gives a row exact ties real keys lack); the first
    # chunk keeps the bytes a one-chunk case had
    spec = spec_of("fp8")
    P = L.compute(spec).page_size
    pages = rc.write_pages(spec, 10, seed=4, device="cpu", chunk_tokens=4 * P)
    assert len({bytes(page.numpy()) for page in pages}) == 10
    assert torch.equal(pages[:4], rc.write_pages(spec, 4, seed=4, device="cpu", chunk_tokens=4 * P))


# ---------------------------------------------------------------------------------------------
# argument checks: metadata only, before any launch, each naming its argument


def _case(key="fp8", lens=(5, 70), next_n=1):
    spec = spec_of(key)
    return spec, list(rc.make_case(spec, list(lens), next_n=next_n, device="cpu", seed=1))


@pytest.mark.parametrize("arg,bad,message", [
    ("q", lambda a: a[0].to(torch.bfloat16), r"^q: expected float8_e4m3fn \[B, next_n, 64, 128\], got bfloat16"),
    ("weights", lambda a: a[1][:1], r"^weights: expected float32 \[B \* next_n, H\]"),
    ("cache", lambda a: torch.zeros(4, 8192, dtype=torch.uint8), r"^cache: expected uint8 \[num_pages, 8448\]"),
    ("block_table", lambda a: a[3].long(), r"^block_table: expected int32"),
    ("seq_lens", lambda a: a[4][:1], r"^seq_lens: expected int32 \[B\]"),
])
def test_bad_arguments_are_named(arg, bad, message):
    spec, args = _case()
    i = ["q", "weights", "cache", "block_table", "seq_lens"].index(arg)
    args[i] = bad(args)
    with pytest.raises(ArgumentError, match=message):
        ops_reader.check(spec, *args, require_cuda=False)


def test_values_are_checked_with_check_bounds():
    spec, args = _case()
    args[4] = torch.tensor([5, 10_000], dtype=torch.int32)
    with pytest.raises(ArgumentError, match=r"^seq_lens: seq_lens\[1\] = 10000 is outside"):
        ops_reader.check(spec, *args, require_cuda=False, check_bounds=True)
    spec, args = _case()
    args[3][1, 0] = 10_000
    with pytest.raises(ArgumentError, match=r"^block_table: block_table\[1, 0\] = 10000 is outside"):
        ops_reader.check(spec, *args, require_cuda=False, check_bounds=True)
    ops_reader.check(spec, *args, require_cuda=False)  # values are not read without check_bounds


def test_cpu_tensors_and_unreadable_variants_are_refused_before_any_launch():
    spec, args = _case()
    with pytest.raises(ArgumentError, match=r"^q: expected a CUDA tensor"):
        ops_reader.check(spec, *args)
    packed = load_spec(SPECS / "dsv4/latent_fp8_p64.yaml")
    with pytest.raises(ArgumentError, match=r"^variant: dsv4_latent_fp8_p64 is not an indexer-key variant "
                                            "indexer_logits reads: keys with a kept RoPE span"):
        ops_reader.check(packed, *args, require_cuda=False)


def test_the_ops_name_a_latent_variant_and_other_devices_issue_23():
    import kgen.ops  # noqa: F401 - registers the ops

    latent = str(SPECS / "dsv4/latent_fp8_p64.yaml")
    spec, args = _case()
    for call in (lambda: torch.ops.kgen.indexer_logits(latent, *args),  # CPU: before any shape check
                 lambda: kgen.ops.indexer_logits(latent, *args)):
        with pytest.raises(ArgumentError, match=r"^variant: dsv4_latent_fp8_p64 is not an indexer-key variant"):
            call()
    meta = (args[0].to("meta"), *args[1:])  # one tensor on the meta device: named, not a meta result
    with pytest.raises(ArgumentError, match=r"^weights: on cpu, but q is on meta: all arguments must share one"):
        torch.ops.kgen.indexer_logits(str(SPECS / "dsv4/indexer_fp8.yaml"), *meta)
    for empty in ("", "::x"):  # an empty variant string names no file (was ".: is a directory")
        with pytest.raises(ArgumentError, match=r"^variant: .* names no spec file"):
            torch.ops.kgen.indexer_logits(empty, *args)


def test_abi_check_wants_64_heads_and_the_layouts_q_dtype():
    spec, args = _case()
    # 32 heads: the Torch path takes them, the kernel does not
    args[0], args[1] = args[0][:, :, :32].contiguous(), args[1][:, :32].contiguous()
    want = r"^q: expected float8_e4m3fn \[B, next_n, 64, 128\], got float8_e4m3fn \[2, 1, 32, 128\]"
    with pytest.raises(ArgumentError, match=want):
        ops_reader.check(spec, *args, require_cuda=False)
    spec, args = _case("bf16")
    a = ops_reader.check(spec, *args, require_cuda=False)
    assert a.scalars == {"num_pages": args[2].shape[0], "batch": 2, "next_n": 1, "max_pages": args[3].shape[1],
                         "max_seq_len": args[5]}
    # fp4 keys are multiplied with a bf16 q
    spec4, args4 = _case("fp4")
    assert args4[0].dtype == torch.bfloat16
    ops_reader.check(spec4, *args4, require_cuda=False)


# ---------------------------------------------------------------------------------------------
# the real kernel source on the CPU (tests/reader_shim) against the Torch path


def emulate(spec: Spec, lens: list[int], next_n: int, tmp: Path, *, tune=None, sanitize=False, table_fix=None,
            wgmma=False, sm_count=4):
    import reader_emulate as E

    if wgmma:  # the cp.async variant unless `tune` names the TMA variant (kReaderWgTma 1)
        tune = {"kReaderWgTma": 0, **(tune or {})}
    args = list(rc.make_case(spec, lens, next_n=next_n, device="cpu", seed=7))
    if table_fix:
        table_fix(args)
    exe = E.build(spec, tmp, tune=tune, sanitize=sanitize, wgmma=wgmma)
    got, _ = E.launch(spec, exe, tmp, tuple(args), check_bounds=table_fix is None, wgmma=wgmma, tune=tune,
                      sm_count=sm_count)
    return got, args


def emulated_result(spec: Spec, lens: list[int], next_n: int, tmp: Path, case: str, **kw) -> rc.LogitsResult:
    """`emulate`'s logits (its keywords) against the Torch path's in float64, compared as `case`."""
    got, args = emulate(spec, lens, next_n, tmp, **kw)
    return rc.compare(spec.name, case, got, indexer_logits_torch(spec, *args, accum=torch.float64))


@pytest.mark.parametrize("key,lens,next_n,tune", [
    ("fp8", [1, 63, 64, 65, 300], 1, None),
    ("fp8", [2, 130, 700], 2, {"kReaderPrefetch": 0, "kReaderHeadPasses": 1}),
    ("bf16", [1, 64, 257], 3, None),
    ("fp4", [1, 65, 400], 1, None),
    ("dsv32", [5, 129], 2, {"kReaderHeadPasses": 4, "kReaderMinBlocks": 3}),
])
def test_kernel_source_on_cpu_matches_the_torch_path(key, lens, next_n, tune, tmp_path):
    spec = spec_of(key)
    r = emulated_result(spec, lens, next_n, tmp_path, "emulated", tune=tune)
    assert r.ok, r
    assert r.rows_compared > 0 and r.relative_error < 1e-5  # fp32 sums of exact products


# ragged batches on few SMs (a CTA's share crosses sequences: q restaged per pair, the -inf columns
# split apart) and on more CTAs than tiles; next_n up to 4 from one staging of the keys
@pytest.mark.parametrize("key,lens,next_n,tune,sms", [
    ("fp4", [1, 63, 64, 65, 300], 1, None, 4),
    ("fp4", [2, 130, 700], 3, {"kReaderWgStages": 4}, 4),
    ("fp4", [129, 1000], 2, {"kReaderWgStages": 2}, 4),
    ("fp4", [0, 1, 5, 200, 64, 640], 4, None, 1),
    ("bf16", [1, 65, 257], 2, None, 4),
    ("bf16", [2, 300, 64, 1000, 3], 4, None, 1),
    ("fp8", [1, 64, 200], 3, None, 4),
    ("fp8", [5, 300], 1, {"kReaderWgStages": 2}, 4),
    ("fp8", [0, 1, 3, 64, 65, 129, 700, 2], 4, None, 1),
    ("fp8", [3, 70, 200], 2, {"kReaderWgStages": 2}, 64),
    ("dsv32", [1, 2, 900, 64, 130], 4, {"kReaderWgStages": 2}, 1),
    # more than 128 (sequence, token group) pairs: the lengths' sum takes two rounds (one group per
    # sequence; two groups of one token each for bf16's cp.async variant)
    ("fp8", [i * 37 % 190 for i in range(140)], 1, None, 4),
    ("bf16", [i * 53 % 150 + 1 for i in range(70)], 2, None, 4),
])
def test_wgmma_source_on_cpu_matches_the_torch_path(key, lens, next_n, tune, sms, tmp_path):
    # the sm_90a path's source, its primitives emulated (cp.async copies at once, wgmma per thread from
    # the descriptors' 128-B swizzled layout): staging, the fp4 conversion, the pipeline's indexing, the work
    # split and the epilogue against the Torch path (not the hardware's ordering: tests/test_gpu_indexer.py)
    spec = spec_of(key)
    assert RL.reader_wg_enabled(L.compute(spec), tune)
    r = emulated_result(spec, lens, next_n, tmp_path, "emulated wgmma", tune=tune, wgmma=True, sm_count=sms)
    assert r.ok, r
    assert r.rows_compared > 0 and r.relative_error < 1e-5  # fp32 sums of exact products


# fp4 tiles held in the A registers, each token's heads two m64n32 groups issued ahead of the sums
# (kReaderWgKeyRegisters on the cp.async fp4 cubin): next_n 1-4, ragged lengths, tokens that see no key of a tile,
# a share crossing sequences; its logits bitwise those of the one-token cubin (the heads summed in the same order)
@pytest.mark.parametrize("lens,next_n,tune,sms", [
    ([1, 63, 64, 65, 300], 1, None, 4),
    ([1, 2, 63, 64, 65, 300], 2, {"kReaderWgStages": 2}, 4),
    ([0, 1, 5, 200, 64, 640], 3, {"kReaderWgStages": 4}, 1),
    ([3, 129, 1000], 4, None, 64),
])
def test_fp4_keys_in_registers_on_cpu_match_the_one_token_cubin(lens, next_n, tune, sms, tmp_path):
    spec = spec_of("fp4")
    keys = {**KEYS, **(tune or {})}
    assert RL.reader_wg_key_registers(L.compute(spec), keys)
    got, args = emulate(spec, lens, next_n, tmp_path / "keys", tune=keys, wgmma=True, sm_count=sms)
    r = rc.compare(spec.name, "emulated wgmma fp4 keys in registers", got,
                   indexer_logits_torch(spec, *args, accum=torch.float64))
    assert r.ok, r
    assert r.rows_compared > 0 and r.relative_error < 1e-5
    one, _ = emulate(spec, lens, next_n, tmp_path / "one", tune=tune, wgmma=True, sm_count=sms)
    assert torch.equal(got, one)


# fp4 keys widened into the A registers in groups of 8 k-steps: head_dim 256 takes 2 groups (the second
# group's registers reused once the first group's wgmma are done)
@pytest.mark.parametrize("head_dim,lens,next_n,tune", [
    (256, [1, 65, 300], 1, None),
    (256, [2, 64, 400], 2, None),
    (256, [1, 130, 200], 3, {"kReaderWgPairs": 1}),
])
def test_fp4_register_operand_on_cpu_matches_the_torch_path(head_dim, lens, next_n, tune, tmp_path):
    spec = with_(spec_of("fp4"), head_dim=head_dim)
    assert RL.reader_wg_enabled(L.compute(spec), tune)
    r = emulated_result(spec, lens, next_n, tmp_path, "emulated wgmma", tune=tune, wgmma=True, sm_count=4)
    assert r.ok, r
    assert r.rows_compared > 0 and r.relative_error < 1e-5


# fp4 scale bytes over their range: 0 (2^-127), small, 128 (the last one multiply takes), above 128 (a second
# multiply: e2m1_rest), kept below an fp32 overflow of the logits; rows of one scale, rows of mixed ones
def _fp4_scales_spread(args):
    cache = args[2]
    lay = L.compute(spec_of("fp4"))
    scales = cache[:, lay.scale_region_offset:lay.scale_region_offset + lay.scale_region_bytes]
    g = torch.Generator().manual_seed(3)
    picks = torch.tensor([0, 1, 2, 100, 127, 128, 129, 130, 140], dtype=torch.uint8)
    spread = picks[torch.randint(0, len(picks), scales.shape, generator=g)]
    spread[::2] = picks[torch.randint(0, len(picks), (scales.shape[0] // 2 + scales.shape[0] % 2, 1), generator=g)]
    scales.copy_(spread)


@pytest.mark.parametrize("lens,next_n", [([1, 65, 300], 1), ([2, 130, 400], 2)])
def test_fp4_scales_past_one_multiply_on_cpu_match_the_torch_path(lens, next_n, tmp_path):
    spec = spec_of("fp4")
    r = emulated_result(spec, lens, next_n, tmp_path, "emulated wgmma, scales spread", wgmma=True,
                        table_fix=_fp4_scales_spread)
    assert r.ok, r
    assert r.rows_compared > 0 and r.relative_error < 1e-5 and r.max_abs > 2.0**10  # the large scales were read


PAIRS = {"kReaderWgPairs": 1}


# two MTP tokens per m64n128 group (kReaderWgPairs, emulated: the cp.async variants), next_n 2-4 (3: a pair
# and a single token), ragged lengths, a share crossing sequences, tokens that see no key of a tile
@pytest.mark.parametrize("key,lens,next_n,tune,sms", [
    ("fp8", [1, 2, 63, 64, 65, 300], 2, None, 4),
    ("fp8", [0, 1, 3, 64, 65, 129, 700, 2], 3, None, 1),
    ("fp8", [2, 4, 130, 700], 4, {"kReaderWgStages": 2}, 4),
    ("fp4", [1, 2, 65, 400], 2, None, 4),
    ("fp4", [0, 1, 5, 200, 64, 640], 3, {"kReaderWgStages": 4}, 1),
    ("fp4", [3, 129, 1000], 4, None, 64),
    ("dsv32", [1, 2, 900, 64, 130], 4, {"kReaderWgStages": 2}, 1),
])
def test_pair_source_on_cpu_matches_the_torch_path(key, lens, next_n, tune, sms, tmp_path):
    spec = spec_of(key)
    tune = {**PAIRS, **(tune or {})}
    assert RL.reader_wg_pairs(L.compute(spec), {**CP, **tune})
    r = emulated_result(spec, lens, next_n, tmp_path, "emulated wgmma pairs", tune=tune, wgmma=True, sm_count=sms)
    assert r.ok, r
    assert r.rows_compared > 0 and r.relative_error < 1e-5  # fp32 sums of exact products


TMA = {"kReaderWgTma": 1}
KEYS = {"kReaderWgKeyRegisters": 1}  # key tiles held in the wgmma's A registers (fp8 MTP launches pick it by shape)


# the TMA variant (the shipped cubin of bf16 and fp8 keys; tests/reader_shim emulates its mbarriers, tensor and
# bulk copies, named barriers): a producer warp and 1-3 consumer warpgroups, rings of 2-12 stages, pairs and the
# register split, ragged lengths, next_n 1-4, a share crossing sequences, more CTAs than tiles, more than 128
# and 256 (sequence, token group) pairs
@pytest.mark.parametrize("key,lens,next_n,tune,sms", [
    ("fp8", [1, 63, 64, 65, 300], 1, None, 4),
    ("fp8", [0, 1, 3, 64, 65, 129, 700, 2], 4, None, 1),
    ("fp8", [2, 4, 130, 700], 3, PAIRS, 4),
    ("fp8", [3, 70, 200], 2, {"kReaderWgTmaStages": 12, "kReaderWgConsumers": 3}, 64),
    ("fp8", [5, 300, 64], 2, {"kReaderWgTmaStages": 2, "kReaderWgConsumers": 1}, 2),
    ("fp8", [1, 2, 130, 400], 2, {"kReaderWgSplit": 1, "kReaderWgPairs": 1}, 4),
    ("bf16", [1, 65, 257], 2, None, 4),
    ("bf16", [2, 300, 64, 1000, 3], 4, PAIRS, 1),
    ("dsv32", [1, 2, 900, 64, 130], 4, None, 1),
    ("fp8", [i * 37 % 190 for i in range(140)], 1, None, 4),
    ("fp8", [i * 53 % 300 for i in range(300)], 2, None, 16),  # shares that start in a third round of pairs
    ("fp8", [0, 1, 3, 64, 65, 129, 700, 2], 4, KEYS, 1),
    ("fp8", [3, 70, 200, 1], 3, {**KEYS, "kReaderWgTmaStages": 2, "kReaderWgConsumers": 1}, 2),
    ("dsv32", [1, 2, 900, 64, 130], 1, KEYS, 4),
])
def test_tma_source_on_cpu_matches_the_torch_path(key, lens, next_n, tune, sms, tmp_path):
    spec = spec_of(key)
    tune = {**TMA, **(tune or {})}
    lay = L.compute(spec)
    assert RL.reader_wg_tma(lay, tune)
    assert RL.reader_wg_split(lay, tune) == bool(tune.get("kReaderWgSplit"))
    # fp8 keys in the wgmma's A registers where asked (one token per group)
    fp8 = spec.store.dtype == "fp8_e4m3"
    assert RL.reader_wg_key_registers(lay, tune) == (fp8 and tune.get("kReaderWgKeyRegisters") == 1
                                                     and not RL.reader_wg_pairs(lay, tune))
    r = emulated_result(spec, lens, next_n, tmp_path, "emulated wgmma tma", tune=tune, wgmma=True, sm_count=sms)
    assert r.ok, r
    assert r.rows_compared > 0 and r.relative_error < 1e-5


def test_tma_source_on_cpu_for_random_specs(tmp_path):
    # layouts the TMA variant reads beyond the shipped ones: pages of several sizes (whole tiles a page), bf16 and
    # fp8, head_dim 256 (two 128-B chunks a row, a box each)
    sampled = [s for s in rc.sample_readable(60, seed=4) if RL.reader_wg_tma(L.compute(s), TMA)]
    pages = sorted({s.layout.page_size for s in sampled})
    assert len(pages) >= 2, pages
    picked = [next(s for s in sampled if s.layout.page_size == p) for p in pages[:3]]
    picked += [s for s in sampled if L.compute(s).row_bytes > RL.READER_WG_CHUNK_BYTES][:1]
    assert {s.store.dtype for s in picked} >= {"fp8_e4m3"}, [s.store.dtype for s in picked]
    for i, spec in enumerate(picked):
        r = emulated_result(spec, [3, spec.layout.page_size + 1, 200], 1 + i % 3, tmp_path / str(i),
                            "emulated wgmma tma", tune=TMA, wgmma=True)
        assert r.ok and r.relative_error < 1e-5, (spec.model_dump(), r)


def test_pair_source_on_cpu_for_random_specs(tmp_path):
    # pages smaller than a tile and of several sizes, fp4 scale strides, head_dim 256 (fp4: 4 operand chunks
    # chunk-major in q's buffer), next_n 2 and 3
    sampled = [s for s in rc.sample_readable(40, seed=3) if RL.reader_wg_pairs(L.compute(s), {**CP, **PAIRS})]
    pages = sorted({s.layout.page_size for s in sampled})
    assert len(pages) >= 3 and any(p < RL.READER_WG_TILE_KEYS for p in pages), pages
    picked = [next(s for s in sampled if s.layout.page_size == p) for p in pages[:4]]
    picked += [s for s in sampled if s.store.dtype == "fp4_e2m1" and s.head_dim == 256][:1]
    for i, spec in enumerate(picked):
        r = emulated_result(spec, [3, spec.layout.page_size + 1, 200], 2 + i % 2, tmp_path / str(i),
                            "emulated wgmma pairs", tune=PAIRS, wgmma=True)
        assert r.ok and r.relative_error < 1e-5, (spec.model_dump(), r)


def test_wgmma_source_on_cpu_for_random_fp4_specs(tmp_path):
    # the fp4 staging's other branches: pages smaller than a tile (rows staged one by one), scale strides
    # other than 4 B, head_dim 256 (4 operand chunks, 8 scale bytes per key)
    sampled = [s for s in rc.sample_readable(60, seed=1) if s.store.dtype == "fp4_e2m1"
               and RL.reader_wg_enabled(L.compute(s))]
    small = next(s for s in sampled if s.layout.page_size < RL.READER_WG_TILE_KEYS)
    wide = next(s for s in sampled if s.head_dim == 256)
    strided = with_(spec_of("fp4"), layout={"scale_stride": 8})  # a tile's scale words not consecutive
    specs = [small, wide, strided]
    assert all(RL.reader_wg_enabled(L.compute(s)) for s in specs)
    for i, spec in enumerate(specs):
        r = emulated_result(spec, [3, spec.layout.page_size + 1, 200], 2, tmp_path / str(i), "emulated wgmma",
                            wgmma=True)
        assert r.ok and r.relative_error < 1e-5, (spec.model_dump(), r)


def test_kernel_source_on_cpu_for_random_readable_specs(tmp_path):
    specs = rc.sample_readable(3, seed=5)
    assert len(specs) == 3
    for i, spec in enumerate(specs):
        r = emulated_result(spec, [3, spec.layout.page_size + 1, 200], 2, tmp_path / str(i), "emulated")
        assert r.ok, (spec.model_dump(), r)


@pytest.mark.parametrize("key,wgmma,tune", [("fp8", False, None), ("fp4", True, None), ("fp8", True, TMA)])
def test_kernel_reads_nothing_outside_the_cache_under_asan(key, wgmma, tune, tmp_path):
    """A visible key whose table entry lies outside the cache is not read: its logit is NaN (ASan
    would report a read outside the buffers), every other logit as the Torch path. `wgmma`: the sm_90a
    path's source (fp4: its rows staged one by one, their scale words zero-filled where not read; TMA: the
    producer copies no box of the bad page and writes its rows' factors NaN)."""
    spec = spec_of(key)

    def corrupt(args):
        args[3][1, 1] = 10 ** 6  # page 1 of sequence 1 (keys 64..127)

    got, args = emulate(spec, [70, 150], 1, tmp_path, sanitize=True, table_fix=corrupt, wgmma=wgmma, tune=tune)
    assert torch.isnan(got[1, 64:128]).all() and not torch.isnan(got[1, :64]).any()
    fixed = [a.clone() if hasattr(a, "clone") else a for a in args]
    fixed[3][1, 1] = fixed[3][0, 0]  # any valid page: only the NaN columns differ
    want = indexer_logits_torch(spec, *fixed, accum=torch.float64)
    keep = torch.ones_like(got, dtype=torch.bool)
    keep[1, 64:128] = False
    assert torch.isneginf(got[~torch.isfinite(want) & keep]).all()
    assert torch.allclose(got[keep & torch.isfinite(want)], want[keep & torch.isfinite(want)].float(), rtol=1e-5,
                          atol=1e-5)
