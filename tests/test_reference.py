"""The Torch reference checked against facts that do not come from it: format encodings derived
from first principles, exact arithmetic (float64, fractions, complex128, explicit Sylvester
matrices), a scalar numpy emulation of docs/numerics.md, and the page maps of
docs/layouts.md §3 written out as numbers (not taken from kgen.layout)."""

from __future__ import annotations

import math
import struct
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from kgen import inputs as I  # noqa: E402
from kgen import layout as L  # noqa: E402
from kgen import reference as R  # noqa: E402
from kgen.spec import Spec  # noqa: E402

SPECS = Path(__file__).resolve().parent.parent / "specs"
SHIPPED = {
    "indexer_fp8": "dsv4/indexer_fp8.yaml",
    "indexer_fp4": "dsv4/indexer_fp4.yaml",
    "indexer_bf16": "indexer_bf16.yaml",
    "dsv32_indexer": "dsv32_indexer.yaml",
    "latent_p64": "dsv4/latent_fp8_p64.yaml",
    "latent_p2": "dsv4/latent_fp8_p2.yaml",
    "latent_bf16": "dsv4/latent_bf16.yaml",
    "latent_uniform": "dsv4/latent_fp8_uniform.yaml",
}


def spec_of(key: str) -> Spec:
    return R.load_spec(SPECS / SHIPPED[key])


def variant(spec: Spec, **sections) -> Spec:
    """A copy of spec with sections (norm/rope/store/...) updated field by field."""
    upd = {}
    for name, fields in sections.items():
        cur = getattr(spec, name)
        upd[name] = cur.model_copy(update=fields) if hasattr(cur, "model_copy") else fields
    return spec.model_copy(update=upd)


def f32(x) -> np.float32:
    return np.float32(x)


def t32(values) -> torch.Tensor:
    return torch.tensor(np.asarray(values, dtype=np.float32))


# ---------------------------------------------------------------------------------------------
# formats from first principles

def e4m3_decode_table() -> dict[int, float]:
    """Every finite e4m3fn code -> its value: sign, 4-bit exponent (bias 7), 3-bit mantissa,
    subnormal at exponent 0, S.1111.111 = NaN (no infinities)."""
    out = {}
    for code in range(256):
        s, e, m = code >> 7, (code >> 3) & 15, code & 7
        if e == 15 and m == 7:
            continue
        mag = (m / 8) * 2.0 ** -6 if e == 0 else (1 + m / 8) * 2.0 ** (e - 7)
        out[code] = -mag if s else mag
    return out


E4M3 = e4m3_decode_table()


def e4m3_encode_bruteforce(v: float) -> int:
    """Nearest finite e4m3 value after clamping to +-448, ties to the even code; sign kept."""
    v = max(-448.0, min(448.0, v))
    best = None
    for code, val in E4M3.items():
        if (code >> 7) != (1 if math.copysign(1.0, v) < 0 else 0):
            continue
        d = abs(val - v)
        if best is None or d < best[0] or (d == best[0] and code % 2 == 0 and best[1] % 2 == 1):
            best = (d, code)
    return best[1]


def e2m1_encode_bruteforce(v: float) -> int:
    """Nearest e2m1 magnitude, ties to the SMALLER magnitude; sign bit only if nonzero."""
    mags = R.E2M1_VALUES
    d = [abs(abs(v) - m) for m in mags]
    code = min(range(8), key=lambda i: (d[i], i))
    return code | (8 if v < 0 and code else 0)


def test_e4m3_known_codes():
    cases = {448.0: 0x7E, -448.0: 0xFE, 1.0: 0x38, 0.5: 0x30, 2.0 ** -9: 0x01, 1000.0: 0x7E,
             -1000.0: 0xFE, 1.0625: 0x38, 1.1875: 0x3A, 0.0: 0x00, 2.0 ** -6: 0x08,
             2.0 ** -10: 0x00,  # half the smallest subnormal: tie to the even code 0
             3 * 2.0 ** -10: 0x02,  # tie between 0x01 and 0x02 -> even
             464.0: 0x7E,  # between 448 and the NaN code: saturates
             240.0: 0x77, 1.125: 0x39}
    got = R.e4m3_sat_rne(t32(list(cases))).tolist()
    assert [hex(c) for c in got] == [hex(c) for c in cases.values()]


def test_e4m3_matches_first_principles():
    rng = np.random.default_rng(0)
    vals = np.concatenate([
        rng.standard_normal(400) * 2.0 ** rng.integers(-12, 10, 400),
        [v for v in E4M3.values()],  # exact codes
        [(a + b) / 2 for a, b in zip(sorted(E4M3.values()), sorted(E4M3.values())[1:])],  # ties
    ]).astype(np.float32)
    got = R.e4m3_sat_rne(torch.from_numpy(vals)).tolist()
    want = [e4m3_encode_bruteforce(float(v)) for v in vals]
    bad = [(float(v), hex(g), hex(w)) for v, g, w in zip(vals, got, want) if g != w and not (v == 0)]
    assert not bad, bad[:10]


