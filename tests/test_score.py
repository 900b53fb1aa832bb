"""The read side's Torch path (kgen.score) against a float64 evaluation from first principles.

The expected logits never touch kgen.layout or kgen.reference's decoder: every shipped indexer
page is parsed here by hand from the page maps of the contract (rows first, then scales) and the
formats' bit definitions (e4m3fn, e2m1, ue8m0, bf16), then scored with numpy in float64 over
explicit loops. The caches themselves are written by the reference writer (the same bytes as the
kernel), through random block tables, for ragged sequence lengths.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from kgen import inputs as I  # noqa: E402
from kgen import reference as R  # noqa: E402
from kgen.diagnostics import KgenError  # noqa: E402
from kgen.score import (  # noqa: E402
    check_logits_arguments,
    dense_logits,
    indexer_logits_batched,
    indexer_logits_torch,
    visible_lengths,
)

SPECS = Path(__file__).resolve().parent.parent / "specs"
P = 64
D = 128

# The shipped indexer-key variants and their page maps, written out as numbers (domain facts):
# (spec file, bytes per row, fp: how a row's values and a token's scales are read)
INDEXER = {
    "dsv4_fp8": "dsv4/indexer_fp8.yaml",  # 128 e4m3 per row; then P fp32 scales at 128P + 4t
    "dsv4_fp4": "dsv4/indexer_fp4.yaml",  # 64 packed e2m1 per row; then 4 ue8m0 at 64P + 4t + g
    "bf16": "indexer_bf16.yaml",  # 256 B bf16 per row, no scales
    "dsv32_fp8": "dsv32_indexer.yaml",  # as dsv4_fp8, power-of-two fp32 scales
}


def e4m3(code: int) -> float:
    s, e, m = code >> 7, (code >> 3) & 15, code & 7
    assert not (e == 15 and m == 7), "NaN code in a written key"
    mag = (m / 8) * 2.0 ** -6 if e == 0 else (1 + m / 8) * 2.0 ** (e - 7)
    return -mag if s else mag


E2M1 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]


def e2m1(nib: int) -> float:
    return -E2M1[nib & 7] if nib & 8 else E2M1[nib & 7]


def key_first_principles(name: str, page: np.ndarray, t: int) -> np.ndarray:
    """Token t's 128 values (float64) from its page's bytes, by the page maps above."""
    if name in ("dsv4_fp8", "dsv32_fp8"):
        codes = page[t * 128:(t + 1) * 128]
        scale = float(np.frombuffer(page[128 * P + 4 * t:128 * P + 4 * t + 4].tobytes(), "<f4")[0])
        return np.array([e4m3(int(c)) for c in codes]) * scale
    if name == "dsv4_fp4":
        packed = page[t * 64:(t + 1) * 64]
        vals = []
        for byte in packed:
            vals += [e2m1(int(byte) & 15), e2m1(int(byte) >> 4)]  # even element in the low nibble
        scales = [2.0 ** (int(page[64 * P + 4 * t + g]) - 127) for g in range(4)]
        return np.array([v * scales[i // 32] for i, v in enumerate(vals)])
    if name == "bf16":
        half = page[t * 256:(t + 1) * 256].view("<u2").astype(np.uint32) << 16
        return half.view("<f4").astype(np.float64)
    raise KeyError(name)


def write_sequences(spec, seq_lens, *, num_pages, seed):
    """A cache (poisoned, then the reference writer's bytes) holding len(seq_lens) sequences in
    random disjoint pages; block_table rows padded past each sequence's last page with garbage
    (never read). Returns cache, block_table int32 [B, max_pages]."""
    g = torch.Generator().manual_seed(seed)
    B = len(seq_lens)
    need = [-(-n // P) for n in seq_lens]
    max_pages = max(need) + 2
    assert sum(need) <= num_pages
    perm = torch.randperm(num_pages, generator=g)
    table = torch.randint(-5, 10 * num_pages, (B, max_pages), generator=g)  # garbage past the last page
    at = 0
    for b, n in enumerate(need):
        table[b, :n] = perm[at:at + n]
        at += n
    total = sum(seq_lens)
    inp = I.make_inputs(spec, total, seed=seed, num_pages=num_pages, skip_fraction=0.0)
    locs = []
    for b, n in enumerate(seq_lens):
        s = torch.arange(n)
        locs.append(table[b, s // P] * P + s % P)
    inp["out_loc"] = torch.cat(locs).to(torch.int64)
    R.norm_rope_store(spec, **inp)
    return inp["cache"], table.to(torch.int32)


def expected_logits(name, cache, table, seq_lens, q, weights, max_seq_len):
    """float64 [B*N, max_seq_len] by the definition, -inf where invisible; and the magnitude of each
    sum (sum_h |w_h| * |q_h . k_s|), the scale of its fp32 rounding errors."""
    B, N, H, _ = q.shape
    qd = q.to(torch.float64).numpy()
    wd = weights.to(torch.float64).numpy()
    pages = cache.numpy()
    out = np.full((B * N, max_seq_len), -np.inf)
    mag = np.zeros((B * N, max_seq_len))
    for b, n in enumerate(seq_lens):
        keys = np.stack([key_first_principles(name, pages[int(table[b, s // P])], s % P) for s in range(n)]) \
            if n else np.zeros((0, D))
        for j in range(N):
            last = n - N + j  # the query token's own position: it sees keys 0..last
            for s in range(0, max(0, last + 1)):
                total = size = 0.0
                for h in range(H):
                    dot = float(np.dot(qd[b, j, h], keys[s]))
                    total += wd[b * N + j, h] * max(0.0, dot)
                    size += abs(wd[b * N + j, h]) * float(np.dot(np.abs(qd[b, j, h]), np.abs(keys[s])))
                out[b * N + j, s] = total
                mag[b * N + j, s] = size
    return torch.from_numpy(out), torch.from_numpy(mag)


SEQ_LENS = [1, P - 1, P, P + 1, 5 * P + 17]


@pytest.mark.parametrize("name", list(INDEXER))
@pytest.mark.parametrize("next_n,q_dtype", [(1, torch.bfloat16), (2, torch.float8_e4m3fn), (3, torch.bfloat16)])
def test_logits_match_first_principles(name, next_n, q_dtype):
    spec = R.load_spec(SPECS / INDEXER[name])
    cache, table = write_sequences(spec, SEQ_LENS, num_pages=16, seed=len(name) + next_n)
    g = torch.Generator().manual_seed(7 * next_n)
    B, H = len(SEQ_LENS), 4
    q = (torch.randn(B, next_n, H, D, generator=g) * 2).to(q_dtype)
    weights = torch.randn(B * next_n, H, generator=g)
    max_seq_len = max(SEQ_LENS) + 9
    lens = torch.tensor(SEQ_LENS, dtype=torch.int32)
    want, mag = expected_logits(name, cache, table, SEQ_LENS, q, weights, max_seq_len)
    invisible = torch.isneginf(want)

    got64 = indexer_logits_torch(spec, q, weights, cache, table, lens, max_seq_len, accum=torch.float64)
    got32 = indexer_logits_torch(spec, q, weights, cache, table, lens, max_seq_len)
    for got in (got64, got32):
        assert got.dtype == torch.float32 and got.shape == (B * next_n, max_seq_len)
        assert torch.equal(torch.isneginf(got), invisible)  # -inf exactly where invisible
        assert torch.isfinite(got[~invisible]).all()
    # float64 accumulation: the one rounding to fp32 at the end (half an ulp)
    fin = ~invisible
    err64 = (got64[fin].double() - want[fin]).abs()
    assert (err64 <= want[fin].abs() * 2.0 ** -24 + 1e-30).all()
    # fp32 accumulation: within 1e-6 of the sum's magnitude (a few fp32 ulps of its largest terms)
    err32 = (got32.double() - want).masked_fill(invisible, 0).abs()
    assert (err32 <= 1e-6 * mag).all(), float((err32 / mag.clamp(min=1e-30)).max())
    # the expected visibility itself: row b*N + j sees keys s <= seq_len - N + j
    counts = (~invisible).sum(dim=1)
    assert torch.equal(counts, visible_lengths(SEQ_LENS, next_n))


@pytest.mark.parametrize("name", list(INDEXER))
def test_decode_pages_is_decode_of_every_slot(name):
    spec = R.load_spec(SPECS / INDEXER[name])
    cache, table = write_sequences(spec, [3 * P + 7, P - 2], num_pages=6, seed=11)
    # sequence 0's pages out of order: its last page holds 7 keys, the rest of it poison
    pages = cache[table[0, [3, 0, 2, 1]].long()]
    want, _ = R.decode(spec, pages, torch.arange(4 * P))
    got = R.decode_pages(spec, pages)
    torch.testing.assert_close(got, want, rtol=0, atol=0, equal_nan=True)
    assert torch.isfinite(got[P:]).all()  # the three full pages


@pytest.mark.parametrize("name", list(INDEXER))
@pytest.mark.parametrize("next_n,q_dtype", [(1, torch.float8_e4m3fn), (2, torch.bfloat16)])
def test_batched_torch_path_within_its_stated_rounding(name, next_n, q_dtype):
    spec = R.load_spec(SPECS / INDEXER[name])
    cache, table = write_sequences(spec, SEQ_LENS, num_pages=16, seed=5 + next_n)
    g = torch.Generator().manual_seed(3 * next_n)
    B, H = len(SEQ_LENS), 4
    q = (torch.randn(B, next_n, H, D, generator=g) * 2).to(q_dtype)
    weights = torch.randn(B * next_n, H, generator=g)
    lens = torch.tensor(SEQ_LENS, dtype=torch.int32)
    max_seq_len = max(SEQ_LENS) + 9
    want, mag = expected_logits(name, cache, table, SEQ_LENS, q, weights, max_seq_len)
    invisible = torch.isneginf(want)
    for key_dtype, bound in ((torch.bfloat16, 2.0**-7), (torch.float32, 1e-6)):
        got = indexer_logits_batched(spec, q, weights, cache, table, lens, max_seq_len, key_dtype=key_dtype)
        assert got.dtype == torch.float32 and got.shape == (B * next_n, max_seq_len)
        assert torch.equal(torch.isneginf(got), invisible)
        # bf16: each key value and each q . k rounded once (2^-9 relative each) -> within 2^-7 of the
        # sum's magnitude; fp32 keys: the plain fp32 accumulation bound of the reference test
        err = (got.double() - want).masked_fill(invisible, 0).abs()
        assert (err <= bound * mag).all(), (key_dtype, float((err / mag.clamp(min=1e-30)).max()))
    assert (err > 0).any() or name == "bf16"  # it is an fp32 computation, not the float64 one


def test_visibility_rule_small_cases():
    # next_n = 1: s < seq_len; next_n = 3 with seq_len 2: the first query token (position -1) sees nothing
    assert visible_lengths([5, 0], 1).tolist() == [5, 0]
    assert visible_lengths([2, 10], 3).tolist() == [0, 1, 2, 8, 9, 10]


def test_zero_length_rows_are_all_neg_inf():
    spec = R.load_spec(SPECS / INDEXER["bf16"])
    cache, table = write_sequences(spec, [0, 3], num_pages=4, seed=1)
    q = torch.randn(2, 1, 2, D).to(torch.bfloat16)
    out = indexer_logits_torch(spec, q, torch.ones(2, 2), cache, table, torch.tensor([0, 3], dtype=torch.int32), 8)
    assert torch.isneginf(out[0]).all() and torch.isfinite(out[1, :3]).all() and torch.isneginf(out[1, 3:]).all()


def test_chunking_does_not_change_the_bits():
    spec = R.load_spec(SPECS / INDEXER["dsv4_fp8"])
    lens = [3 * P + 5, 2 * P]
    cache, table = write_sequences(spec, lens, num_pages=8, seed=3)
    q = torch.randn(2, 2, 3, D).to(torch.bfloat16)
    w = torch.randn(4, 3)
    args = (spec, q, w, cache, table, torch.tensor(lens, dtype=torch.int32), 300)
    whole = indexer_logits_torch(*args, accum=torch.float64)
    paged = indexer_logits_torch(*args, accum=torch.float64, chunk_keys=P)
    assert torch.equal(whole, paged)


def test_dense_logits_definition():
    g = torch.Generator().manual_seed(0)
    q, w, k = torch.randn(3, 5, 16, generator=g), torch.randn(3, 5, generator=g), torch.randn(40, 16, generator=g)
    want = (torch.einsum("mhd,sd->mhs", q.double(), k.double()).clamp(min=0) * w.double()[..., None]).sum(1)
    got = dense_logits(q, w, k, accum=torch.float64, chunk_keys=7)
    assert torch.allclose(got, want, rtol=1e-12, atol=1e-12)
    assert torch.equal(got, dense_logits(q, w, k, accum=torch.float64, chunk_keys=7))


# ---------------------------------------------------------------------------------------------
# bad input: one located message naming the argument, before any work


def _good():
    spec = R.load_spec(SPECS / INDEXER["bf16"])
    lens = [P + 1, 5]
    cache, table = write_sequences(spec, lens, num_pages=6, seed=2)
    return dict(variant=spec, q=torch.zeros(2, 2, 4, D, dtype=torch.bfloat16), weights=torch.ones(4, 4),
                cache=cache, block_table=table, seq_lens=torch.tensor(lens, dtype=torch.int32), max_seq_len=P + 8)


def _set(**changes):
    def apply(a):
        a = dict(a)
        for k, fn in changes.items():
            a[k] = fn(a)
        return a
    return apply


BAD = [
    ("q float32", _set(q=lambda a: a["q"].float()),
     "q: expected bfloat16 or float8_e4m3fn [B, next_n, H, 128], got float32"),
    ("q 3-D", _set(q=lambda a: a["q"][0]), "q: expected bfloat16 [B, next_n, H, 128], got bfloat16 [2, 4, 128]"),
    ("q head_dim", _set(q=lambda a: a["q"][..., :64].contiguous()),
     "q: expected bfloat16 [B, next_n, H, 128] (head_dim 128)"),
    ("q strided", _set(q=lambda a: a["q"].transpose(0, 1)), "q: expected a contiguous tensor"),
    ("q None", _set(q=lambda a: None), "q: expected a tensor"),
    ("weights shape", _set(weights=lambda a: torch.ones(2, 4)),
     "weights: expected float32 [B * next_n, H] = [4, 4], got float32 [2, 4]"),
    ("weights dtype", _set(weights=lambda a: a["weights"].double()), "weights: expected float32"),
    ("cache page bytes", _set(cache=lambda a: torch.zeros(6, 8448, dtype=torch.uint8)),
     "cache: expected uint8 [num_pages, 16384] (64 tokens x 256 B = 16384 B), got uint8 [6, 8448]"),
    ("cache dtype", _set(cache=lambda a: a["cache"].view(torch.int8)), "cache: expected uint8"),
    ("cache 1-D", _set(cache=lambda a: a["cache"].reshape(-1)), "cache: expected uint8 [num_pages, 16384]"),
    ("table dtype", _set(block_table=lambda a: a["block_table"].long()), "block_table: expected int32"),
    ("table rows", _set(block_table=lambda a: a["block_table"][:1]),
     "block_table: expected int32 [B, max_pages] with B = 2"),
    ("seq_lens dtype", _set(seq_lens=lambda a: a["seq_lens"].long()), "seq_lens: expected int32 [B] with B = 2"),
    ("max_seq_len float", _set(max_seq_len=lambda a: 70.0), "max_seq_len: expected an int"),
    ("max_seq_len negative", _set(max_seq_len=lambda a: -1), "max_seq_len: expected an int"),
    ("max_seq_len bool", _set(max_seq_len=lambda a: True), "max_seq_len: expected an int"),
    ("device mix", _set(cache=lambda a: torch.empty(6, 16384, dtype=torch.uint8, device="meta")),
     "cache: on meta, but q is on cpu"),
    ("seq_len over capacity", _set(seq_lens=lambda a: torch.tensor([P + 1, 5 * P], dtype=torch.int32)),
     "seq_lens: seq_lens[1] = 320 is outside [0, 256] (block_table has 4 pages of 64 tokens)"),
    ("seq_len negative", _set(seq_lens=lambda a: torch.tensor([-1, 5], dtype=torch.int32)),
     "seq_lens: seq_lens[0] = -1"),
    ("seq_len over max_seq_len", _set(max_seq_len=lambda a: P), "seq_lens: seq_lens[0] = 65 exceeds max_seq_len = 64"),
    ("table entry outside", _set(block_table=lambda a: _poke(a["block_table"], 0, 1, 6)),
     "block_table: block_table[0, 1] = 6 is outside the cache's 6 pages"),
    ("table entry negative", _set(block_table=lambda a: _poke(a["block_table"], 1, 0, -1)),
     "block_table: block_table[1, 0] = -1 is outside the cache's 6 pages"),
]


def _poke(t, i, j, v):
    t = t.clone()
    t[i, j] = v
    return t


@pytest.mark.parametrize("case,mutate,message", BAD, ids=[b[0] for b in BAD])
def test_bad_input_names_the_argument(case, mutate, message):
    a = mutate(_good())
    with pytest.raises(KgenError) as e:
        indexer_logits_torch(a["variant"], a["q"], a["weights"], a["cache"], a["block_table"], a["seq_lens"],
                             a["max_seq_len"])
    text = str(e.value)
    assert message in text, text
    assert "\n" not in text and e.value.exit_code == 1


def test_unread_table_entries_may_be_anything():
    a = _good()
    t = a["block_table"].clone()
    t[1, 1:] = 10**6  # sequence 1 has 5 keys: only its first page is read
    t[0, 2:] = -7
    indexer_logits_torch(a["variant"], a["q"], a["weights"], a["cache"], t, a["seq_lens"], a["max_seq_len"])


def test_cuda_required_for_the_kernel_path():
    a = _good()
    with pytest.raises(KgenError, match="q: expected a CUDA tensor, got one on cpu"):
        check_logits_arguments(a["variant"], a["q"], a["weights"], a["cache"], a["block_table"], a["seq_lens"],
                               a["max_seq_len"], require_cuda=True)


def test_variant_by_path_and_family_member():
    a = _good()
    args = (a["q"], a["weights"], a["cache"], a["block_table"], a["seq_lens"], a["max_seq_len"])
    by_spec = indexer_logits_torch(a["variant"], *args)
    assert torch.equal(by_spec, indexer_logits_torch(str(SPECS / "indexer_bf16.yaml"), *args))
    assert torch.equal(by_spec, indexer_logits_torch(f"{SPECS / 'dsv4.yaml'}::dsv4_indexer_bf16", *args))
