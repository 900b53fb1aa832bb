// kgen numerics: the fp32 operations of docs/numerics.md, pinned so that no compiler flag changes them.
//
// Every multiply/add/divide/sqrt of the pipeline goes through the `_rn` intrinsics: they are IEEE
// round-to-nearest-even and are never contracted into an FMA, whatever --fmad / -prec-div /
// -prec-sqrt / fast-math say. (kgen still compiles with --fmad=false -prec-div=true -prec-sqrt=true.)
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

namespace kgen {

// NVRTC has no <cstdint>; these are the LP64 types the ABI names (int64_t is `long` on Linux).
using int32_t = int;
using int64_t = long;
using uint8_t = unsigned char;
using uint16_t = unsigned short;
using uint32_t = unsigned int;
static_assert(sizeof(int64_t) == 8 && sizeof(int32_t) == 4, "kgen needs an LP64 target");

enum class Dtype : int { none = 0, fp32 = 1, bf16 = 2, fp16 = 3, fp8_e4m3 = 4, fp4_e2m1 = 5 };
enum class NormKind : int { rmsnorm = 0, layernorm = 1, none = 2 };
enum class RopeStyle : int { interleaved = 0, neox = 1 };
enum class RopePlacement : int { first = 0, last = 1 };
enum class ScaleKind : int { none = 0, fp32 = 1, fp32_pow2 = 2, ue8m0 = 3 };
enum class ScaleMath : int { divide = 0, reciprocal = 1 };

template <Dtype D>
struct CType {
  using type = void;
};
template <>
struct CType<Dtype::fp32> {
  using type = float;
};
template <>
struct CType<Dtype::bf16> {
  using type = __nv_bfloat16;
};
template <>
struct CType<Dtype::fp16> {
  using type = __half;
};

#define KGEN_HD __host__ __device__

KGEN_HD constexpr bool is_pow2(long long n) {
  return n > 0 && (n & (n - 1)) == 0;
}

namespace num {

constexpr unsigned kFullMask = 0xffffffffu;

__device__ __forceinline__ float mul(float a, float b) {
  return __fmul_rn(a, b);
}
__device__ __forceinline__ float add(float a, float b) {
  return __fadd_rn(a, b);
}
__device__ __forceinline__ float sub(float a, float b) {
  return __fsub_rn(a, b);
}
__device__ __forceinline__ float div(float a, float b) {
  return __fdiv_rn(a, b);
}
__device__ __forceinline__ uint32_t umax(uint32_t a, uint32_t b) {
  return a > b ? a : b;
}

// p + sign * v for sign = +-1: one correctly rounded fma, bit-identical to add(p, +-v).
__device__ __forceinline__ float add_signed(float p, float sign, float v) {
  return __fmaf_rn(sign, v, p);
}
__device__ __forceinline__ float sqrt(float a) {
  return __fsqrt_rn(a);
}
// 1.0f / a, correctly rounded (IEEE, denormals and specials included): the same bits as div(1.0f, a)
// with a shorter fast path (no numerator scaling, no FCHK).
__device__ __forceinline__ float rcp(float a) {
  return __frcp_rn(a);
}

// a / q, correctly rounded, as one double multiply: fp32(double(a) * double(1/q)).
// Exact (the same bits as div(a, q)) when q = d * 2^s with d odd and d < 2^26, and the exact quotient
// a/q is a normal fp32 (>= 2^-126) -- the caller checks both at compile time (quotient_exact_in_double).
// Proof: a = m * 2^e with an integer m < 2^24; scaled to its binade [2^23, 2^24), Q = m * 2^u / d for
// an integer u >= 0. A rounding midpoint is H = k + 1/2, so |Q - H| = |2 m 2^u - d (2k+1)| / (2d) >= 1/(2d)
// (even minus odd: never 0); Q's relative distance to every midpoint is > 2^-25 / d. The double result
// is a/q * (1 + e1)(1 + e2), |e1|, |e2| <= 2^-53 (1/q rounded, the product rounded; no double
// under/overflow for fp32 a), i.e. within 2^-51.9 relative -- closer than any midpoint, so rounding it
// to fp32 gives the correctly rounded a/q (a binade edge is a float, not a midpoint, so crossing it is
// harmless). For d == 1 the quotient is exact. +inf gives +inf. tests/test_exact_shortcuts.py checks
// every fp32 a exhaustively for the shipped q (448, 6).
__device__ __forceinline__ float div_via_double(float a, double inv_q) {
  return __double2float_rn(__dmul_rn(static_cast<double>(a), inv_q));
}

// Exact widening of a stored value (bits) to fp32.
__device__ __forceinline__ float widen_bf16(uint32_t bits16) {
  return __uint_as_float(bits16 << 16);
}
__device__ __forceinline__ float widen_fp16(uint32_t bits16) {
  return __half2float(__ushort_as_half(static_cast<unsigned short>(bits16)));
}

// Round-to-nearest-even casts, as bits.
__device__ __forceinline__ uint32_t bf16_bits(float x) {
  return static_cast<uint32_t>(__bfloat16_as_ushort(__float2bfloat16_rn(x)));
}
__device__ __forceinline__ uint32_t fp16_bits(float x) {  // overflows to inf, as a cast does
  return static_cast<uint32_t>(__half_as_ushort(__float2half_rn(x)));
}
__device__ __forceinline__ float bf16_round(float x) {
  return __uint_as_float(bf16_bits(x) << 16);
}

// e4m3fn: clamp to [-448, 448], round to nearest even (subnormals kept). One byte per value;
// the pair form puts `lo` in the low byte.
__device__ __forceinline__ uint32_t e4m3(float v) {
  return static_cast<uint32_t>(__nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3));
}
__device__ __forceinline__ uint32_t e4m3x2(float lo, float hi) {
  return static_cast<uint32_t>(__nv_cvt_float2_to_fp8x2(make_float2(lo, hi), __NV_SATFINITE, __NV_E4M3));
}

// ceil(log2(t)) of a positive t from its bits: t = m * 2^E, 1 <= m < 2 -> E if m == 1 else E + 1.
// (Subnormal t, only reachable with a tiny amax_floor, is handled exactly too.)
__device__ __forceinline__ int ceil_log2(float t) {
  const uint32_t b = __float_as_uint(t);
  const int ex = static_cast<int>((b >> 23) & 0xffu);
  const uint32_t m = b & 0x7fffffu;
  if (ex == 0) {  // t = m * 2^-149
    const int p = 31 - __clz(static_cast<int>(m));
    return (m & (m - 1u)) ? p + 1 - 149 : p - 149;
  }
  return ex - 127 + (m != 0u ? 1 : 0);
}

// ceil_log2 for a normal or +inf t (bits(t) >= 0x00800000), as the biased exponent of 2^ceil(log2 t):
// adding 0x7fffff to the bits carries into the exponent exactly when the mantissa is non-zero, so
// (bits + 0x7fffff) & 0x7f800000 is the bit pattern of 2^ceil_log2(t) (+inf for t > 2^127 or +inf, i.e.
// exp2i(ceil_log2(t)) for every ceil_log2(t) <= 128, the largest a normal/inf t can give).
__device__ __forceinline__ uint32_t pow2_ceil_bits(float t) {
  return (__float_as_uint(t) + 0x7fffffu) & 0x7f800000u;
}
// 2^-e from sb = pow2_ceil_bits(t), e = (sb >> 23) - 127 in [-126, 128]: the normal (127 - e) << 23 =
// 0x7f000000 - sb for e <= 126, else the subnormal 1 << (149 - e) (exp2i(-e) for every such e).
__device__ __forceinline__ uint32_t pow2_inv_bits(uint32_t sb) {
  return sb <= 0x7e800000u ? 0x7f000000u - sb : 1u << (276u - (sb >> 23));
}

// 2^e exactly (inf above the fp32 range, 0 below it).
__device__ __forceinline__ float exp2i(int e) {
  if (e > 127) return __uint_as_float(0x7f800000u);
  if (e >= -126) return __uint_as_float(static_cast<uint32_t>(e + 127) << 23);
  if (e >= -149) return __uint_as_float(1u << (e + 149));
  return 0.0f;
}

// fp4 e2m1 code of v (already divided by its scale): thresholds, ties go down, no negative zero:
// code = (a > 0.25) + (a > 0.75) + (a > 1.25) + (a > 1.75) + (a > 2.5) + (a > 3.5) + (a > 5.0), a = |v|
// (0 for NaN), nibble = code | 8 if v < 0 and code != 0.
// Computed as ceil(y(a)) clamped to [0, 7], y(a) = min(2a - 0.5, a + 1.5, a/2 + 3.5): y is continuous and
// strictly increasing with y(T_i) = i at the thresholds T_0..T_6 = 0.25 .. 5.0, so for T_i < a <= T_i+1
// ceil(y) = i + 1 = the number of thresholds below a (ties go down). Each branch of y is evaluated
// rounded UP (ceil(RU(x)) = ceil(x): RU(x) >= x and the integer ceil(x) is a float >= x), and min, max
// and the clamps commute with ceil; ceil(m) for m in [0, 7] is RU(m + 2^23) - 2^23 (floats there are
// integers). fmaxf(NaN, 0) = 0 makes a NaN v code 0; code != 0 and v < 0 <=> v < -0.25.
// tests/exact/e2m1.cc checks every fp32 v against the threshold sum.
__device__ __forceinline__ uint32_t e2m1(float v) {
  const float a = fabsf(v);
  float y = fminf(fminf(__fmaf_ru(a, 2.0f, -0.5f), __fadd_ru(a, 1.5f)), __fmaf_ru(a, 0.5f, 3.5f));
  y = fminf(fmaxf(y, 0.0f), 7.0f);
  const uint32_t code = __float_as_uint(__fadd_ru(y, 8388608.0f)) - 0x4b000000u;
  return code | (v < -0.25f ? 8u : 0u);
}

}  // namespace num
}  // namespace kgen