def test_e2m1_thresholds_ties_down_and_no_negative_zero():
    # (value, code) pairs, not a dict: -0.0 == 0.0, so a dict would silently keep one of the two
    cases = [(0.0, 0), (0.25, 0), (0.2500001, 1), (0.5, 1), (0.75, 1), (0.7500001, 2), (1.25, 2), (1.5, 3),
             (1.75, 3), (2.5, 4), (3.0, 5), (3.5, 5), (4.0, 6), (5.0, 6), (5.0001, 7), (6.0, 7), (100.0, 7),
             (-0.75, 8 | 1), (-6.0, 8 | 7), (-5.0, 8 | 6), (-0.1, 0), (-0.25, 0), (-1e-30, 0), (-0.0, 0)]
    values = [v for v, _ in cases]
    assert len({(v, math.copysign(1.0, v)) for v in values}) == len(values)  # every case distinct
    got = R.e2m1_codes(t32(values)).tolist()
    assert got == [code for _, code in cases]
    # ties go down: RNE would send 0.75 to 1.0 (even mantissa) and 5.0 to 6.0 (code 7)
    assert R.E2M1_VALUES[got[values.index(0.75)]] == 0.5
    assert R.E2M1_VALUES[got[values.index(5.0)]] == 4.0
    rng = np.random.default_rng(1)
    vals = np.concatenate([rng.uniform(-7, 7, 500), np.array(R.E2M1_THRESHOLDS), -np.array(R.E2M1_THRESHOLDS),
                           np.array(R.E2M1_VALUES), -np.array(R.E2M1_VALUES)]).astype(np.float32)
    got = R.e2m1_codes(torch.from_numpy(vals)).tolist()
    assert got == [e2m1_encode_bruteforce(float(v)) for v in vals]


def test_e2m1_nibble_order():
    nib = torch.tensor([1, 2, 0xF, 0x0, 7, 8 | 3], dtype=torch.uint8)
    assert R.pack_nibbles(nib).tolist() == [0x21, 0x0F, 0xB7]


def test_ue8m0_bytes():
    spec = spec_of("latent_p64")  # ue8m0, 7 blocks of 64, bf16 round trip
    y = torch.zeros(1, 512)
    amax = [448.0, 56.0, 1.0, 448.0 * 2 ** -20, 448.0 * 4, 0.0, 449.0]
    for g, a in enumerate(amax):
        y[0, g * 64 + 5] = -a
    qz = R.quantize(spec, y)
    # 448 -> t = 1 -> 2^0 -> 127; 56 -> 2^-3 -> 124; 1 -> 2^-8.8.. -> ceil -8 -> 119;
    # 448*2^-20 -> 107; 1792 -> 2^2 -> 129; 0 -> floor 1e-4 -> t = 2.2e-7 -> 2^-22 -> 105;
    # 449 -> t just above 1 -> 2^1 -> 128 (quantize alone does not round trip through bf16)
    assert qz.scale_bytes[0].tolist() == [127, 124, 119, 107, 129, 105, 128]
    assert qz.scales[0, :2].tolist() == [1.0, 0.125]


# ---------------------------------------------------------------------------------------------
# ceil_log2, scale_math

def exact_ceil_log2(x: float) -> int:
    f = Fraction(x)
    e = f.numerator.bit_length() - f.denominator.bit_length()
    while Fraction(2) ** e < f:
        e += 1
    while Fraction(2) ** (e - 1) >= f:
        e -= 1
    return e


def test_ceil_log2_powers_and_neighbours():
    xs = []
    for k in range(-149, 128):
        p = np.float32(2.0 ** k)
        xs += [p, np.nextafter(p, np.float32(np.inf)), np.nextafter(p, np.float32(0))]
    rng = np.random.default_rng(2)
    xs += list((rng.uniform(1, 2, 300) * 2.0 ** rng.integers(-140, 120, 300)).astype(np.float32))
    xs = np.array([x for x in xs if x > 0 and np.isfinite(x)], dtype=np.float32)
    got = R.ceil_log2(torch.from_numpy(xs)).tolist()
    want = [exact_ceil_log2(float(x)) for x in xs]
    assert got == want
    # and the bit recipe of the contract (exponent field + [mantissa != 0]) on normals
    bits = xs.view(np.int32)
    normal = ((bits >> 23) & 0xFF) > 0
    recipe = ((bits >> 23) & 0xFF) - 127 + ((bits & 0x7FFFFF) != 0)
    assert (np.array(got)[normal] == recipe[normal]).all()


def test_sqrt_rn_is_correctly_rounded():
    rng = np.random.default_rng(3)
    x = np.concatenate([rng.uniform(0, 100, 200000), rng.uniform(0, 1, 1000) * 2.0 ** rng.integers(-149, 127, 1000),
                        [0.0, 1.0, 2.0, 4.0, 15.453603744506836, 2.0 ** -149, 2.0 ** -126, 3.4e38]]).astype(np.float32)
    got = R.sqrt_rn(torch.from_numpy(x)).numpy()
    assert np.array_equal(got, np.sqrt(x))  # numpy's float32 sqrt is the hardware's sqrtss
    for xi, si in list(zip(x, got))[-200:]:  # and the midpoint criterion, in exact rationals
        s = Fraction(float(si))
        up = Fraction(float(np.nextafter(si, np.float32(np.inf))))
        dn = Fraction(float(np.nextafter(si, np.float32(0))))
        assert ((s + dn) / 2) ** 2 <= Fraction(float(xi)) <= ((s + up) / 2) ** 2
    # 15.4536037... is one of the many inputs where this torch build's CPU sqrt is one ulp off
    assert R.sqrt_rn(torch.tensor([15.453603744506836])).item() == float(np.sqrt(np.float32(15.453603744506836)))


