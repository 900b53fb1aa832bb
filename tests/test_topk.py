"""The top-k's contract on the CPU: kgen.score.topk_reference against a brute-force sort (ties, padding, ragged
rows, next_n up to 4), the slots through the block table, the ops' CPU and fake paths and their argument
checks, the kernel's rendered numbers, and the real kernel source on the CPU emulator (tests/topk_shim)."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from kgen import score
from kgen import topk_plan as TP
from kgen.abi import INDEXER_TOPK, KERNELS, ArgumentError
from kgen.arch import CAPACITY

FP8 = "specs/dsv4.yaml::dsv4_indexer_fp8"


def brute(values: list[float], length: int, k: int) -> list[int]:
    """The contract by hand: the k largest of values[:length], the lower index first among equals."""
    if length <= k:
        return list(range(length)) + [-1] * (k - length)
    order = sorted(range(length), key=lambda i: (-values[i], i))
    return order[:k]


@settings(max_examples=60, deadline=None)
@given(data=st.data(), batch=st.integers(1, 4), next_n=st.integers(1, 4), k=st.integers(1, 40),
       width=st.integers(1, 90))
def test_reference_is_the_brute_force_sort(data, batch, next_n, k, width):
    # few distinct values: ties at the k-th value are common
    palette = data.draw(st.lists(st.sampled_from([-2.0, -0.0, 0.0, 0.5, 1.0, 3.0, 1e30]), min_size=1, max_size=4))
    rows = batch * next_n
    flat = data.draw(st.lists(st.sampled_from(palette), min_size=rows * width, max_size=rows * width))
    lens = data.draw(st.lists(st.integers(0, width + 3), min_size=batch, max_size=batch))
    x = torch.tensor(flat, dtype=torch.float32).reshape(rows, width)
    got = score.topk_reference(x, torch.tensor(lens, dtype=torch.int32), next_n, k)
    vis = score.visible_lengths(lens, next_n).clamp(max=width)
    ties = score.topk_ties(x, torch.tensor(lens), next_n, k)
    for r in range(rows):
        n = int(vis[r])
        values = [v if v != 0 else 0.0 for v in x[r].tolist()]
        assert got[r].tolist() == brute(values, n, k)
        if n > k:
            kth = values[got[r, -1]]
            assert int(ties[r]) == sum(values[i] == kth for i in range(n)) - sum(
                values[i] == kth for i in got[r].tolist())
        else:
            assert int(ties[r]) == 0


def test_reference_counts_nan_above_inf_and_pads():
    x = torch.tensor([[1.0, float("nan"), float("inf"), -1.0, float("nan")]])
    assert score.topk_reference(x, torch.tensor([5]), 1, 3).tolist() == [[1, 4, 2]]
    assert score.topk_reference(x, torch.tensor([2]), 1, 3).tolist() == [[0, 1, -1]]
    # next_n = 2: row j sees seq_len - 2 + 1 + j keys
    two = torch.arange(10, dtype=torch.float32).repeat(2, 1)
    assert score.topk_reference(two, torch.tensor([4]), 2, 3).tolist() == [[0, 1, 2], [3, 2, 1]]


def test_slots_follow_the_block_table():
    idx = torch.tensor([[0, 65, -1], [130, 3, 64]], dtype=torch.int32)
    table = torch.tensor([[7, 2, 9]], dtype=torch.int32)
    slots = score.topk_slots(idx, table, next_n=2, page_size=64)
    assert slots.tolist() == [[7 * 64, 2 * 64 + 1, -1], [9 * 64 + 2, 7 * 64 + 3, 2 * 64]]
    table[0, 1] = -1  # no page: its keys' slots are -1
    assert score.topk_slots(idx, table, 2, 64).tolist() == [[7 * 64, -1, -1], [9 * 64 + 2, 7 * 64 + 3, -1]]
    # a column past the table: no page either (as the reader reads it)
    assert score.topk_slots(idx, table[:, :2].contiguous(), 2, 64).tolist() == [[7 * 64, -1, -1], [-1, 7 * 64 + 3, -1]]
    assert score.topk_slots(idx, table[:, :0], 2, 64).tolist() == [[-1] * 3] * 2


def test_same_sets_ignores_order_and_sees_a_changed_member():
    a = torch.tensor([[3, 1, 2], [5, -1, -1]])
    assert score.same_sets(a, torch.tensor([[1, 2, 3], [-1, 5, -1]])) == []
    assert score.same_sets(a, torch.tensor([[1, 2, 4], [5, -1, -1]])) == [0]


# ---- the ops' CPU and fake paths ----------------------------------------------------------------


@pytest.fixture(scope="module")
def case():
    import kgen.ops  # noqa: F401 - registers the ops
    from kgen import reader_check as RC
    from kgen.resolve import resolve_spec

    return RC.make_case(resolve_spec(FP8), [70, 1, 300], next_n=2, seed=1, device="cpu")


def test_cpu_op_is_the_reference_over_the_reference_logits(case):
    q, w, cache, table, lens, msl = case
    got = torch.ops.kgen.indexer_topk(FP8, q, w, cache, table, lens, msl, 64)
    logits = torch.ops.kgen.indexer_logits(FP8, *case)
    assert got.dtype == torch.int32 and got.shape == (6, 64)
    assert torch.equal(got, score.topk_reference(logits, lens, 2, 64))
    assert torch.equal(got, torch.ops.kgen.indexer_topk_logits(FP8, logits, lens, 64))
    assert (got[2] == -1).all() and got[3, 0] == 0 and (got[3, 1:] == -1).all()  # sequence 1 has one key


def test_cpu_slots_ops_are_the_selection_through_the_table(case):
    q, w, cache, table, lens, msl = case
    logits = torch.ops.kgen.indexer_logits(FP8, *case)
    want = score.topk_slots(score.topk_reference(logits, lens, 2, 64), table, 2, 64)
    assert torch.equal(torch.ops.kgen.indexer_topk_slots(FP8, q, w, cache, table, lens, msl, 64), want)
    assert torch.equal(torch.ops.kgen.indexer_topk_logits_slots(FP8, logits, lens, table, 64), want)
    assert (want >= 0).sum() == (torch.ops.kgen.indexer_topk(FP8, q, w, cache, table, lens, msl, 64) >= 0).sum()


def test_slots_past_a_short_block_table_are_minus_one_and_a_bad_table_one_line(case):
    q, w, cache, table, lens, msl = case
    logits = torch.ops.kgen.indexer_logits(FP8, *case)
    short = table[:, :2].contiguous()  # keys from 128 on have no page
    got = torch.ops.kgen.indexer_topk_logits_slots(FP8, logits, lens, short, 64)
    indices = score.topk_reference(logits, lens, 2, 64)
    assert torch.equal(got, score.topk_slots(indices, short, 2, 64))
    assert ((indices >= 128) <= (got == -1)).all() and (got[indices >= 128] == -1).any()
    with pytest.raises(ArgumentError, match=r"^block_table: expected int32 \[B, max_pages\] with B = 3"):
        torch.ops.kgen.indexer_topk_logits_slots(FP8, logits, lens, table.long(), 64)


def test_fake_op_gives_the_shape(case):
    q, w, cache, table, lens, msl = case
    with torch._subclasses.FakeTensorMode() as mode:
        fake = [mode.from_tensor(t) for t in (q, w, cache, table, lens)]
        out = torch.ops.kgen.indexer_topk(FP8, *fake, msl, 100)
        sel = torch.ops.kgen.indexer_topk_logits(FP8, mode.from_tensor(torch.zeros(6, msl)), fake[4], 7)
        slots = torch.ops.kgen.indexer_topk_slots(FP8, *fake, msl, 100)
        sel_slots = torch.ops.kgen.indexer_topk_logits_slots(FP8, mode.from_tensor(torch.zeros(6, msl)), fake[4],
                                                             fake[3], 7)
    assert out.shape == (6, 100) and out.dtype == torch.int32 and sel.shape == (6, 7)
    assert slots.shape == (6, 100) and slots.dtype == torch.int32 and sel_slots.shape == (6, 7)


@pytest.mark.parametrize("k, message", [
    (0, r"^k: expected an int in \[1, 65536\], got 0$"),
    (65537, r"^k: expected an int in \[1, 65536\], got 65537$"),
])
def test_bad_k_is_one_located_line(case, k, message):
    q, w, cache, table, lens, msl = case
    with pytest.raises(ArgumentError, match=message):
        torch.ops.kgen.indexer_topk(FP8, q, w, cache, table, lens, msl, k)


@pytest.mark.parametrize("logits, seq_lens, message", [
    (torch.zeros(6, 10, dtype=torch.float64), torch.zeros(3, dtype=torch.int32),
     r"^logits: expected float32 \[B \* next_n, max_seq_len\], got float64 \[6, 10\]$"),
    (torch.zeros(5, 10), torch.zeros(3, dtype=torch.int32), r"^logits: its 5 rows are not B \* next_n for seq_lens"),
    (torch.zeros(6, 10), torch.zeros(3, dtype=torch.int64), r"^seq_lens: expected int32 \[B\], got int64 \[3\]$"),
])
def test_select_argument_checks(logits, seq_lens, message):
    import kgen.ops  # noqa: F401

    with pytest.raises(ArgumentError, match=message):
        torch.ops.kgen.indexer_topk_logits(FP8, logits, seq_lens, 4)


# ---- the kernel: its table, its rendered numbers, its source on the CPU emulator ---------------------------


def test_the_table_is_in_the_registry_and_renders_the_plans_numbers():
    from kgen import render
    from kgen.resolve import resolve_spec

    assert KERNELS["indexer_topk"] is INDEXER_TOPK and INDEXER_TOPK.output == "indices"
    rv = render.render_kernel(resolve_spec(FP8), INDEXER_TOPK)
    config = rv.files["dsv4_indexer_fp8/topk_config.cuh"]
    for name, value in TP.topk_constants().items():
        assert f"static constexpr long long {name} = {value};" in config
    assert TP.TOPK_SHARED_BYTES == TP.TOPK_STATE_BYTES + 4 * TP.TOPK_BINS + 8 * TP.TOPK_CANDIDATES
    assert rv.name_expression == "kgen::indexer_topk<kgen_topk::dsv4_indexer_fp8>"


@pytest.fixture(scope="module")
def emulator(tmp_path_factory):
    return _emulator(tmp_path_factory, "indexer_topk")


def _emulator(tmp_path_factory, kernel: str):
    """(spec, executable, work directory) of the launch emulator around `kernel` of the fp8 variant."""
    import shutil

    if shutil.which("g++") is None:
        pytest.skip("no g++")
    from topk_emulate import build

    from kgen.resolve import resolve_spec

    spec = resolve_spec(FP8)
    work = tmp_path_factory.mktemp(kernel)
    return spec, build(spec, work, kernel=kernel), work


def test_a_key_floor_value_tests_values_as_their_order_keys(tmp_path):
    """The sweeps test values against a bin's key range as floats (key_floor_value): checked on the CPU for keys at
    and beside every coarse floor and the key space's edges, against values around them, signed zeros, infinities
    and NaNs of both signs (tests/topk_shim/key_floor.cc)."""
    import shutil
    import subprocess

    if shutil.which("g++") is None:
        pytest.skip("no g++")
    from topk_emulate import build

    from kgen.resolve import resolve_spec

    exe = build(resolve_spec(FP8), tmp_path, program="key_floor")
    r = subprocess.run([str(exe)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr[-2000:]
    pairs = int(r.stdout.split()[0])
    assert pairs >= (3 << TP.TOPK_COARSE_BITS) ** 2  # three keys at each bin's floor, against at least as many values


# values the coarse bins must order as the fp32 keys do: signed zeros, the edges of the bins' octave window
# (kgen.topk_plan: [2^-16, 2^16), each side of both edges, both signs), magnitudes clamped below and above it,
# subnormals, infinities, NaN, and values a bin apart and inside one bin
_OCTAVES = 2 ** (TP.TOPK_COARSE_BITS - 1 - TP.TOPK_COARSE_MANTISSA_BITS)
_LOW, _HIGH = 2.0 ** TP.TOPK_COARSE_LOW_EXPONENT, 2.0 ** (TP.TOPK_COARSE_LOW_EXPONENT + _OCTAVES)
SPECIALS = (-0.0, 0.0, -1e-30, 1e-30, 6e-8, -6e-8, 3e-8, 65504.0, 65519.0, 65520.0, 1e30, -1e30, float("inf"),
            -float("inf"), float("nan"), 1.0, 1.0009765625, 1.00048828125, -1.0, 2.5, 1e-45,
            _LOW, -_LOW, math.nextafter(_LOW, 0.0), -math.nextafter(_LOW, 0.0),
            _HIGH, -_HIGH, math.nextafter(_HIGH, 0.0), -math.nextafter(_HIGH, 0.0))


def logits_of(kind: str, rows: int, width: int, g: torch.Generator) -> torch.Tensor:
    """Rows of one of the value mixes the kernel's paths split on."""
    if kind == "specials":
        return torch.tensor(SPECIALS)[torch.randint(0, len(SPECIALS), (rows, width), generator=g)]
    if kind == "zero_threshold":  # < 500 positive keys, then thousands of -0 and +0: the k-th value is a zero
        pick = torch.randint(0, 100, (rows, width), generator=g)
        low = torch.tensor((-1e-30, -6e-8, -3e-8, -1.0, -float("inf")))[pick % 5]
        zero = torch.where(pick % 2 == 0, -0.0, 0.0)
        return torch.where(pick < 3, 1.0 + torch.rand(rows, width, generator=g),
                           torch.where(pick < 50, zero, low))
    return {"randn": lambda: torch.randn(rows, width, generator=g),
            "ties": lambda: torch.randint(0, 3, (rows, width), generator=g).float(),
            "one_value": lambda: torch.full((rows, width), -0.0),
            # distinct values inside one or two coarse bins: the digit-by-digit fallback
            "one_bin": lambda: 1.0 + 1e-4 * torch.randn(rows, width, generator=g),
            # a few dozen keys in the threshold bin, ties among them: the rank count's order
            "rounded": lambda: torch.round(100 * torch.randn(rows, width, generator=g)) / 100,
            # a few hundred keys of one value in the threshold bin: the rank count's order among ties
            "quarters": lambda: torch.round(4 * torch.randn(rows, width, generator=g)) / 4,
            "randn_ties": lambda: torch.randn(rows, width, generator=g).clamp(min=0.5),
            # one key in 20 far above the rest: on a cluster of 4 or more the k-th key's chunk of the merged
            # histogram lies below the chunk of the larger keys (the coarse pass; one_bin_spread: the digit loop)
            "spread": lambda: _spread(0.01 * torch.randn(rows, width, generator=g), g),
            "one_bin_spread": lambda: _spread(1.5 + 1e-4 * torch.randn(rows, width, generator=g), g)}[kind]()


