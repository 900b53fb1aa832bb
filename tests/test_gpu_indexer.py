"""The read side on a GPU (skipped without one): kgen::indexer_logits against kgen.score's Torch path
for the shipped indexer variants (kgen.reader_check's comparison: error <= 1e-3 of max |logit|, -inf
exactly where the Torch path has it, top-512 sets equal but for near-ties), under CUDA-graph capture,
and through torch.ops.kgen.indexer_logits."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from kgen import reader_check as rc  # noqa: E402
from kgen.reference import load_spec  # noqa: E402
from kgen.runtime import gpu_problem  # noqa: E402
from strategies import ROOT  # noqa: E402

REASON = gpu_problem()
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(REASON is not None, reason=f"needs a CUDA GPU: {REASON}")]
SPECS = ROOT / "specs"
INDEXER = ["dsv4/indexer_fp8.yaml", "dsv4/indexer_fp4.yaml", "indexer_bf16.yaml", "dsv32_indexer.yaml"]


@pytest.mark.parametrize("tune", [None, {"kReaderWgTma": 0}], ids=["default", "cp.async"])
@pytest.mark.parametrize("path", INDEXER)
@pytest.mark.parametrize("case", [0, 3, 6, 7])  # ragged lengths at next_n 1, 2, 4; 140 sequences
def test_kernel_matches_the_torch_path(path, case, tune):
    spec = load_spec(SPECS / path)
    lens, next_n = rc.correctness_cases(spec)[case]
    r = rc.run_case(spec, lens, next_n=next_n, tune=tune)
    assert r.ok, r


def test_prepared_launch_replays_in_a_cuda_graph():
    from kgen.ops.reader import prepare
    from kgen.score import indexer_logits_torch

    spec = load_spec(SPECS / "dsv4/indexer_fp8.yaml")
    args = rc.make_case(spec, [100, 5000, 64], next_n=2, seed=3)
    launch, out = prepare(spec, *args)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        launch()
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=side):
        launch()
    out.fill_(float("nan"))
    g.replay()
    torch.cuda.synchronize()
    r = rc.compare(spec.name, "graph", out, indexer_logits_torch(spec, *args, accum=torch.float64))
    assert r.ok, r
    # other lengths in the same tensor: the replay splits the work by the new lengths (the kernel derives
    # its schedule from seq_lens; nothing captured depends on them)
    args[4].copy_(torch.tensor([90, 4999, 3], dtype=torch.int32, device=args[4].device))  # within their pages
    out.fill_(float("nan"))
    g.replay()
    torch.cuda.synchronize()
    r = rc.compare(spec.name, "graph, new lengths", out, indexer_logits_torch(spec, *args, accum=torch.float64))
    assert r.ok, r


def test_torch_op_runs_the_kernel_on_cuda_tensors():
    import kgen.ops  # noqa: F401 - registers the ops
    spec_path = str(SPECS / "indexer_bf16.yaml")
    spec = load_spec(spec_path)
    args = rc.make_case(spec, [1, 65, 3000], seed=4)
    got = torch.ops.kgen.indexer_logits(spec_path, *args)
    from kgen.score import indexer_logits_torch

    r = rc.compare(spec.name, "op", got, indexer_logits_torch(spec, *args, accum=torch.float64))
    assert r.ok, r


def test_reader_started_early_waits_for_the_writer_before_it():
    # The writer lets the next grid start right after its own PDL wait; the reader, launched with the
    # same attribute (kgen.layout.uses_pdl), must wait before it reads a key. Each round rewrites every
    # page of the cache with the writer kernel and scores it at once on the same stream: a reader that
    # read before the writer finished would see the previous round's keys (or zeros).
    import kgen.ops as ops
    from kgen.layout import compute
    from kgen.score import indexer_logits_torch

    spec = load_spec(SPECS / "dsv4/indexer_fp8.yaml")
    n = 1 << 16
    q, weights, cache, table, seq_lens, msl = rc.make_case(spec, [n], seed=5, extra_pages=0, max_seq_len=n)
    from kgen.runtime import load

    assert load(spec).pdl and load(spec, kernel="indexer_logits").pdl  # both launched with the attribute
    P = compute(spec).page_size
    slots = (table[0, : n // P, None].long() * P + torch.arange(P, device="cuda")).reshape(-1)
    for r in range(4):
        cache.zero_()
        ops.norm_rope_store(spec, *rc.writer_inputs(spec, n, seed=10 + r), slots, cache)
        got = ops.indexer_logits(spec, q, weights, cache, table, seq_lens, msl)
        torch.cuda.synchronize()
        want = indexer_logits_torch(spec, q, weights, cache, table, seq_lens, msl, accum=torch.float64)
        res = rc.compare(spec.name, f"round {r}", got, want)
        assert res.ok, res


# The TMA variant of the sm_90a path (kReaderWgTma; the shipped default for these layouts): two ring shapes
# (fp8's default, two CTAs per SM of two consumer warpgroups; one CTA of three) and the evict-first L2 policy,
# bf16 and fp8 keys, ragged lengths, MTP, and a page outside the cache. The cp.async variant:
# test_kernel_matches_the_torch_path's cases with kReaderWgTma 0.
TMA_TUNES = [{"kReaderWgTma": 1, "kReaderWgTmaStages": 8, "kReaderWgConsumers": 2},
             {"kReaderWgTma": 1, "kReaderWgTmaStages": 12, "kReaderWgConsumers": 3},
             {"kReaderWgTma": 1, "kReaderWgEvictFirst": 1},  # the L2 policy of launches the L2 cannot hold
             {"kReaderWgTma": 1, "kReaderWgKeyRegisters": 1}]  # fp8 tiles in the A registers at every next_n


def _runs_tma(spec, tune) -> bool:
    from kgen import layout as L
    from kgen import reader_layout as RL
    from kgen.arch import has_wgmma
    from kgen.runtime import device_arch

    return has_wgmma(device_arch(spec, 0)) and RL.reader_wg_tma(L.compute(spec), tune)


@pytest.mark.parametrize("tune", TMA_TUNES, ids=["2x2", "1x3", "evict-first", "keys-in-registers"])
@pytest.mark.parametrize("path", ["dsv4/indexer_fp8.yaml", "indexer_bf16.yaml"])
@pytest.mark.parametrize("case", [0, 2, 3, 4, 6, 7])
def test_tma_variant_matches_the_torch_path(path, case, tune):
    spec = load_spec(SPECS / path)
    if not _runs_tma(spec, tune):
        pytest.skip("the TMA variant runs on sm_90a with room for its ring")
    lens, next_n = rc.correctness_cases(spec)[case]
    r = rc.run_case(spec, lens, next_n=next_n, tune=tune)
    assert r.ok, r


@pytest.mark.parametrize("how", ["pairs", "split"])
@pytest.mark.parametrize("path", INDEXER)
@pytest.mark.parametrize("case", [3, 4, 5, 6, 7])  # next_n 2, 4, 3, 4 (40 sequences), 2 (140 sequences)
def test_pair_cubin_matches_the_torch_path(path, case, how):
    """Two MTP tokens per m64n128 group (kReaderWgPairs: the TMA variant for fp8 and bf16, the cp.async
    one for fp4), each half of the accumulators one token's logits with its visibility; next_n 3's odd token
    an m64n64 group on the first half. `split`: the TMA pair cubin with the register split (fp8: 4 consumer
    warpgroups at 112 registers)."""
    from kgen import layout as L
    from kgen import reader_layout as RL
    from kgen import reader_plan as RP

    spec = load_spec(SPECS / path)
    lay = L.compute(spec)
    tune = (RP.reader_wg_pair_tuning if how == "pairs" else RP.reader_wg_split_tuning)(lay)
    if how == "split" and not RL.reader_wg_split(lay, tune):
        pytest.skip("the register split is the TMA variant's")
    assert RL.reader_wg_pairs(lay, tune)
    lens, next_n = rc.correctness_cases(spec)[case]
    r = rc.run_case(spec, lens, next_n=next_n, tune=tune)
    assert r.ok, r


@pytest.mark.parametrize("case", [0, 3, 4, 5, 6])  # next_n 1, 2, 4, 3, 4 (40 sequences)
def test_fp4_keys_in_registers_match_the_torch_path(case):
    """fp4's held tile scored as two m64n32 groups a token, each issued before the warpgroup sums the last
    (kReaderWgKeyRegisters on the cp.async fp4 cubin): its asynchronous wgmma on the hardware, where the CPU
    emulation runs them in order."""
    from kgen import layout as L
    from kgen import reader_layout as RL

    spec, tune = load_spec(SPECS / "dsv4/indexer_fp4.yaml"), {"kReaderWgKeyRegisters": 1}
    assert RL.reader_wg_key_registers(L.compute(spec), tune)
    lens, next_n = rc.correctness_cases(spec)[case]
    r = rc.run_case(spec, lens, next_n=next_n, tune=tune)
    assert r.ok, r


@pytest.mark.parametrize("path", ["dsv4/indexer_fp8.yaml", "indexer_bf16.yaml"])
def test_tma_variant_reads_no_page_outside_the_cache(path):
    """A visible tile whose table entry lies outside the cache is not copied: its logits are NaN, every
    other logit as the Torch path's (the producer writes the tile's factors instead of copying it)."""
    from kgen.score import indexer_logits_torch

    spec, tune = load_spec(SPECS / path), TMA_TUNES[0]
    if not _runs_tma(spec, tune):
        pytest.skip("the TMA variant runs on sm_90a")
    args = list(rc.make_case(spec, [70, 150, 300], seed=3))
    good = args[3][1, 1].item()
    args[3][1, 1] = 10 ** 6  # page 1 of sequence 1: keys 64..127
    launch, got = rc.launcher(spec, tuple(args), tune)
    got.fill_(0.0)
    launch()
    torch.cuda.synchronize()
    assert torch.isnan(got[1, 64:128]).all() and not torch.isnan(got[1, :64]).any()
    args[3][1, 1] = good
    want = indexer_logits_torch(spec, *args, accum=torch.float64)
    keep = torch.ones_like(got, dtype=torch.bool)
    keep[1, 64:128] = False
    r = rc.compare(spec.name, "bad page", torch.where(keep, got, want.float()), want)
    assert r.ok, r


@pytest.mark.parametrize("path", INDEXER)
def test_eager_op_calls_take_the_native_path_and_stay_right(path):
    """Repeated eager calls of torch.ops.kgen.indexer_logits: the first teaches the per-shape entry and the
    native kernel, the next ones launch natively (the logits allocated in C++, the cache's tensor map
    from its per-address table); another cache tensor, another max_seq_len and a CUDA-graph replay of the
    op all still match the Torch path."""
    import kgen.ops as ops
    from kgen.score import indexer_logits_torch

    spec_path = str(SPECS / path)
    spec = load_spec(spec_path)
    q, w, cache, table, lens, msl = rc.make_case(spec, [70, 5, 3000], next_n=2, seed=6)
    want = indexer_logits_torch(spec, q, w, cache, table, lens, msl, accum=torch.float64)
    op = torch.ops.kgen.indexer_logits
    outs = [op(spec_path, q, w, cache, table, lens, msl) for _ in range(4)]
    native = ops.native_kernel("indexer_logits")
    before = native.counts() if native is not None else None
    outs += [op(spec_path, q, w, cache, table, lens, msl) for _ in range(4)]
    torch.cuda.synchronize()
    for out in outs:
        assert rc.compare(spec.name, "eager", out, want).ok
    if native is not None:  # KGEN_NATIVE=0 or no compiler: the Python fast path ran them
        after = native.counts()
        assert after[0] - before[0] == 4 and after[1] == before[1], (before, after)
    other = cache.clone()  # another layer's cache: a new address, its own tensor map
    for _ in range(3):
        got = op(spec_path, q, w, other, table, lens, msl)
    assert rc.compare(spec.name, "other cache", got, want).ok
    longer = op(spec_path, q, w, cache, table, lens, msl + 64)  # another shape
    torch.cuda.synchronize()
    assert torch.isinf(longer[:, msl:]).all() and rc.compare(spec.name, "longer", longer[:, :msl], want).ok
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = op(spec_path, q, w, cache, table, lens, msl)
    graph.replay()
    torch.cuda.synchronize()
    assert rc.compare(spec.name, "graph", captured, want).ok