def test_pow2_exact():
    e = torch.arange(-126, 128, dtype=torch.int32)
    assert R.pow2(e).tolist() == [2.0 ** k for k in range(-126, 128)]


@pytest.mark.parametrize("dtype,qmax", [("fp8_e4m3", 448.0), ("fp4_e2m1", 6.0)])
def test_scale_math_power_of_two_scales_agree_at_qmax_times_pow2(dtype, qmax):
    """Engine notes claim divide and reciprocal differ by one power of two when amax = QMAX * 2^k.
    In fp32 they do not: fp32(1/QMAX) * QMAX*2^k rounds to exactly 2^k (for 448 and 6), and both
    maps are monotone, so ceil_log2 agrees for EVERY amax. Shown densely around each boundary."""
    base = spec_of("indexer_fp4" if dtype == "fp4_e2m1" else "dsv32_indexer")
    amax = []
    for k in range(-20, 21):
        a = np.float32(qmax * 2.0 ** k)
        up = dn = a
        amax.append(a)
        for _ in range(64):
            up, dn = np.nextafter(up, np.float32(np.inf)), np.nextafter(dn, np.float32(0))
            amax += [up, dn]
    amax = torch.from_numpy(np.array(amax, dtype=np.float32))
    scale_kind = "ue8m0" if dtype == "fp4_e2m1" else "fp32_pow2"
    _, _, e_div = R.block_scales(variant(base, store={"scale": scale_kind, "scale_math": "divide"}), amax)
    _, _, e_rec = R.block_scales(variant(base, store={"scale": scale_kind, "scale_math": "reciprocal"}), amax)
    assert torch.equal(e_div, e_rec)
    exact = amax.numpy()[:: 129][:41]  # the QMAX * 2^k points themselves
    assert R.ceil_log2(torch.from_numpy(exact) * np.float32(1.0 / qmax)).tolist() == list(range(-20, 21))


def test_scale_math_fp32_scale_divide_vs_reciprocal_differ():
    """With scale kind fp32 the choice changes the stored scale bytes (and may change codes)."""
    base = spec_of("indexer_fp8")
    div = variant(base, store={"scale_math": "divide"})
    rec = variant(base, store={"scale_math": "reciprocal"})
    inv = np.float32(1.0 / 448.0)
    a = next(np.float32(v) for v in np.linspace(1, 3, 1000, dtype=np.float32)
             if np.float32(v) / np.float32(448) != np.float32(v) * inv)
    y = torch.zeros(1, 128)
    y[0, 7] = float(a)
    qd, qr = R.quantize(div, y), R.quantize(rec, y)
    assert qd.scale_bytes[0].tolist() == list(struct.pack("<f", np.float32(a) / np.float32(448)))
    assert qr.scale_bytes[0].tolist() == list(struct.pack("<f", np.float32(a) * inv))
    assert qd.scale_bytes[0].tolist() != qr.scale_bytes[0].tolist()
    # and at amax = 448 * 2^k both are exact
    y[0, 7] = 448.0 * 8
    assert R.quantize(div, y).scale_bytes.tolist() == R.quantize(rec, y).scale_bytes.tolist()


# ---------------------------------------------------------------------------------------------
# sums, norm, RoPE, Hadamard

def emulate_warp_sum(vals: np.ndarray) -> np.float32:
    """32 lanes of numpy float32 scalars: each sums its V values left to right, then shfl_xor."""
    V = len(vals) // 32
    lane = []
    for ln in range(32):
        s = vals[ln * V]
        for j in range(1, V):
            s = np.float32(s + vals[ln * V + j])
        lane.append(s)
    for off in (16, 8, 4, 2, 1):
        lane = [np.float32(lane[ln] + lane[ln ^ off]) for ln in range(32)]
    assert len(set(float(x) for x in lane)) == 1
    return lane[0]


@pytest.mark.parametrize("n", [32, 128, 512])
def test_warp_sum_order_and_accuracy(n):
    rng = np.random.default_rng(n)
    x = (rng.standard_normal((40, n)) * 10.0 ** rng.uniform(-3, 3, (40, n))).astype(np.float32)
    got = R.warp_sum(torch.from_numpy(x)).numpy()
    for i in range(len(x)):
        assert got[i] == emulate_warp_sum(x[i])
        exact = math.fsum(float(v) for v in x[i])
        k = n // 32 - 1 + 5  # additions on the longest path
        bound = 1.01 * k * 2.0 ** -24 * math.fsum(abs(float(v)) for v in x[i])
        assert abs(float(got[i]) - exact) <= bound
    # the order is observable: a plain sequential/pairwise sum differs somewhere
    plain = torch.from_numpy(x).sum(dim=1).numpy()
    seq = np.array([np.float32(sum(np.float32(v) for v in row)) for row in x[:5]])
    assert (plain != got).any() or (seq != got[:5]).any()


