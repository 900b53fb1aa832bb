"""torch.ops.kgen.indexer_topk on the GPU: the kernel's sets against kgen.score.topk_reference over the reader's
own logits (exact: the kernel applies the reference's tie rule), for ragged lengths, next_n 1..4, k = 512 and
2048, every layout the reader reads (fp8, bf16, fp4); the select op alone on crafted logits (ties, one value,
a narrow range, NaN, -0, 256K keys); CUDA-graph capture and the per-call fast path; indexer_topk_slots and
indexer_topk_logits_slots against kgen.score.topk_slots of the indices. Marked `gpu`; skipped
cleanly without a GPU."""

from __future__ import annotations

from pathlib import Path

import pytest

from kgen import runtime

REASON = runtime.gpu_problem()
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(REASON is not None, reason=f"needs a CUDA GPU: {REASON}")]

ROOT = Path(__file__).resolve().parents[1]
FAMILY = ROOT / "specs" / "dsv4.yaml"
VARIANTS = [f"{FAMILY}::dsv4_indexer_fp8", f"{FAMILY}::dsv4_indexer_bf16", f"{FAMILY}::dsv4_indexer_fp4"]
FP8 = VARIANTS[0]


@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: v.rsplit("::", 1)[-1])
def test_op_matches_the_reference_on_the_readers_logits(variant):
    from kgen import reader_check as RC
    from kgen.resolve import resolve_spec

    spec = resolve_spec(variant)
    results = RC.test_topk([spec], say=lambda _line: None)
    assert results and all(r.ok for r in results), [r.to_json() for r in results if not r.ok]
    # the cases reach past k (selection) and below it (padding)
    assert {r.k for r in results} == set(RC.TOPK_KS)


def _select_case(logits, seq_lens, next_n, k):
    import torch

    from kgen.ops import indexer_topk_logits
    from kgen.score import same_sets, topk_reference

    got = indexer_topk_logits(FP8, logits.cuda(), seq_lens.cuda(), k).cpu()
    want = topk_reference(logits, seq_lens, next_n, k)
    assert got.dtype == torch.int32 and got.shape == want.shape
    return same_sets(got, want), got, want


@pytest.mark.parametrize("kind", ["randn", "ties", "one_value", "narrow", "specials", "signed_zero"])
@pytest.mark.parametrize("k", [512, 2048])
def test_select_on_crafted_logits(kind, k):
    import torch

    g = torch.Generator().manual_seed(hash((kind, k)) % 1000)
    lens = torch.tensor([262144, 70001, 3000, 2049], dtype=torch.int32)
    next_n = 2
    x = {"randn": lambda: torch.randn(8, 262144, generator=g),
         "ties": lambda: torch.randint(0, 5, (8, 262144), generator=g).float(),
         "one_value": lambda: torch.full((8, 262144), 1.5),
         "narrow": lambda: 1 + 1e-4 * torch.randn(8, 262144, generator=g),
         "specials": lambda: torch.randn(8, 262144, generator=g),
         "signed_zero": lambda: torch.zeros(8, 262144)}[kind]()
    if kind == "specials":
        x[:, 5] = float("nan")
        x[:, 6] = float("inf")
        x[:, 7] = -float("inf")
    if kind == "signed_zero":
        x[:, ::3] = -0.0
        x[:, 1::97] = 1.0
    bad, got, want = _select_case(x, lens, next_n, k)
    assert bad == [], (kind, bad[:4])
    # rows with fewer visible keys than k: 0..L-1 ascending, then -1
    if k == 2048:  # row 6 sees exactly k keys (2049 - 2 + 1 + 0): all of them, ascending
        assert got[6].tolist() == list(range(2048))
    assert (got[got >= 0] < 262144).all()


@pytest.mark.parametrize("width", [20000, 32769, 65536, 131072 + 3])
@pytest.mark.parametrize("kind", ["randn", "ties"])
def test_select_on_each_cluster_size(width, kind):
    import torch

    from kgen.topk_plan import topk_cluster

    # 8 CTAs per row by the keys; the 16 rows' clusters of 8 do not all run at once on a 132-SM part: 4 there
    assert topk_cluster(width) == 8
    g = torch.Generator().manual_seed(width)
    next_n = 4
    lens = torch.tensor([width, width - 999, 2500, 2048], dtype=torch.int32)  # ragged; rows at and below k
    x = (torch.randn(16, width, generator=g) if kind == "randn"
         else torch.randint(0, 3, (16, width), generator=g).float())
    for k in (512, 2048):
        bad, got, _ = _select_case(x, lens, next_n, k)
        assert bad == [], (width, kind, k, bad[:4])


