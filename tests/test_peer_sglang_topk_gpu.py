"""SGLang's DeepSeek-V4 top-k (kgen.peer_sglang_topk) on the GPU: the same sets as torch.topk over each row's
first seq_len scores, short rows 0..L-1 then -1, on every path its dispatch takes (one row and a few: the
small-batch cluster kernels; 40 and 64 rows: the plan and the persistent cluster pool; short rows: one block),
and the same answer when captured in a CUDA graph. Marked `gpu`; skipped without a GPU or the kit."""

from __future__ import annotations

import pytest

from kgen import peer_sglang_topk as P
from kgen import runtime

REASON = runtime.gpu_problem()
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(REASON is not None, reason=f"needs a CUDA GPU: {REASON}")]


@pytest.fixture(scope="module")
def peer():
    try:
        return P.Peer.load()
    except P.PeerAbsent as e:
        pytest.skip(f"the SGLang top-k peer is absent: {e}")


def _case(torch, rows: int, width: int, k: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, width, generator=g).cuda()
    lens = torch.randint(1, width + 1, (rows,), generator=g)
    lens[0] = width
    if rows > 2:
        lens[1] = min(k, width)  # exactly k
        lens[2] = max(1, k // 3)  # shorter than k
    return x, lens.to(torch.int32).cuda()


def _check(torch, x, lens, out, k: int) -> None:
    out, lens = out.cpu(), lens.cpu()
    for r in range(x.shape[0]):
        n = int(lens[r])
        got = torch.sort(out[r].to(torch.int64)).values
        if n > k:
            top = torch.topk(x[r, :n], k)
            want = torch.sort(top.indices.cpu()).values
            if not torch.equal(got, want):  # only keys equal to the k-th value may differ (a tie)
                extra = sorted(set(got.tolist()) - set(want.tolist()))
                assert len(set(got.tolist())) == k and all(0 <= i < n for i in extra), f"row {r} (length {n})"
                assert bool((x[r, extra] == top.values[-1]).all()), f"row {r} (length {n})"
        else:
            want = torch.cat([torch.full((k - n,), -1, dtype=torch.int64), torch.arange(n)])
            assert torch.equal(got, want), f"row {r} (length {n})"


@pytest.mark.parametrize("rows,width,k", [(1, 4096, 512), (1, 65536, 2048), (3, 70001, 512), (8, 262144, 2048),
                                          (40, 100000, 512), (64, 65536, 2048)])
def test_same_sets_as_torch_topk(peer, rows, width, k):
    import torch

    x, lens = _case(torch, rows, width, k, seed=rows * 7 + k)
    out = peer.topk(P.padded_scores(torch, x), lens, k)
    torch.cuda.synchronize()
    _check(torch, x, lens, out, k)


def test_in_a_cuda_graph(peer):
    import torch

    x, lens = _case(torch, 40, 80000, 512, seed=3)
    scores = torch.empty_like(x)
    plan, select, out, meta = peer.prepare(scores, lens, 512)

    def step():  # SGLang's order: the plan, the scorer (a copy here), the top-k
        plan()
        scores.copy_(x)
        select()

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        step()
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=side):
        step()
    out.fill_(-2)
    scores.zero_()
    g.replay()
    torch.cuda.synchronize()
    _check(torch, x, lens, out, 512)


def test_bad_arguments_raise(peer):
    import torch

    x = torch.zeros(2, 4096, device="cuda")
    with pytest.raises(ValueError, match="multiple of 4"):
        peer.prepare(x[:, :4095].contiguous(), torch.full((2,), 8, dtype=torch.int32, device="cuda"), 16)
    with pytest.raises(ValueError, match=r"k must be in \(0, 2048\]"):
        peer.prepare(x, torch.full((2,), 8, dtype=torch.int32, device="cuda"), 4096)
