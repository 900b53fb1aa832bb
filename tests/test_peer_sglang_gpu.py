"""SGLang's store kernels (kgen.peer_sglang) beside kgen's writers on the GPU: the same slots written, and
the bytes equal up to the documented numerics differences (kgen's exact mode against SGLang's rsqrtf and
contracted multiplies: an fp8 code one step away, an fp32 scale a few ulps away, an fp4 token whose
ue8m0 scale falls on the other side of a power of two). Marked `gpu`; skipped without a GPU or the kit."""

from __future__ import annotations

from pathlib import Path

import pytest

from kgen import peer_sglang, runtime

ROOT = Path(__file__).resolve().parents[1]
REASON = runtime.gpu_problem()
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(REASON is not None, reason=f"needs a CUDA GPU: {REASON}")]

N_TOKENS = 4096


@pytest.fixture(scope="module")
def peer():
    try:
        return peer_sglang.Peer.load()
    except peer_sglang.PeerAbsent as e:
        pytest.skip(f"the SGLang peer is absent: {e}")


def _spec(name: str):
    from kgen.validate import validate_paths

    return {s.name: s for s in validate_paths([ROOT / "specs" / "dsv4.yaml"]).specs()}[name]


def _both(peer, name: str, n: int = N_TOKENS):
    import torch

    from kgen import bench, ops

    spec = _spec(name)
    kind, _ = peer_sglang.kernel_for(spec)
    x, w, b, f, p, loc, cache = bench.bench_inputs(spec, n, seed=3)
    mine, theirs = torch.zeros_like(cache), torch.zeros_like(cache)
    ops.norm_rope_store(spec, x, w, b, f, p, loc, mine)
    peer.store(kind, x, peer_sglang.peer_plan(torch, p, 1), w, spec.norm.eps, f, loc, theirs, 1)
    torch.cuda.synchronize()
    return spec, mine.cpu(), theirs.cpu(), loc.cpu()


def _rows(cache, loc, row_bytes: int, scale_bytes: int, page: int = peer_sglang.PAGE_SIZE):
    """(value rows [N, row_bytes], scale bytes [N, scale_bytes]) of the slots `loc`, as SGLang's page lays them
    out: page x row_bytes of values, then page x scale_bytes of scales."""
    pg, off = loc // page, loc % page
    vals = cache[pg][:, :page * row_bytes].reshape(-1, page, row_bytes)[range(len(loc)), off]
    scl = cache[pg][:, page * row_bytes:page * (row_bytes + scale_bytes)].reshape(-1, page, scale_bytes)
    return vals, scl[range(len(loc)), off]


def test_fp8_bytes_match_up_to_rounding(peer):
    import torch

    _, mine, theirs, loc = _both(peer, "dsv4_indexer_fp8")
    written = (mine != 0).any(1) | (theirs != 0).any(1)
    assert torch.equal((mine != 0).any(1), (theirs != 0).any(1)), "the two kernels wrote different pages"
    vm, sm = _rows(mine, loc, 128, 4)
    vt, st = _rows(theirs, loc, 128, 4)
    a, t = sm.contiguous().view(torch.float32)[:, 0], st.contiguous().view(torch.float32)[:, 0]
    assert bool((a > 0).all()) and float(((a - t).abs() / a).max()) < 1e-5  # a few ulps
    same_sign = ((vm ^ vt) & 0x80) == 0
    dist = ((vm & 0x7F).to(torch.int16) - (vt & 0x7F).to(torch.int16)).abs()
    assert bool(same_sign[dist > 0].all()) and int(dist.max()) <= 1  # one code away at most
    assert int((dist > 0).sum()) <= vm.numel() // 1000
    assert int(written.sum()) == -(-N_TOKENS // peer_sglang.PAGE_SIZE)


def test_fp4_bytes_match_up_to_rounding(peer):
    import torch

    _, mine, theirs, loc = _both(peer, "dsv4_indexer_fp4")
    vm, sm = _rows(mine, loc, 64, 4)
    vt, st = _rows(theirs, loc, 64, 4)
    scale_dist = (sm.to(torch.int16) - st.to(torch.int16)).abs()
    assert int(scale_dist.max()) <= 1 and int((scale_dist > 0).any(1).sum()) <= N_TOKENS // 100
    same = (scale_dist == 0).all(1)  # tokens whose four block scales agree: codes within one step
    nib_m = torch.stack((vm & 0xF, vm >> 4), -1)[same].to(torch.int16)
    nib_t = torch.stack((vt & 0xF, vt >> 4), -1)[same].to(torch.int16)
    dist = ((nib_m & 7) - (nib_t & 7)).abs()
    assert int(dist.max()) <= 1
    assert int((dist > 0).sum()) <= nib_m.numel() // 100