@pytest.mark.parametrize("kind", ["randn", "ties", "one_value"])
def test_slices_past_a_blocks_shared_memory_are_read_from_the_row(kind):
    import torch

    from kgen import topk_plan as TP

    # rows of 256K keys too many for clusters of 8 (H200: 32 rows, clusters of 4 on its 132 SMs), so each CTA's slice
    # of 64K or more keys is more than its shared memory holds and every pass reads it from the row (the digit loop
    # too: "ties", "one_value")
    sm_count = torch.cuda.get_device_properties(0).multi_processor_count
    width, rows = 262144, max(32, 2 * (sm_count // 16 + 1))
    cluster = TP.topk_cluster(width, rows, sm_count)
    assert cluster > 1 and TP.topk_slice(width, cluster) > TP.TOPK_SLICE_CAP, (sm_count, cluster)
    g = torch.Generator().manual_seed(17)
    x = {"randn": lambda: torch.randn(rows, width, generator=g),
         "ties": lambda: torch.randint(0, 3, (rows, width), generator=g).float(),
         "one_value": lambda: torch.full((rows, width), -2.0)}[kind]()
    lens = torch.randint(width // 2, width + 1, (rows // 2,), generator=g, dtype=torch.int32)  # ragged
    lens[0] = width
    for k in (512, 2048):
        bad, _, _ = _select_case(x, lens, 2, k)
        assert bad == [], (kind, k, bad[:4])


def test_rows_past_the_drivers_count_of_clusters_run_on_smaller_ones():
    import torch

    from kgen import topk_plan as TP
    from kgen.ops.topk import _op, prepare_select

    width = 65536  # clusters of 8 by the keys, halved to what runs at once
    x = torch.randn(1, width)
    lens = torch.full((1,), width, dtype=torch.int32)
    assert _select_case(x, lens, 1, 512)[0] == []  # loads the kernel: its facts hold the driver's answers
    facts = _op(FP8).kernels[torch.cuda.current_device()]["facts"]
    fours = facts.clusters_at_once(4)
    assert fours and facts.clusters_at_once(2)  # the driver answered for the portable sizes
    rows = fours + 1  # one row more than clusters of 4 run at once: smaller clusters, all at once
    g = torch.Generator().manual_seed(rows)
    x = torch.randn(rows, width, generator=g)
    lens = torch.randint(width // 2, width + 1, (rows,), generator=g, dtype=torch.int32)
    lens[0] = width
    bad, _, _ = _select_case(x, lens, 1, 512)
    assert bad == []
    want = TP.topk_cluster(width, rows, facts.sm_count, at_once=facts.clusters_at_once)
    assert want < 4 and (want == 1 or rows <= facts.clusters_at_once(want))
    grids = {entry[1] for entry in _op(FP8)._shapes.values()}
    assert (want, rows, 1) in grids, (want, sorted(g for g in grids if g))
    launch, _ = prepare_select(FP8, x.cuda(), lens.cuda(), 512)  # the benchmarks' launcher says the same grid
    assert launch.grid == (want, rows, 1)


@pytest.mark.parametrize("rows, width", [(1, 131072), (2, 262144)])
def test_long_rows_run_on_wide_clusters_where_the_driver_says_they_fit(rows, width):
    import torch

    from kgen import topk_plan as TP
    from kgen.ops.topk import _op

    g = torch.Generator().manual_seed(width + rows)
    x = torch.randn(rows, width, generator=g)
    lens = torch.full((rows,), width, dtype=torch.int32)
    bad, _, _ = _select_case(x, lens, 1, 512)
    assert bad == []
    op = _op(FP8)
    facts = op.kernels[torch.cuda.current_device()]["facts"]  # the driver's answers for the kernel
    print(f"clusters of (CTAs, that run at once): {facts.cluster_counts} on {facts.sm_count} SMs")
    wide = facts.clusters_at_once(TP.TOPK_CLUSTER_MAX)
    want = TP.TOPK_CLUSTER_MAX if wide >= rows else TP.TOPK_CLUSTER_PORTABLE
    grids = {entry[1] for entry in op._shapes.values()}  # every shape's launch grid so far
    assert (want, rows, 1) in grids, (want, sorted(g for g in grids if g))
    x[0, 12345] = 1e30  # and the sets still follow the logits
    bad, got, _ = _select_case(x, lens, 1, 512)
    assert bad == [] and 12345 in got[0].tolist()


def test_short_rows_pad_with_minus_one():
    import torch

    lens = torch.tensor([0, 1, 100, 600], dtype=torch.int32)
    x = torch.randn(4, 600)
    bad, got, _ = _select_case(x, lens, 1, 512)
    assert bad == []
    assert (got[0] == -1).all() and got[1, 0] == 0 and (got[1, 1:] == -1).all()
    assert got[2, :100].tolist() == list(range(100)) and (got[2, 100:] == -1).all()
    assert sorted(got[3].tolist()) == sorted(torch.topk(x[3], 512).indices.tolist())


@pytest.mark.parametrize("op_name", ["indexer_topk", "indexer_topk_slots"])
def test_graph_capture_and_fast_path_repeat_the_same_sets(op_name):
    import torch

    from kgen import ops
    from kgen import reader_check as RC
    from kgen.resolve import resolve_spec
    from kgen.score import same_sets

    op = getattr(ops, op_name)  # the indices, or the cache slots (its own kernel and chain)
    spec = resolve_spec(FP8)
    args = RC.make_case(spec, [70000, 5000], next_n=2, seed=3)
    first = op(FP8, *args, 512)
    again = op(FP8, *args, 512)  # the fast path (native or Python entry)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        op(FP8, *args, 512)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=side):
        captured = op(FP8, *args, 512)
    graph.replay()
    torch.cuda.synchronize()
    assert same_sets(first, again) == [] and same_sets(first, captured) == []


def test_bad_k_is_one_located_error():
    from kgen import reader_check as RC
    from kgen.abi import ArgumentError
    from kgen.ops import indexer_topk
    from kgen.resolve import resolve_spec

    args = RC.make_case(resolve_spec(FP8), [100], seed=1)
    with pytest.raises(ArgumentError, match=r"^k: expected an int in \[1, 65536\], got 0$"):
        indexer_topk(FP8, *args, 0)


@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: v.rsplit("::", 1)[-1])
@pytest.mark.parametrize("lens, next_n, k", [([70000, 5000, 300], 2, 512), ([131075, 17], 1, 2048),
                                             ([9000, 40000, 600, 1], 4, 512)])
def test_slots_are_the_selection_through_the_block_table(variant, lens, next_n, k):
    from kgen import reader_check as RC
    from kgen.ops import indexer_logits, indexer_topk, indexer_topk_logits_slots, indexer_topk_slots
    from kgen.resolve import resolve_spec
    from kgen.score import same_sets, topk_reference, topk_slots

    spec = resolve_spec(variant)
    page = spec.layout.page_size
    q, w, cache, table, seq_lens, msl = RC.make_case(spec, lens, next_n=next_n, seed=7)
    indices = indexer_topk(variant, q, w, cache, table, seq_lens, msl, k).cpu()
    slots = indexer_topk_slots(variant, q, w, cache, table, seq_lens, msl, k).cpu()
    again = indexer_topk_slots(variant, q, w, cache, table, seq_lens, msl, k).cpu()  # the fast path (the chain)
    want = topk_slots(indices, table.cpu(), next_n, page)
    assert same_sets(slots, want) == [] and same_sets(again, want) == []
    logits = indexer_logits(variant, q, w, cache, table, seq_lens, msl)
    chosen = topk_slots(topk_reference(logits.cpu(), seq_lens.cpu(), next_n, k), table.cpu(), next_n, page)
    assert same_sets(indexer_topk_logits_slots(variant, logits, seq_lens, table, k).cpu(), chosen) == []



def test_read_host_cost_times_each_op_through_its_native_path():
    """`kgen bench`'s reader.host on this GPU: every op timed idle and behind a busy GPU, the native kernels
    installed (DeepGEMM left out: the peer is for the bench's runs). No bound on the figures: they are the bench's."""
    import torch

    from kgen.host_cost import read_host_cost
    from kgen.resolve import resolve_spec

    e = read_host_cost(torch, resolve_spec(FP8))
    ops = {"indexer_logits", "indexer_topk", "indexer_topk_slots"}
    for figures in (e["us_per_call"], e["us_per_call_gpu_busy"]):
        assert set(figures) == ops | {"dispatch_floor"}
        assert all(0 < us < 1e4 for us in figures.values()), figures
    assert e["native"].startswith("on") and e["peer"]["present"] is False
