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

// A ue8m0 scale byte e as a bf16x2 word holding 2^(e - 127) twice: bf16 shares fp32's exponent field, so
// e << 7 for e in [1, 254]; e = 0 is the subnormal 2^-127 (0x0040); e = 255, not a number, NaN.
__device__ __forceinline__ uint32_t ue8m0_bf16x2(uint32_t e) {
  const uint32_t h = e == 0u ? 0x0040u : e == 255u ? 0x7fc0u : e << 7;
  return h | (h << 16);
}
// Eight e2m1 codes (a 32-bit word; value i is nibble i: the low nibble of a byte is the even element) as
// four bf16x2 words (value 2i in the low half of word i) times `scale2` (ue8m0_bf16x2). The magnitudes
// {0, 0.5, 1, 1.5, 2, 3, 4, 6} are looked up by byte permutes in tables of their bf16 bytes (the code's
// low 3 bits select a byte of two table words), the sign bits moved to bits 15 and 31; the products
// with a power of two are exact in bf16 (at most 3 significant bits; the smallest, 2^-128, is a bf16
// subnormal), as in e2m1x2_bf16.
__device__ __forceinline__ uint32_t bf16x2_mul(uint32_t a, uint32_t b) {
#if defined(KGEN_CPU_SHIM)
  const uint32_t lo = num::bf16_bits(kgen_cpu::bf16_value(a) * kgen_cpu::bf16_value(b));
  const uint32_t hi = num::bf16_bits(kgen_cpu::bf16_value(a >> 16) * kgen_cpu::bf16_value(b >> 16));
  return lo | (hi << 16);
#else
  uint32_t d;  // fma with -0: the product alone, rounded once (exactly here), signed zeros kept
  asm("fma.rn.bf16x2 %0, %1, %2, %3;\n" : "=r"(d) : "r"(a), "r"(b), "r"(0x80008000u));
  return d;
#endif
}
__device__ __forceinline__ uint4 e2m1x8_bf16(uint32_t codes, uint32_t scale2) {
  constexpr uint32_t kLo0 = 0xC0800000u, kLo1 = 0xC0804000u;  // low bytes of codes 0-3, 4-7
  constexpr uint32_t kHi0 = 0x3F3F3F00u, kHi1 = 0x40404040u;  // high bytes
  const uint32_t mags = codes & 0x77777777u, mags_hi = mags >> 16, shifted = codes << 4;
  const uint32_t lo_a = __byte_perm(kLo0, kLo1, mags), hi_a = __byte_perm(kHi0, kHi1, mags);
  const uint32_t lo_b = __byte_perm(kLo0, kLo1, mags_hi), hi_b = __byte_perm(kHi0, kHi1, mags_hi);
  // word i: the sign of value 2i (bit 8i + 3: bit 7 of byte i of `shifted`) to bit 15, of value 2i + 1
  // (bit 8i + 7) to bit 31
  const uint32_t w0 = __byte_perm(lo_a, hi_a, 0x5140) | (__byte_perm(shifted, codes, 0x4000) & 0x80008000u);
  const uint32_t w1 = __byte_perm(lo_a, hi_a, 0x7362) | (__byte_perm(shifted, codes, 0x5010) & 0x80008000u);
  const uint32_t w2 = __byte_perm(lo_b, hi_b, 0x5140) | (__byte_perm(shifted, codes, 0x6020) & 0x80008000u);
  const uint32_t w3 = __byte_perm(lo_b, hi_b, 0x7362) | (__byte_perm(shifted, codes, 0x7030) & 0x80008000u);
  return make_uint4(bf16x2_mul(w0, scale2), bf16x2_mul(w1, scale2), bf16x2_mul(w2, scale2), bf16x2_mul(w3, scale2));
}

}  // namespace detail

}  // namespace kgen