def _norm_spec(kind: str) -> Spec:
    return variant(spec_of("indexer_bf16"), norm={"kind": kind, "eps": 1e-6})


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_rmsnorm_layernorm_vs_float64(dtype):
    spec = spec_of("indexer_bf16").model_copy(update={"input_dtype": dtype})
    inp = I.make_inputs(spec, 64, seed=3)
    x, w, b = (inp[k].double() for k in ("x", "weight", "bias"))
    eps = float(np.float32(1e-6))
    y = R.norm(_norm_spec("rmsnorm"), inp["x"], inp["weight"], inp["bias"]).double()
    want = x / torch.sqrt((x * x).mean(1, keepdim=True) + eps) * w
    assert ((y - want).abs() <= 1e-6 * want.abs()).all()
    y = R.norm(_norm_spec("layernorm"), inp["x"], inp["weight"], inp["bias"]).double()
    mu = x.mean(1, keepdim=True)
    r = 1 / torch.sqrt(((x - mu) ** 2).mean(1, keepdim=True) + eps)
    want = (x - mu) * r * w + b
    # conditioning of x - mu: the fp32 mean is off by ~|mu| 2^-24, so bound by (|x| + |mu|)
    cond = (x.abs() + mu.abs()) * r * w.abs() + b.abs()
    assert ((y - want).abs() <= 1e-6 * cond).all()
    assert torch.equal(R.norm(_norm_spec("none"), inp["x"]), inp["x"].float())


def test_norm_exact_vs_scalar_emulation():
    inp = I.make_inputs(spec_of("indexer_bf16"), 6, seed=4)
    x, w, b = (inp[k].numpy().astype(np.float32) for k in ("x", "weight", "bias"))
    eps, n = np.float32(1e-6), np.float32(128)
    rms = R.norm(_norm_spec("rmsnorm"), inp["x"], inp["weight"]).numpy()
    ln = R.norm(_norm_spec("layernorm"), inp["x"], inp["weight"], inp["bias"]).numpy()
    for i in range(len(x)):
        r = np.float32(1) / np.sqrt(np.float32(emulate_warp_sum(x[i] * x[i]) / n + eps))
        assert np.array_equal(rms[i], (x[i] * r) * w)
        mu = np.float32(emulate_warp_sum(x[i]) / n)
        d = x[i] - mu
        r = np.float32(1) / np.sqrt(np.float32(emulate_warp_sum(d * d) / n + eps))
        assert np.array_equal(ln[i], (d * r) * w + b)