def _spread(x: torch.Tensor, g: torch.Generator) -> torch.Tensor:
    far = torch.rand(x.shape, generator=g) < 0.05
    return torch.where(far, 4.0 + 100.0 * torch.rand(x.shape, generator=g), x)


@pytest.mark.parametrize("kind", ["randn", "ties", "one_value", "one_bin", "specials", "zero_threshold",
                                  "rounded", "quarters"])
def test_kernel_source_on_the_cpu_matches_the_reference(emulator, kind):
    from topk_emulate import launch

    spec, exe, work = emulator
    g = torch.Generator().manual_seed(7)
    width = 9001  # odd: rows start unaligned, the scalar head and tail run
    x = logits_of(kind, 4, width, g)
    lens = torch.tensor([width, 300], dtype=torch.int32)
    got = launch(spec, exe, work, x, lens, 500)
    want = score.topk_reference(x, lens, 2, 500)
    assert score.same_sets(got, want) == []
    assert got[2, :299].tolist() == list(range(299)) and (got[2, 299:] == -1).all()  # 300 - 2 + 1 keys


def _bin_of_size(size: int, need: int, width: int, k: int, g: torch.Generator) -> torch.Tensor:
    """A row whose coarse threshold bin holds `size` keys (pairs of them equal), `need` of them to take: k - need keys
    above it, the rest below, at shuffled positions."""
    assert 1 <= need <= size and k - need + size <= width
    bin_values = 1.0 + (torch.arange(size) // 2).float() * 2.0**-15  # one coarse bin: [1, 1 + 1/32)
    above = 8.0 + torch.arange(k - need).float() / k
    below = torch.full((width - size - (k - need),), -1.0)
    row = torch.cat([above, bin_values, below])
    return row[torch.randperm(width, generator=g)]


# threshold bins the rank count orders: one candidate, each side of 32, 64, 128 and 256, up to TOPK_RANK_CAP
RANK_SIZES = [(1, 1), (2, 1), (31, 16), (32, 32), (33, 1), (64, 63), (65, 33), (128, 100), (129, 129),
              (256, 7), (257, 200), (511, 256), (512, 511)]


@pytest.mark.parametrize("cluster", [1, 2])
def test_the_rank_count_orders_threshold_bins_of_every_size(emulator, cluster):
    from topk_emulate import launch

    spec, exe, work = emulator
    assert max(size for size, _ in RANK_SIZES) == TP.TOPK_RANK_CAP
    g = torch.Generator().manual_seed(3)
    width, k = (4096, 512) if cluster == 1 else (16400, 512)
    x = torch.stack([_bin_of_size(size, need, width, k, g) for size, need in RANK_SIZES])
    lens = torch.full((len(RANK_SIZES),), width, dtype=torch.int32)
    got = launch(spec, exe, work, x, lens, k, cluster=cluster)
    assert score.same_sets(got, score.topk_reference(x, lens, 1, k)) == []


def test_the_plan_splits_long_rows_over_a_cluster():


    # rows of up to TOPK_ONE_CTA_KEYS keys stay on one CTA; a longer one on a power of two of CTAs holding at most
    # TOPK_SLICE_KEYS keys each, up to 8
    assert TP.TOPK_ONE_CTA_KEYS == 16384 and TP.TOPK_SLICE_KEYS == 4096
    assert [TP.topk_cluster(n) for n in (1, 4096, 8193, 16384, 16385, 32768, 32769, 65536, 262144)] == [1, 1, 1, 1, 8,
                                                                                                      8, 8, 8, 8]
    with pytest.MonkeyPatch.context() as mp:  # the powers of two below 8, where a slice holds more
        mp.setattr(TP, "TOPK_SLICE_KEYS", 8192)
        assert [TP.topk_cluster(n) for n in (16385, 32768, 32769)] == [4, 4, 8]
    assert TP.topk_cluster(8 * TP.TOPK_SLICE_CAP + 1) == 8  # no slice fits: each CTA reads its slice from the row
    assert TP.topk_grid(6, 65536) == ((8, 6, 1), TP.TOPK_THREADS)
    # on a device, clusters halved until every row's cluster runs at once (one CTA per SM): 16 rows of 8 CTAs
    # fit 132 SMs; 17 take 4 each, 34 two, 67 one (the one-CTA path); slices past TOPK_SLICE_CAP keys stay on
    # their clusters (read from the row in each pass, no shared memory asked for them)
    assert TP.topk_grid(16, 65536, sm_count=132) == ((8, 16, 1), TP.TOPK_THREADS)
    assert TP.topk_grid(17, 65536, sm_count=132) == ((4, 17, 1), TP.TOPK_THREADS)
    assert [TP.topk_cluster(65536, rows, 132) for rows in (32, 34, 66, 67)] == [4, 2, 2, 1]
    assert TP.topk_cluster(16385, rows=66, sm_count=132) == 2 and TP.topk_cluster(16385, rows=67, sm_count=132) == 1
    assert TP.topk_cluster(262144, rows=8, sm_count=132) == 8 and TP.topk_cluster(262144, rows=32, sm_count=132) == 4
    assert TP.topk_shared_bytes(262144, 4) == TP.TOPK_CLUSTER_FIXED_BYTES  # slices of 64K keys: none held
    assert TP.topk_shared_bytes(262144, 1) == TP.TOPK_SHARED_BYTES  # the one-CTA path asks for its own
    assert TP.topk_grid(70000, 4096) == ((1, 65535, 2), TP.TOPK_THREADS)  # row = y + 65535 z
    assert TP.topk_shared_bytes(4096) == TP.TOPK_SHARED_BYTES
    big = TP.TOPK_STATE_BYTES + 12 * TP.TOPK_CLUSTER_BINS + 8 * TP.TOPK_CLUSTER_CANDIDATES + 4 * 32768
    assert TP.topk_shared_bytes(262144) == big and big <= 227 * 1024  # sm_90's opt-in limit per block
    assert INDEXER_TOPK.cluster_x


def test_the_launch_takes_the_devices_sm_count():
    from types import SimpleNamespace

    from kgen.arch import DeviceFacts

    h200 = DeviceFacts(index=0, sm_count=132, l2_bytes=0, capability=90)
    for rows, cluster in ((8, 8), (64, 2)):
        a = SimpleNamespace(dims={"rows": rows, "max_seq_len": 262144}, device=h200)
        assert INDEXER_TOPK.grid(a)[0] == (cluster, rows, 1)
        assert INDEXER_TOPK.shared_bytes(a) == TP.topk_shared_bytes(262144, cluster)
    unplaced = SimpleNamespace(dims={"rows": 64, "max_seq_len": 262144}, device=None)  # checked for no GPU
    assert INDEXER_TOPK.grid(unplaced)[0] == (8, 64, 1)


def _told(**counts: int):
    """`at_once` of a device whose driver answered `counts` (c2=..., c4=...: clusters of 2, 4 CTAs at once)."""
    return lambda size: counts.get(f"c{size}")


def test_a_row_of_eight_ctas_goes_wide_where_the_device_runs_every_rows_wide_cluster():
    from types import SimpleNamespace

    from kgen.arch import DeviceFacts

    # 16 CTAs of at least TOPK_WIDE_SLICE_KEYS keys each, where the driver said that many wide clusters run at once
    wide = _told(c16=7)
    assert TP.topk_cluster(131072, 1, 132, at_once=wide) == 16
    assert TP.topk_cluster(262144, 7, 132, at_once=wide) == 16
    assert TP.topk_cluster(262144, 8, 132, at_once=wide) == 8  # one row too many: portable clusters
    assert TP.topk_cluster(262144, 1, 132) == 8  # the driver was not asked
    assert TP.topk_cluster(262144, 1, 132, at_once=_told(c16=0)) == 8  # or said none
    assert TP.topk_cluster(65536, 1, 132, at_once=wide) == 16  # 4K a CTA of 16
    assert TP.topk_cluster(65000, 1, 132, at_once=wide) == 8  # 4064 keys a CTA of 16: too few
    assert TP.topk_cluster(16385, 1, 132, at_once=wide) == 8  # 1028 keys a CTA of 16: too few
    assert TP.topk_cluster(65536, 1, 132, clusters=False, at_once=wide) == 1
    assert INDEXER_TOPK.cluster_sizes == TP.TOPK_CLUSTER_SIZES == (2, 4, 8, 16)
    h200 = DeviceFacts(index=0, sm_count=132, l2_bytes=0, capability=90, cluster_counts=((16, 7),))
    a = SimpleNamespace(dims={"rows": 2, "max_seq_len": 262144}, device=h200)
    assert INDEXER_TOPK.grid(a)[0] == (16, 2, 1)
    assert INDEXER_TOPK.shared_bytes(a) == TP.TOPK_CLUSTER_FIXED_BYTES + 4 * 16384  # 16K keys a CTA, held


def test_clusters_are_halved_until_the_drivers_count_of_them_runs_at_once():
    from types import SimpleNamespace

    from kgen.arch import DeviceFacts

    # a cluster runs within one GPC: 33 clusters of 4 by the SM count, fewer where the GPCs' sizes leave SMs over
    gpcs = _told(c2=66, c4=30, c8=15)
    assert TP.topk_cluster(65536, 30, 132, at_once=gpcs) == 4
    assert TP.topk_cluster(65536, 32, 132) == 4  # by the SM count, 128 of 132 SMs: one wave
    assert TP.topk_cluster(65536, 32, 132, at_once=gpcs) == 2  # by the driver's, 32 clusters of 4 are two waves
    assert TP.topk_cluster(262144, 15, 132, at_once=gpcs) == 8
    assert TP.topk_cluster(262144, 16, 132, at_once=gpcs) == 4  # 16 clusters of 8 fit 132 SMs, not its GPCs
    assert TP.topk_cluster(262144, 67, 132, at_once=gpcs) == 1
    assert TP.topk_cluster(65536, 32, 132, at_once=_told(c4=0)) == 4  # no answer for 4: the SM count decides
    facts = DeviceFacts(index=0, sm_count=132, l2_bytes=0, capability=90, cluster_counts=((4, 30), (2, 66)))
    assert facts.clusters_at_once(4) == 30 and facts.clusters_at_once(8) is None
    a = SimpleNamespace(dims={"rows": 32, "max_seq_len": 65536}, device=facts)
    assert INDEXER_TOPK.grid(a)[0] == (2, 32, 1)
    assert INDEXER_TOPK.shared_bytes(a) == TP.topk_shared_bytes(65536, 2)

class _Driver:
    """The calls DriverKernel.clusters_at_once makes of cuda.bindings' driver, recorded."""

    class CUfunction_attribute:  # noqa: N801 - the driver's names
        CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK = "max threads"
        CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED = "non-portable"

    class CUlaunchAttributeID:  # noqa: N801
        CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION = "cluster dimension"

    class CUlaunchConfig:
        pass

    class CUlaunchAttribute:
        def __init__(self):
            from types import SimpleNamespace

            self.value = SimpleNamespace(clusterDim=SimpleNamespace())

    def __init__(self, refuse: bool = False, answer=7):
        self.calls: list = []
        self.refuse, self.answer = refuse, answer

    def cuFuncGetAttribute(self, attr, fn):  # noqa: N802
        return 0, 1024

    def cuFuncSetAttribute(self, fn, attr, value):  # noqa: N802
        self.calls.append(("set", fn, attr, value))
        return (1 if self.refuse else 0,)

    def cuCtxPushCurrent(self, ctx):  # noqa: N802
        self.calls.append(("push", ctx))
        return (0,)

    def cuCtxPopCurrent(self):  # noqa: N802
        self.calls.append(("pop",))
        return 0, None

    def cuOccupancyMaxActiveClusters(self, fn, cfg):  # noqa: N802
        (dim,) = cfg.attrs
        self.calls.append(("occupancy", fn, (cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ),
                           (cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ), cfg.sharedMemBytes, dim.id,
                           (dim.value.clusterDim.x, dim.value.clusterDim.y, dim.value.clusterDim.z)))
        if isinstance(self.answer, Exception):
            raise self.answer
        return 0, self.answer


def test_the_driver_says_how_many_clusters_run(monkeypatch):
    from kgen import launcher

    kernel = launcher.DriverKernel(0, 0xF0, None, ("module", "fn", "ctx"))
    drv = _Driver()
    monkeypatch.setattr(launcher, "driver", lambda: drv)
    assert kernel.clusters_at_once(16) == 7
    # a wide size allowed on the function first, then asked for with a CTA of its launch bounds, in its context
    assert drv.calls == [("push", "ctx"), ("set", "fn", "non-portable", 1),
                         ("occupancy", "fn", (16, 1, 1), (1024, 1, 1), 0, "cluster dimension", (16, 1, 1)), ("pop",)]
    drv.calls.clear()
    assert kernel.clusters_at_once(4) == 7  # a portable size: asked, nothing set
    assert [c[0] for c in drv.calls] == ["push", "occupancy", "pop"] and drv.calls[1][-1] == (4, 1, 1)
    # a refusal or a failing call is no answer (0), never an error
    drv = _Driver(refuse=True)
    monkeypatch.setattr(launcher, "driver", lambda: drv)
    assert kernel.clusters_at_once(16) == 0 and not [c for c in drv.calls if c[0] == "occupancy"]
    assert drv.calls[-1] == ("pop",)
    drv = _Driver(answer=RuntimeError("no such call"))
    monkeypatch.setattr(launcher, "driver", lambda: drv)
    assert kernel.clusters_at_once(8) == 0 and drv.calls[-1] == ("pop",)


@pytest.mark.parametrize("cc", sorted(CAPACITY))
@pytest.mark.parametrize("rows", [1, 8, 64])
def test_every_devices_launch_fits_its_shared_memory_and_clusters(cc, rows):
    # sm_120's blocks hold 99 KB and sm_80's, sm_86's and sm_89's no cluster: a row of 256K keys on a cluster of 8
    # would ask for 188 KB to hold its slices (so it reads them from the row), and a cluster dimension before sm_90
    # is no launch at all
    from types import SimpleNamespace

    from kgen.arch import DeviceFacts

    d = DeviceFacts(index=0, sm_count=170, l2_bytes=0, capability=cc)
    for msl in (4096, 8193, 65536, 100_000, 262144, 1 << 20):
        a = SimpleNamespace(dims={"rows": rows, "max_seq_len": msl}, device=d)
        (cluster, _, _), _ = INDEXER_TOPK.grid(a)
        assert cluster == 1 or d.clusters
        if TP.TOPK_SHARED_BYTES <= d.block_shared_bytes:  # the one-CTA path fits every device but sm_75
            assert INDEXER_TOPK.shared_bytes(a) <= d.block_shared_bytes, (cc, rows, msl, cluster)
    long_row = SimpleNamespace(dims={"rows": 1, "max_seq_len": 65536}, device=d)
    assert INDEXER_TOPK.grid(long_row)[0][0] == (8 if cc >= 90 else 1)  # sm_120's slices of 8K keys fit 99 KB


def test_a_launch_past_the_devices_shared_memory_is_a_located_error():
    import dataclasses

    from kgen.arch import DeviceFacts
    from kgen.diagnostics import KgenError
    from kgen.ops.topk import check_logits
    from kgen.resolve import resolve_spec

    spec = resolve_spec(FP8)
    a = check_logits(spec, torch.zeros(1, 4096), torch.full((1,), 4096, dtype=torch.int32), 512, require_cuda=False)
    turing = dataclasses.replace(a, device=DeviceFacts(index=0, sm_count=40, l2_bytes=0, capability=75))
    with pytest.raises(KgenError) as e:
        turing.shared_bytes()
    msg = e.value.problems[0].format()
    assert f"wants {TP.TOPK_SHARED_BYTES} B" in msg and "sm_75" in msg and f"{64 * 1024} B" in msg
    hopper = dataclasses.replace(a, device=DeviceFacts(index=0, sm_count=132, l2_bytes=0, capability=90))
    assert hopper.shared_bytes() == TP.TOPK_SHARED_BYTES


@pytest.mark.parametrize("pdl", [False, True])
def test_a_cluster_launch_packs_its_cluster_dimension_per_call(pdl):
    import struct

    from kgen import launcher

    fmt = INDEXER_TOPK.struct_format
    buf = launcher.PreparedLaunch(fmt, 1024, pdl=pdl, cluster=True)
    values = tuple(range(1, 1 + len(struct.Struct(fmt).unpack(bytes(struct.calcsize(fmt))))))
    buf.pack((8, 6, 1), 70000, 0x1234, *values)
    fields = buf.config_fields()
    assert fields[:6] == (8, 6, 1, 1024, 1, 1) and fields[6:8] == (70000, 0x1234) and fields[9] == 1 + pdl
    assert fields[8] == buf.config_address + 56  # the attributes follow the config
    got = buf.attributes()
    if pdl:
        assert got[0][0] == launcher.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
        assert struct.unpack_from("<i", got[0][1]) == (1,)
    assert got[-1][0] == launcher.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
    assert struct.unpack_from("<III", got[-1][1]) == (8, 1, 1)
    assert buf.param_bytes() == struct.pack(fmt, *values)
    assert buf.kernel_params() == (buf.config_address + buf._params_at,)
    buf.pack((2, 3, 1), 0, 0, *values)  # another shape: the cluster follows the grid
    assert struct.unpack_from("<III", buf.attributes()[-1][1]) == (2, 1, 1)
    buf.pack((1, 3, 1), 0, 0, *values)  # one CTA per row: no cluster attribute (PDL kept)
    assert buf.config_fields()[9] == int(pdl) and buf.param_bytes() == struct.pack(fmt, *values)
    assert (buf.config_fields()[8] != 0) == pdl


@pytest.mark.parametrize("cluster, kind, next_n, k, held", [
    (2, "randn", 2, 500, True),
    (4, "ties", 4, 2048, True),  # three values: thousands of keys equal to the k-th, across the ranks
    (3, "one_value", 1, 512, True),  # one value: rank r takes its ties only after the ranks below it
    (8, "randn_ties", 2, 512, True),
    (2, "one_bin", 1, 512, True),  # the coarse bin overflows rank 0's candidates: the digit loop
    (4, "specials", 2, 2048, True),
    (2, "zero_threshold", 1, 512, True),
    (4, "rounded", 2, 512, True),
    (4, "spread", 2, 512, True),  # the threshold's chunk below another: the counts of the chunks above it
    (8, "spread", 1, 512, True),
    (4, "one_bin_spread", 1, 512, True),
    (16, "spread", 1, 512, True),  # kTopkClusterMax: a non-portable cluster
    (16, "one_bin_spread", 1, 512, True),  # its digit loop
    # a launch without room for the slices: every pass reads them from the row
    (2, "randn", 2, 500, False),
    (4, "ties", 2, 2048, False),
    (3, "one_value", 1, 512, False),
    (2, "one_bin", 1, 512, False),
    (2, "specials", 2, 512, False),  # the threshold in the top bin (no key above it), NaNs, values read from the row
])
def test_cluster_path_on_the_cpu_matches_the_reference(emulator, cluster, kind, next_n, k, held):
    from topk_emulate import launch

    spec, exe, work = emulator
    # no room: a block holds the cluster path's fixed bytes and no slice
    limit = None if held else TP.TOPK_CLUSTER_FIXED_BYTES
    g = torch.Generator().manual_seed(11 + cluster)
    width = 9001 if cluster < 8 else 4099  # odd: every slice but the first starts unaligned
    rows = 2 * next_n
    x = logits_of(kind, rows, width, g)
    lens = torch.tensor([width - 17, k], dtype=torch.int32)  # ragged; the second sequence's rows see <= k keys
    got = launch(spec, exe, work, x, lens, k, cluster=cluster, shared_limit=limit)
    want = score.topk_reference(x, lens, next_n, k)
    assert score.same_sets(got, want) == []
    short = next_n  # the second sequence's first row: k - next_n + 1 keys, then -1
    n = k - next_n + 1
    assert got[short, :n].tolist() == list(range(n)) and (got[short, n:] == -1).all()


@pytest.fixture(scope="module")
def slots_emulator(tmp_path_factory):
    return _emulator(tmp_path_factory, "indexer_topk_slots")


@pytest.mark.parametrize("cluster, kind, next_n, k", [
    (1, "randn", 2, 512),  # one CTA: the coarse pass
    (1, "one_bin", 1, 512),  # one CTA: the digit reads
    (4, "randn", 2, 500),  # a cluster: rank 0 finishes after the others' sweep
    (2, "one_bin", 1, 512),  # a cluster's digit loop
    (8, "spread", 2, 2048),
])
def test_slots_kernel_on_the_cpu_is_the_selection_through_the_table(slots_emulator, cluster, kind, next_n, k):
    from topk_emulate import launch

    spec, exe, work = slots_emulator
    page = spec.layout.page_size
    g = torch.Generator().manual_seed(5 + cluster)
    width = 9001 if cluster > 1 else 4099
    x = logits_of(kind, 2 * next_n, width, g)
    lens = torch.tensor([width - 17, k], dtype=torch.int32)  # the second sequence's rows see <= k keys
    pages = -(-width // page)
    table = torch.randperm(4 * pages, generator=g)[: 2 * pages].reshape(2, pages).to(torch.int32)  # distinct pages
    table[:, 0] = -1  # no page for keys 0..63 of either sequence: their slots are -1
    got = launch(spec, exe, work, x, lens, k, cluster=cluster, block_table=table)
    want = score.topk_slots(score.topk_reference(x, lens, next_n, k), table, next_n, page)
    assert score.same_sets(got, want) == []
    short = next_n  # the second sequence's first row: keys 0 .. k - next_n, its first page's slots -1
    n = k - next_n + 1
    assert got[short, page:n].tolist() == [int(table[1, i // page]) * page + i % page for i in range(page, n)]
    assert (got[short, :page] == -1).all() and (got[short, n:] == -1).all()


def test_ties_past_the_eighth_rank_of_a_wide_cluster_go_in_index_order(emulator):
    from topk_emulate import launch

    spec, exe, work = emulator
    # ten slices of -1 and six of 0: more zeros than rank 0's candidates (the digit loop), none above them, so the
    # k zeros with the lowest indices are taken on ranks 10 to 12 of 16, each after the zeros of the ranks below it
    width, k = 12001, 2048
    first = 10 * TP.topk_slice(width, 16)  # rank 10's first key
    x = torch.full((1, width), -1.0)
    x[0, first:] = 0.0
    lens = torch.tensor([width], dtype=torch.int32)
    got = launch(spec, exe, work, x, lens, k, cluster=16)
    assert score.same_sets(got, score.topk_reference(x, lens, 1, k)) == []
    assert sorted(got[0].tolist()) == list(range(first, first + k))


def test_a_row_too_long_for_its_slices_reads_them_from_the_row(emulator):
    from topk_emulate import launch

    spec, exe, work = emulator
    width = 2 * TP.TOPK_SLICE_CAP + 8  # two CTAs would each need more than TOPK_SLICE_CAP keys
    assert TP.topk_shared_bytes(width, 2) == TP.TOPK_CLUSTER_FIXED_BYTES  # no room asked for them
    x = torch.randn(1, width, generator=torch.Generator().manual_seed(5))
    lens = torch.tensor([width], dtype=torch.int32)
    got = launch(spec, exe, work, x, lens, 512, cluster=2)
    assert score.same_sets(got, score.topk_reference(x, lens, 1, 512)) == []


def test_recall_measures_each_selection_stage():
    from kgen import recall

    g = torch.Generator().manual_seed(3)
    ref = torch.randn(6, 300, generator=g, dtype=torch.float64)
    var = ref + 0.05 * torch.randn(6, 300, generator=g, dtype=torch.float64)
    positions, placed, sigma = torch.zeros(6, dtype=torch.long), torch.ones(6, dtype=torch.bool), torch.ones(6)
    stages = {"exact": lambda lg: torch.topk(lg, 20, dim=1).indices,
              "last": lambda lg: torch.topk(-lg, 20, dim=1).indices,  # the 20 smallest: a broken selection
              "half": lambda lg: torch.cat((torch.topk(lg, 10, dim=1).indices, torch.full((6, 10), -1)), 1)}
    m = recall.compare(ref, var, ref, var, positions, placed, sigma, 20, stages)
    sel = m["selection"]
    assert sel["exact"]["agreement_with_exact_selection"] == 1.0
    assert sel["exact"]["agreement"] == pytest.approx(m["agreement"])
    assert sel["last"]["agreement_with_exact_selection"] == 0.0
    assert sel["half"]["agreement_with_exact_selection"] == 0.5  # -1 padding counts as a miss


def test_recall_counts_ties_with_the_kth_score_by_value():
    from kgen import recall

    # every score equal: any k keys are an exact top-k, whichever tie rule picked them
    flat = torch.zeros(3, 50, dtype=torch.float64)
    low_first = torch.arange(10).expand(3, 10)  # kgen's rule: the lower index wins
    high_first = torch.arange(40, 50).expand(3, 10)
    assert recall.topk_hits(flat, low_first, 10).tolist() == [1.0] * 3
    assert recall.topk_hits(flat, high_first, 10).tolist() == [1.0] * 3
    # 4 keys above the k-th score and 3 tied at it for the top-6's last 2 places: the 4 and any 2 of the 3
    s = torch.tensor([[9.0, 8.0, 7.0, 6.0, 5.0, 5.0, 5.0, 1.0, 0.0, -1.0]], dtype=torch.float64)
    assert recall.topk_hits(s, torch.tensor([[0, 1, 2, 3, 6, 4]]), 6).item() == 1.0
    assert recall.topk_hits(s, torch.tensor([[0, 1, 2, 3, 6, 7]]), 6).item() == 5 / 6  # 1.0 is below the k-th
    assert recall.topk_hits(s, torch.tensor([[0, 4, 5, 6, 8, -1]]), 6).item() == 3 / 6  # three ties, two places
    # degenerate keys through compare: both stages exact
    stages = {"low": lambda lg: torch.arange(10).expand(lg.shape[0], 10),
              "torch": lambda lg: torch.topk(lg, 10, dim=1).indices}
    pos, placed, sigma = torch.zeros(3, dtype=torch.long), torch.zeros(3, dtype=torch.bool), torch.ones(3)
    m = recall.compare(flat, flat, flat, flat, pos, placed, sigma, 10, stages)
    assert m["agreement"] == 1.0
    assert all(v == {"agreement": 1.0, "agreement_with_exact_selection": 1.0} for v in m["selection"].values())
