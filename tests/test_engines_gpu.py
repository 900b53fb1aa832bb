"""The patched SGLang tree's kgen paths on the GPU: the store routed through kgen's op writes the
reference's bytes, and the scorer routed through kgen's reader ranks the same top-k as the Torch
path. Marked `gpu`; skipped cleanly without a CUDA GPU (and while a torch op they call is not built).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kgen import runtime

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests" / "fixtures" / "engines" / "sglang_v2"
BF16 = ROOT / "specs" / "indexer_bf16.yaml"
REASON = runtime.gpu_problem()

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(REASON is not None, reason=f"needs a CUDA GPU: {REASON}")]


@pytest.fixture(scope="module")
def kgen_indexer(tmp_path_factory):
    """`sglang.kgen_indexer` as `kgen patch --apply` writes it into a copy of the fixture tree."""
    root = tmp_path_factory.mktemp("engine") / "sglang"
    shutil.copytree(FIXTURE, root)
    r = subprocess.run([sys.executable, "-m", "kgen", "patch", "--engine", "sglang", "--root", str(root),
                        str(BF16), "--apply"], cwd=ROOT, capture_output=True, text=True, check=False, timeout=120)
    assert r.returncode == 0, r.stderr
    sys.path.insert(0, str(root / "python"))
    try:
        for name in [m for m in sys.modules if m == "sglang" or m.startswith("sglang.")]:
            del sys.modules[name]
        import sglang.kgen_indexer as module

        yield module
    finally:
        sys.path.remove(str(root / "python"))


def _op(name: str):
    import torch

    import kgen.ops  # noqa: F401

    ns = getattr(torch.ops, "kgen", None)
    if ns is None or not hasattr(ns, name):
        pytest.skip(f"torch.ops.kgen.{name} is not registered yet")
    return getattr(ns, name)


def _bf16_case(op: str):
    """(spec, layout) of the bf16 variant the tree is patched with, once kgen's `op` is registered."""
    from kgen import reference
    from kgen.layout import compute

    _op(op)
    spec = reference.load_spec(BF16)
    return spec, compute(spec)


def test_patched_store_writes_the_reference_bytes(kgen_indexer):
    import torch

    from kgen import reference

    spec, lay = _bf16_case("norm_rope_store")
    g = torch.Generator().manual_seed(0)
    n, pages, max_pos = 300, 16, 4096
    x = torch.randn(n, spec.head_dim, generator=g) * 3
    weight = torch.rand(spec.head_dim, generator=g) + 0.5
    angles = torch.rand(max_pos, spec.rope.dim // 2, generator=g) * 6.283
    freqs_cis = torch.polar(torch.ones_like(angles), angles)  # SGLang passes complex freqs
    positions = torch.randint(0, max_pos, (n,), generator=g)
    out_loc = torch.randperm(lay.slots(pages), generator=g)[:n]
    expected = torch.zeros(pages, lay.page_bytes, dtype=torch.uint8)
    reference.norm_rope_store(spec, x, weight, None, torch.view_as_real(freqs_cis).flatten(-2), positions, out_loc,
                              expected)
    cache = torch.zeros(pages, lay.page_bytes, dtype=torch.uint8, device="cuda")
    # the engine's call: (kv, plan-or-positions, norm weight, the model's eps, freqs, out_loc, cache)
    kgen_indexer.store(x.cuda(), positions.cuda(), weight.cuda(), spec.norm.eps, freqs_cis.cuda(), out_loc.cuda(),
                       cache)
    torch.cuda.synchronize()
    assert torch.equal(cache.cpu(), expected)


def test_patched_scorer_ranks_the_torch_topk(kgen_indexer):
    import torch

    from kgen import reference
    from kgen.score import indexer_logits_torch

    spec, lay = _bf16_case("indexer_logits")
    g = torch.Generator().manual_seed(1)
    batch, heads, pages_per_seq = 4, 64, 8
    seq_lens = torch.tensor([512, 300, 64, 1], dtype=torch.int32)
    pages = batch * pages_per_seq
    cache = torch.zeros(pages, lay.page_bytes, dtype=torch.uint8)
    n = int(seq_lens.sum())
    x = torch.randn(pages * lay.page_size, spec.head_dim, generator=g)
    block_table = torch.arange(pages, dtype=torch.int32).view(batch, pages_per_seq)
    slots = torch.arange(pages * lay.page_size)
    angles = torch.rand(4096, spec.rope.dim // 2, generator=g)
    freqs = torch.view_as_real(torch.polar(torch.ones_like(angles), angles)).flatten(-2)
    reference.norm_rope_store(spec, x, torch.ones(spec.head_dim), None, freqs, slots % 4096, slots, cache)
    q = torch.randn(batch, 1, heads, spec.head_dim, generator=g).to(torch.bfloat16)
    w = torch.rand(batch, heads, generator=g)
    max_len = int(seq_lens.max())
    torch_path = indexer_logits_torch(spec, q, w, cache, block_table, seq_lens, max_len)  # the Torch path (CPU)
    kv_view = cache.cuda().view(pages, lay.page_size, 1, lay.bytes_per_token)  # the engine's reader view
    ours = kgen_indexer.logits(q.cuda(), kv_view, w.cuda(), seq_lens.cuda(), block_table.cuda(), None, max_len,
                               False).cpu()
    assert n > 0 and ours.shape == torch_path.shape
    k = 32
    for b in range(batch):
        length = int(seq_lens[b])
        kk = min(k, length)
        ref_top = torch_path[b, :length].topk(kk)
        got_top = ours[b, :length].topk(kk)
        if kk < length:  # a near-tie at the k-th place may order either way
            gap = ref_top.values[-1] - torch_path[b, :length].topk(kk + 1).values[-1]
            if gap.abs() < 1e-3 * ref_top.values.abs().max():
                continue
        assert set(ref_top.indices.tolist()) == set(got_top.indices.tolist()), b