@pytest.mark.parametrize("style", ["interleaved", "neox"])
@pytest.mark.parametrize("placement", ["first", "last"])
def test_rope_vs_complex_multiplication(style, placement):
    n, r = 128, 64
    spec = variant(spec_of("indexer_bf16"), rope={"dim": r, "style": style, "placement": placement})
    rng = np.random.default_rng(5)
    y = rng.standard_normal((32, n)).astype(np.float32)
    pos = rng.integers(0, 4096, 32)
    freqs = I.rope_freqs(4096, r)
    out = R.rope(spec, torch.from_numpy(y), freqs, torch.from_numpy(pos)).numpy()
    start = 0 if placement == "first" else n - r
    i = np.arange(r // 2)
    re_i = start + (2 * i if style == "interleaved" else i)
    im_i = start + (2 * i + 1 if style == "interleaved" else i + r // 2)
    f = freqs.numpy().astype(np.float64)[pos]
    z = (y[:, re_i].astype(np.float64) + 1j * y[:, im_i].astype(np.float64)) * (f[:, 0::2] + 1j * f[:, 1::2])
    # fp32: two rounded products and one rounded sum
    bound = 2.0 ** -23 * (np.abs(y[:, re_i]) + np.abs(y[:, im_i])) * 1.01
    assert (np.abs(out[:, re_i] - z.real) <= bound).all()
    assert (np.abs(out[:, im_i] - z.imag) <= bound).all()
    # exactly the unfused fp32 formula, and the other dims untouched
    c, s = f[:, 0::2].astype(np.float32), f[:, 1::2].astype(np.float32)
    re, im = y[:, re_i], y[:, im_i]
    assert np.array_equal(out[:, re_i], re * c - im * s)
    assert np.array_equal(out[:, im_i], re * s + im * c)
    rest = np.setdiff1d(np.arange(n), np.concatenate([re_i, im_i]))
    assert np.array_equal(out[:, rest], y[:, rest]) and len(rest) == n - r


def test_rope_freqs_table():
    f = I.rope_freqs(100, 64).double().numpy()
    pos, i = np.arange(100)[:, None], np.arange(32)[None, :]
    ang = pos * 10000.0 ** (-2.0 * i / 64)
    assert np.allclose(f[:, 0::2], np.cos(ang), atol=1e-7) and np.allclose(f[:, 1::2], np.sin(ang), atol=1e-7)


def sylvester(n: int) -> np.ndarray:
    h = np.ones((1, 1))
    while h.shape[0] < n:
        h = np.block([[h, h], [h, -h]])
    return h


@pytest.mark.parametrize("n", [32, 128, 512])
def test_hadamard_vs_sylvester(n):
    H = sylvester(n)
    assert np.array_equal(H @ H.T, n * np.eye(n))
    rng = np.random.default_rng(n)
    x = rng.standard_normal((16, n)).astype(np.float32)
    scale = float(np.float32(1) / np.sqrt(np.float32(n)))
    got = R.hadamard(torch.from_numpy(x), scale).numpy().astype(np.float64)
    want = x.astype(np.float64) @ H.T * scale
    tol = (math.log2(n) + 2) * 2.0 ** -24 * (np.abs(x) @ np.abs(H.T)) * scale + 1e-12
    assert (np.abs(got - want) <= tol).all()
    assert np.array_equal(R.hadamard(torch.from_numpy(x), 1.0).numpy(), emulate_hadamard(x, 1.0))
    twice = R.hadamard(R.hadamard(torch.from_numpy(x), scale), scale).numpy()
    assert np.allclose(twice, x, rtol=0, atol=1e-5 * np.abs(x).max())


def emulate_hadamard(x: np.ndarray, scale) -> np.ndarray:
    """docs/numerics.md §4 literally, on each row."""
    out = x.astype(np.float32).copy()
    n = out.shape[-1]
    h = 1
    while h < n:
        for i in range(n):
            if i & h == 0:
                a, b = out[..., i].copy(), out[..., i + h].copy()
                out[..., i], out[..., i + h] = a + b, a - b
        h *= 2
    return out * np.float32(scale)


# ---------------------------------------------------------------------------------------------
# a scalar emulation of the whole token (numpy float32), compared byte for byte

def bf16_rne_bits(v: np.ndarray) -> np.ndarray:
    u = v.astype(np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def bf16_rt(v: np.ndarray) -> np.ndarray:
    return (bf16_rne_bits(v).astype(np.uint32) << 16).view(np.float32)


def emulate_token(spec: Spec, x, w, b, fr) -> tuple[bytes, bytes]:
    """(row bytes, scale bytes) of one token, from docs/numerics.md and docs/layouts.md §3 only."""
    n, r = spec.head_dim, spec.rope.dim
    v = x.astype(np.float32)
    w, b = w.astype(np.float32), b.astype(np.float32)
    eps, nn = np.float32(spec.norm.eps), np.float32(n)
    if spec.norm.kind == "rmsnorm":
        rr = np.float32(1) / np.sqrt(np.float32(emulate_warp_sum(v * v) / nn + eps))
        v = (v * rr) * w
    elif spec.norm.kind == "layernorm":
        d = v - np.float32(emulate_warp_sum(v) / nn)
        rr = np.float32(1) / np.sqrt(np.float32(emulate_warp_sum(d * d) / nn + eps))
        v = (d * rr) * w + b
    start = 0 if spec.rope.placement == "first" else n - r
    for i in range(r // 2):
        if spec.rope.style == "interleaved":
            a, bb = start + 2 * i, start + 2 * i + 1
        else:
            a, bb = start + i, start + i + r // 2
        c, s = np.float32(fr[2 * i]), np.float32(fr[2 * i + 1])
        re, im = v[a], v[bb]
        v[a], v[bb] = (np.float32(np.float32(re * c) - np.float32(im * s)),
                       np.float32(np.float32(re * s) + np.float32(im * c)))
    if spec.hadamard:
        v = emulate_hadamard(v, np.float32(1) / np.sqrt(np.float32(n)))
    st = spec.store
    if st.bf16_roundtrip:
        v = bf16_rt(v)
    kept = st.rope_dtype is not None
    qv = (v[r:] if spec.rope.placement == "first" else v[:n - r]) if kept else v
    rope_v = v[:r] if spec.rope.placement == "first" else v[n - r:]
    rope_b = b""
    if kept:
        rope_b = (bf16_rne_bits(rope_v) if st.rope_dtype == "bf16" else rope_v.astype(np.float16)).tobytes()
    scales = b""
    if st.dtype == "bf16":
        qb = bf16_rne_bits(qv).tobytes()
    elif st.dtype == "fp16":
        with np.errstate(over="ignore"):
            qb = qv.astype(np.float16).tobytes()
    elif st.scale == "none":
        qb = bytes(e4m3_encode_bruteforce(float(t)) for t in qv)
    else:
        qmax = 448.0 if st.dtype == "fp8_e4m3" else 6.0
        block = st.block or len(qv)
        codes = []
        for g in range(len(qv) // block):
            blk = qv[g * block:(g + 1) * block]
            a = max(np.float32(np.abs(blk).max()), np.float32(st.amax_floor))
            t = a / np.float32(qmax) if st.scale_math == "divide" else a * np.float32(1.0 / qmax)
            if st.scale == "fp32":
                mult = np.float32(1) / t
                scales += struct.pack("<f", t)
            else:
                e = exact_ceil_log2(float(t))
                mult = np.float32(2.0 ** -e)
                scales += struct.pack("<f", 2.0 ** e) if st.scale == "fp32_pow2" else bytes([e + 127])
            if st.dtype == "fp8_e4m3":
                codes += [e4m3_encode_bruteforce(float(np.float32(t_ * mult))) for t_ in blk]
            else:
                codes += [e2m1_encode_bruteforce(float(np.float32(t_ * mult))) for t_ in blk]
        if st.dtype == "fp4_e2m1":
            codes = [codes[2 * k] | codes[2 * k + 1] << 4 for k in range(len(codes) // 2)]
        qb = bytes(codes)
    row = rope_b + qb if (kept and spec.rope.placement == "first") else qb + rope_b
    return row, scales


VARIANTS = {  # beyond the shipped specs: every branch of the contract
    "indexer_fp16": ("indexer_bf16", {"store": {"dtype": "fp16"}}),
    "fp16_no_norm": ("indexer_bf16", {"store": {"dtype": "fp16"}, "norm": {"kind": "none"}, "rope": {"dim": 0},
                                      "hadamard": False}),
    "indexer_fp16_input": ("indexer_fp8", {"input_dtype": "fp16"}),
    "indexer_fp8_reciprocal": ("indexer_fp8", {"store": {"scale_math": "reciprocal"}}),
    "indexer_fp8_pow2_blocks": ("indexer_fp8", {"store": {"scale": "fp32_pow2", "block": 32}}),
    "indexer_fp8_ue8m0_layernorm": ("indexer_fp8", {"store": {"scale": "ue8m0", "block": 64},
                                                    "norm": {"kind": "layernorm"}}),
    "indexer_no_norm_no_rope": ("indexer_fp4", {"norm": {"kind": "none"}, "rope": {"dim": 0}}),
    "latent_rope_fp16": ("latent_p64", {"store": {"rope_dtype": "fp16"}}),
    "latent_neox_first": ("latent_p64", {"rope": {"style": "neox", "placement": "first"}}),
    "latent_uniform_no_roundtrip": ("latent_uniform", {"store": {"bf16_roundtrip": False}}),
}


def any_spec(key: str) -> Spec:
    if key in SHIPPED:
        return spec_of(key)
    base, upd = VARIANTS[key]
    return variant(spec_of(base), **{k: v for k, v in upd.items() if isinstance(v, dict)}).model_copy(
        update={k: v for k, v in upd.items() if not isinstance(v, dict)})


@pytest.mark.parametrize("key", [*SHIPPED, *VARIANTS])
def test_tokens_bytes_match_scalar_emulation(key):
    spec = any_spec(key)
    n_tok = 3 if spec.head_dim > 128 else 6
    inp = I.make_inputs(spec, n_tok, seed=6)
    if spec.store.dtype == "fp16":  # reach fp16 overflow (inf) and subnormals
        inp["x"][0, :4] = torch.tensor([1e5, -1e5, 1e-6, 3e-8])
        if spec.norm.kind == "none":
            assert torch.isinf(inp["x"][0, :2].half()).all()
    row, qz = R.encode(spec, *(inp[k] for k in ("x", "weight", "bias", "freqs", "positions")))
    fr = inp["freqs"].numpy()[inp["positions"].numpy()]
    for i in range(n_tok):
        want_row, want_scales = emulate_token(spec, inp["x"][i].float().numpy(), inp["weight"].float().numpy(),
                                              inp["bias"].float().numpy(), fr[i])
        assert bytes(row[i].tolist()) == want_row, f"token {i} row"
        assert bytes(qz.scale_bytes[i].tolist()) == want_scales, f"token {i} scales"


# ---------------------------------------------------------------------------------------------
# page maps (docs/layouts.md §3, numbers written out here)

# key: (P, page_bytes, row_bytes, scale_region_start, scale_stride, scale_bytes_used)
PAGE_MAPS = {
    "indexer_fp8": (64, 8448, 128, 64 * 128, 4, 4),
    "indexer_fp4": (64, 4352, 64, 64 * 64, 4, 4),
    "indexer_bf16": (64, 16384, 256, None, 0, 0),
    "latent_p64": (64, 37440, 576, 64 * 576, 8, 7),
    "latent_p2": (2, 1728, 576, 2 * 576, 8, 7),
    "latent_bf16": (64, 65536, 1024, None, 0, 0),
    "latent_uniform": (64, 32768, 512, None, 0, 0),
}


def written_mask(spec, inp, stage=None) -> tuple[torch.Tensor, torch.Tensor]:
    """Run the store on two complementary poisons: a byte was written iff it changed in either
    (a written value cannot equal both p and ~p). Also asserts unwritten bytes are intact."""
    outs = []
    for invert in (False, True):
        cache = I.poison_pattern(*inp["cache"].shape, invert=invert)
        before = cache.clone()
        R.norm_rope_store(spec, **{**inp, "cache": cache})
        outs.append((cache, before))
    mask = (outs[0][0] != outs[0][1]) | (outs[1][0] != outs[1][1])
    assert torch.equal(outs[0][0][mask], outs[1][0][mask])  # written bytes do not depend on the poison
    return mask, outs[0][0]


@pytest.mark.parametrize("key", list(PAGE_MAPS))
def test_page_map(key):
    spec = spec_of(key)
    P, page_bytes, row_b, sc_start, sc_stride, sc_used = PAGE_MAPS[key]
    num_pages = 4
    num_slots = num_pages * P
    locs = [P + 1, 0, 3 * P + P - 1, -1, num_slots, num_slots + 5, -P, 2 * P]
    inp = I.make_inputs(spec, len(locs), seed=7, num_pages=num_pages, skip_fraction=0)
    inp["out_loc"] = torch.tensor(locs, dtype=torch.int64)
    assert tuple(inp["cache"].shape) == (num_pages, page_bytes)
    mask, cache = written_mask(spec, inp)
    want = torch.zeros_like(mask)
    for loc in locs:
        if not 0 <= loc < num_slots:
            continue
        page, t = divmod(loc, P)
        want[page, t * row_b:(t + 1) * row_b] = True
        if sc_used:
            o = sc_start + t * sc_stride
            want[page, o:o + sc_used] = True
    assert torch.equal(mask, want)
    if key.startswith("latent_p"):  # rope kept as bf16 at byte 448 of the row
        y = R.prequant(spec, *(inp[k] for k in ("x", "weight", "bias", "freqs", "positions")))
        page, t = divmod(locs[0], P)
        rope_bytes = cache[page, t * 576 + 448:t * 576 + 576].numpy().tobytes()
        assert rope_bytes == bf16_rne_bits(y[0, 448:].numpy()).tobytes()
        sc = cache[page, P * 576 + 8 * t:P * 576 + 8 * t + 7].tolist()
        blocks = y[0, :448].reshape(7, 64).abs().amax(1).numpy()
        assert sc == [exact_ceil_log2(float(np.float32(max(a, np.float32(1e-4)) / np.float32(448)))) + 127
                      for a in blocks]
    if key == "indexer_fp8":
        y = R.prequant(spec, *(inp[k] for k in ("x", "weight", "bias", "freqs", "positions")))
        page, t = divmod(locs[0], P)
        got = struct.unpack("<f", cache[page, 8192 + 4 * t:8196 + 4 * t].numpy().tobytes())[0]
        assert got == np.float32(max(np.float32(y[0].abs().max()), np.float32(1e-4)) / np.float32(448))


def test_layout_agrees_with_domain_page_maps():
    for key, (P, page_bytes, row_b, sc_start, sc_stride, _) in PAGE_MAPS.items():
        lay = L.compute(spec_of(key))
        assert (lay.page_size, lay.page_bytes, lay.row_bytes) == (P, page_bytes, row_b), key
        if sc_start is not None:
            assert lay.scale_offset(1, 0) == sc_start + sc_stride, key


# ---------------------------------------------------------------------------------------------
# decode, precision

@pytest.mark.parametrize("key", list(SHIPPED))
def test_decode_within_format_error(key):
    spec = spec_of(key)
    lay = L.compute(spec)
    inp = I.make_inputs(spec, 96, seed=8)
    R.norm_rope_store(spec, **inp)
    y = R.prequant(spec, *(inp[k] for k in ("x", "weight", "bias", "freqs", "positions"))).double()
    vals, scales = R.decode(spec, inp["cache"], inp["out_loc"])
    loc = inp["out_loc"]
    ok = (loc >= 0) & (loc < inp["cache"].shape[0] * lay.page_size)
    assert 0 < ok.sum() < len(loc)
    assert torch.isnan(vals[~ok]).all() and not torch.isnan(vals[ok]).any()
    vals, y, scales = vals[ok].double(), y[ok], scales[ok].double()
    err = (vals - y).abs()
    s = spec.store
    q, k = lay.quant_span, lay.kept_span
    if k.size:
        assert (err[:, k.start:k.end] <= 2.0 ** -8 * y[:, k.start:k.end].abs()).all()
    eq, yq = err[:, q.start:q.end], y[:, q.start:q.end]
    if s.dtype == "bf16":
        assert (eq <= 2.0 ** -8 * yq.abs()).all()
        return
    if s.scale == "none":
        per = torch.ones_like(yq)
    else:
        per = scales.repeat_interleave(lay.block, dim=1)[:, :q.size]
    if s.dtype == "fp8_e4m3":
        # 3 mantissa bits: half an ulp is 2^-4 relative; subnormal spacing 2^-9 of the scale
        assert (eq <= 2.0 ** -4 * yq.abs() + 2.0 ** -10 * per + 2.0 ** -20 * yq.abs()).all()
        assert ((yq.abs() / per) <= 448 * (1 + 2.0 ** -20)).all()
    else:
        v = yq.abs() / per
        assert (v <= 6).all()
        step = torch.where(v <= 2, 0.25, torch.where(v <= 4, 0.5, 1.0))
        assert (eq <= step * per).all()


# ---------------------------------------------------------------------------------------------
# the rounding cases of docs/layouts.md §5

def test_ue8m0_exponent_is_ceiled_not_floored():
    """SGLang's torch port floors the exponent; the kernel (and the spec) ceil it. amax 300:
    t = 300/448 = 0.67 -> ceil 2^0 (byte 127); floor would be 2^-1 and saturate 300 to 224."""
    spec = spec_of("latent_p64")
    y = torch.zeros(1, 512)
    y[0, 0] = 300.0
    y[0, 1] = -150.0
    qz = R.quantize(spec, y)
    assert qz.scale_bytes[0, 0].item() == 127
    codes = qz.values[0, :2].tolist()
    assert [E4M3[c] for c in codes] == [288.0, -144.0]  # nearest e4m3 at scale 1, no saturation


def test_bf16_roundtrip_happens_before_amax_and_codes():
    spec = spec_of("latent_p64")
    plain = variant(spec, store={"bf16_roundtrip": False})
    y = torch.zeros(1, 512)
    y[0, 0] = 448.5  # bf16(448.5) = 448: t = 1 exactly -> 2^0; without the round trip 2^1
    y[0, 64] = float(np.float32(1.0625 + 2 ** -20))  # bf16 -> 1.0625, an e4m3 tie -> 1.0
    y[0, 65] = 2.0  # block 1 amax 2 -> scale 2^-7, 1.0625 * 128 = 136 = a tie between 128 and 144
    with_rt = R.quantize(spec, R.bf16_roundtrip(y))
    without = R.quantize(plain, y)
    assert with_rt.scale_bytes[0, 0].item() == 127 and without.scale_bytes[0, 0].item() == 128
    assert E4M3[with_rt.values[0, 64].item()] * 2 ** -7 == 1.0
    assert E4M3[without.values[0, 64].item()] * 2 ** -7 == 1.125
    # and prequant applies it
    inp = I.make_inputs(spec, 4, seed=9)
    yy = R.prequant(spec, *(inp[k] for k in ("x", "weight", "bias", "freqs", "positions")))
    assert torch.equal(yy, R.bf16_roundtrip(yy))


# ---------------------------------------------------------------------------------------------
# inputs and store behaviour

def test_make_inputs_shape_and_properties():
    spec = spec_of("indexer_fp8")
    a = I.make_inputs(spec, 200, seed=11, skip_fraction=0.1)
    b = I.make_inputs(spec, 200, seed=11, skip_fraction=0.1)
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert set(a) == {"x", "weight", "bias", "freqs", "positions", "out_loc", "cache"}
    assert a["x"].dtype == torch.float32 and a["x"].shape == (200, 128)
    assert a["freqs"].shape == (4096, 64) and a["freqs"].dtype == torch.float32
    num_slots = a["cache"].shape[0] * 64
    loc = a["out_loc"]
    valid = (loc >= 0) & (loc < num_slots)
    assert num_slots > 200 and (loc < 0).any() and (loc >= num_slots).any()
    assert (~valid).sum() == 20
    assert loc[valid].unique().numel() == valid.sum()  # no duplicates
    assert not torch.equal(loc[valid], loc[valid].sort().values)  # shuffled
    assert (a["cache"] != 0).all()
    col_max = a["x"].abs().amax(0)
    assert col_max.max() > 8 * col_max.median()  # outlier channels
    c = a["freqs"].double()
    assert torch.allclose(c[:, 0::2] ** 2 + c[:, 1::2] ** 2, torch.ones(4096, 32, dtype=torch.float64))
    bf = I.make_inputs(spec_of("dsv32_indexer"), 8, seed=1)
    assert bf["x"].dtype == torch.bfloat16 and bf["weight"].dtype == torch.bfloat16


def test_store_skips_every_out_of_range_loc():
    spec = spec_of("indexer_fp8")
    inp = I.make_inputs(spec, 8, seed=12, num_pages=2)
    inp["out_loc"] = torch.tensor([-1, -64, -129, 128, 129, 10 ** 6, -(10 ** 6), 2 ** 40])
    before = inp["cache"].clone()
    R.norm_rope_store(spec, **inp)
    assert torch.equal(inp["cache"], before)


def test_stage_functions_compose_to_norm_rope_store():
    spec = spec_of("latent_p64")
    inp = I.make_inputs(spec, 20, seed=13)
    cache = inp["cache"].clone()
    y = R.prequant(spec, *(inp[k] for k in ("x", "weight", "bias", "freqs", "positions")))
    qz = R.quantize(spec, y)
    R.store(spec, cache, inp["out_loc"], R.pack_row(spec, qz), qz.scale_bytes)
    R.norm_rope_store(spec, **inp)
    assert torch.equal(cache, inp["cache"])


def test_zero_tokens_and_optional_arguments():
    spec = any_spec("indexer_no_norm_no_rope")  # norm none, no RoPE: weight, bias, freqs, positions unused
    inp = I.make_inputs(spec, 5, seed=14)
    before = inp["cache"].clone()
    R.norm_rope_store(spec, inp["x"][:0], None, None, None, None, inp["out_loc"][:0], inp["cache"])
    assert torch.equal(inp["cache"], before)
    R.norm_rope_store(spec, inp["x"], None, None, None, None, inp["out_loc"], inp["cache"])
    ref = before.clone()
    R.norm_rope_store(spec, **{**inp, "cache": ref})
    assert torch.equal(inp["cache"], ref)


def test_every_accepted_spec_matches_the_scalar_emulation():
    """Whatever the validator accepts (tests/strategies.py), the reference writes the bytes the
    scalar emulation of docs/numerics.md computes, and decode reads back the right shapes."""
    from hypothesis import HealthCheck, given, settings

    from strategies import valid_specs

    @settings(max_examples=25, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
    @given(valid_specs(max_page_size=64))
    def check(d):
        spec = Spec.model_validate(d)
        lay = L.compute(spec)
        inp = I.make_inputs(spec, 5, seed=15, max_pos=64)
        row, qz = R.encode(spec, *(inp[k] for k in ("x", "weight", "bias", "freqs", "positions")))
        fr = inp["freqs"].numpy()[inp["positions"].numpy()] if spec.rope.dim else None
        for i in range(2):
            want_row, want_scales = emulate_token(spec, inp["x"][i].float().numpy(), inp["weight"].float().numpy(),
                                                  inp["bias"].float().numpy(), None if fr is None else fr[i])
            assert bytes(row[i].tolist()) == want_row
            assert bytes(qz.scale_bytes[i].tolist()) == want_scales
        R.norm_rope_store(spec, **inp)
        vals, scales = R.decode(spec, inp["cache"], inp["out_loc"])
        assert vals.shape == (5, spec.head_dim) and scales.shape == (5, lay.blocks_per_token)

    check()
