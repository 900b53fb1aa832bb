// kgen::indexer_logits, the conversions: fp8 e4m3, fp4 e2m1 and ue8m0 scale codes to the 16-bit
// tensor-core operands (f16, bf16) and to fp32 scales, exactly, in registers (no table in memory).
#pragma once

#include "../numerics.cuh"

namespace kgen {

namespace detail {

// Two e4m3 codes (the low byte is the first) as an f16x2 word, exactly (cvt.rn.f16x2.e4m3x2).
__device__ __forceinline__ uint32_t e4m3x2_f16(uint32_t two) {
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(two & 0xffffu), __NV_E4M3);
  return static_cast<uint32_t>(h.x) | (static_cast<uint32_t>(h.y) << 16);
}

// Two e2m1 codes (the low nibble is the even element) times 2^(e - 127) (`scale`), as a bf16x2 word: the
// product of a code value (at most 3 significant bits) and a power of two is exact in bf16 (ue8m0 and
// bf16 share fp32's exponent range; byte 255, not a number, gives NaN). Twice the code magnitudes
// {0, 1, 2, 3, 4, 6, 8, 12} are the nibbles of 0xC8643210: no table in memory.
__device__ __forceinline__ float e2m1_value(uint32_t code, float half_scale) {
  const float twice = static_cast<float>((0xC8643210u >> ((code & 7u) * 4u)) & 15u);
  return (code & 8u ? -twice : twice) * half_scale;
}
__device__ __forceinline__ uint32_t e2m1x2_bf16(uint32_t byte, float scale) {
  const float half_scale = scale * 0.5f;
  return num::bf16_bits(e2m1_value(byte, half_scale)) | (num::bf16_bits(e2m1_value(byte >> 4, half_scale)) << 16);
}

// The bf16x2 product a x b, rounded once (exact wherever it is used here: powers of two times values of at
// most 3 significant bits), signed zeros kept.
__device__ __forceinline__ uint32_t bf16x2_mul(uint32_t a, uint32_t b) {
#if defined(KGEN_CPU_SHIM)
  const uint32_t lo = num::bf16_bits(kgen_cpu::bf16_value(a) * kgen_cpu::bf16_value(b));
  const uint32_t hi = num::bf16_bits(kgen_cpu::bf16_value(a >> 16) * kgen_cpu::bf16_value(b >> 16));
  return lo | (hi << 16);
#else
  uint32_t d;  // fma with -0: the product alone
  asm("fma.rn.bf16x2 %0, %1, %2, %3;\n" : "=r"(d) : "r"(a), "r"(b), "r"(0x80008000u));
  return d;
#endif
}

// Eight e2m1 codes (a 32-bit word; value i is nibble i: the low nibble of a byte is the even value) as four
// bf16x2 words, word p holding value p in its low half and value p + 4 in its high half (the pairs a shift
// and a mask reach: the wgmma path orders its k to match), times `factor2` (e2m1_factor).
// Each code's bits are placed as they are: its sign in the bf16's sign, its two exponent bits in the bf16's
// two lowest exponent bits, its mantissa bit in the bf16's top mantissa bit. That bf16 is the code's value
// times 2^-126 for every code: the codes of exponent 0 (0 and 0.5) land on the bf16 zero and subnormal with
// the same factor. One multiply places a nibble's two copies (x 2^12: its sign to bit 15; x 2^6: its
// magnitude to bits 6-8; no bits overlap, so no carries) and a mask keeps those bits.
__device__ __forceinline__ uint4 e2m1x8_bf16(uint32_t codes, uint32_t factor2) {
  constexpr uint32_t kKept = 0x81c081c0u;                                      // bits 15 and 6-8 of each half
  constexpr uint32_t kLow = 0x000f000fu, kLowTimes = (1u << 12) | (1u << 6);   // nibbles 0 and 4
  constexpr uint32_t kHigh = 0x00f000f0u, kHighTimes = (1u << 8) | (1u << 2);  // nibbles 1 and 5
  const uint32_t upper = codes >> 8;  // nibbles 2, 3, 6, 7 where 0, 1, 4, 5 were
  const uint32_t w0 = ((codes & kLow) * kLowTimes) & kKept, w1 = ((codes & kHigh) * kHighTimes) & kKept;
  const uint32_t w2 = ((upper & kLow) * kLowTimes) & kKept, w3 = ((upper & kHigh) * kHighTimes) & kKept;
  return make_uint4(bf16x2_mul(w0, factor2), bf16x2_mul(w1, factor2), bf16x2_mul(w2, factor2), bf16x2_mul(w3, factor2));
}

// A ue8m0 scale byte e as e2m1x8_bf16's factor, both halves: 2^126 (the codes' own values) times the scale
// 2^(e - 127), that is 2^(e - 1), a normal bf16 (exponent field e + 126) for e <= 128. For e in [129, 254]
// 2^(e - 1) is past bf16's range: the factor is 2^126 and e2m1_rest the rest, 2^(e - 127), for a second
// multiply (e2m1_splits). e = 255, not a number: NaN.
__device__ __forceinline__ uint32_t e2m1_factor(uint32_t e) {
  const uint32_t h = e <= 128u ? (e + 126u) << 7 : e == 255u ? 0x7fc0u : 253u << 7;
  return h | (h << 16);
}
__device__ __forceinline__ bool e2m1_splits(uint32_t e) {
  return e - 129u < 126u;
}
__device__ __forceinline__ uint32_t e2m1_rest(uint32_t e) {  // 1 where the factor was the whole scale
  const uint32_t h = e2m1_splits(e) ? e << 7 : 0x3f80u;
  return h | (h << 16);
}

}  // namespace detail

}  // namespace kgen
