// A CPU stand-in for the CUDA device API the kgen headers use, so that the real kernel source can
// run on the host (tests/test_render.py: CPU emulation against the Torch reference). A warp is 32
// std::threads; a shuffle is a barrier-synchronised exchange. Arithmetic is plain IEEE fp32
// (compile with -ffp-contract=off); e4m3/bf16/fp16 casts are exact software roundings.
#pragma once
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstring>

#define __device__
#define __host__
#define __global__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __grid_constant__

struct dim3_ { unsigned x = 0, y = 0, z = 0; };
namespace kgen_cpu {
struct Warp { std::barrier<> bar{32}; uint32_t slots[32]; };
inline thread_local dim3_ tl_thread, tl_block;
inline thread_local Warp* tl_warp = nullptr;
inline uint32_t exchange(uint32_t bits, int src) {
  const int lane = static_cast<int>(tl_thread.x & 31u);
  tl_warp->slots[lane] = bits;
  tl_warp->bar.arrive_and_wait();
  const uint32_t r = tl_warp->slots[src & 31];
  tl_warp->bar.arrive_and_wait();
  return r;
}
}  // namespace kgen_cpu
#define threadIdx (kgen_cpu::tl_thread)
#define blockIdx (kgen_cpu::tl_block)

struct uint2 { unsigned x, y; };
struct uint4 { unsigned x, y, z, w; };
struct float2 { float x, y; };
inline uint2 make_uint2(unsigned a, unsigned b) { return {a, b}; }
inline uint4 make_uint4(unsigned a, unsigned b, unsigned c, unsigned d) { return {a, b, c, d}; }
inline float2 make_float2(float a, float b) { return {a, b}; }

inline float __uint_as_float(unsigned u) { float f; std::memcpy(&f, &u, 4); return f; }
inline unsigned __float_as_uint(float f) { unsigned u; std::memcpy(&u, &f, 4); return u; }
inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz(static_cast<unsigned>(x)); }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __fsqrt_rn(float a) { return std::sqrt(a); }
// the GPU's rsqrtf is approximate (numerics fast); here the rounded 1 / sqrt, within its tolerance
inline float rsqrtf(float a) { return 1.0f / std::sqrt(a); }
inline float __fmaf_rn(float a, float b, float c) { return std::fma(a, b, c); }
#include <math.h>


template <class T> T __ldg(const T* p) { return *p; }
template <class T> T __ldcg(const T* p) { return *p; }  // the L2-only load: one memory on the CPU
template <class T> void __stcs(T* p, T v) { *p = v; }

inline float __shfl_xor_sync(unsigned, float v, int m) {
  return __uint_as_float(kgen_cpu::exchange(__float_as_uint(v), static_cast<int>(threadIdx.x & 31u) ^ m));
}
inline unsigned __shfl_xor_sync(unsigned, unsigned v, int m) {
  return kgen_cpu::exchange(v, static_cast<int>(threadIdx.x & 31u) ^ m);
}
// redux.sync: every lane takes part (the kernel uses it for whole-warp blocks only)
inline unsigned __reduce_max_sync(unsigned, unsigned v) {
  unsigned m = v;
  for (int src = 0; src < 32; ++src) {
    const unsigned o = kgen_cpu::exchange(v, src);
    m = o > m ? o : m;
  }
  return m;
}
inline float __shfl_sync(unsigned, float v, int src) {
  return __uint_as_float(kgen_cpu::exchange(__float_as_uint(v), src));
}
inline unsigned __shfl_sync(unsigned, unsigned v, int src) { return kgen_cpu::exchange(v, src); }

// 16-bit types
struct __nv_bfloat16 { unsigned short bits; };
struct __half { unsigned short bits; };
inline __nv_bfloat16 __float2bfloat16_rn(float f) {
  unsigned u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return {static_cast<unsigned short>((u >> 16) | 0x40u)};
  u += 0x7fffu + ((u >> 16) & 1u);
  return {static_cast<unsigned short>(u >> 16)};
}
inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 h) { return h.bits; }
inline __half __float2half_rn(float f) {
  _Float16 h = static_cast<_Float16>(f);
  unsigned short b; std::memcpy(&b, &h, 2); return {b};
}
inline unsigned short __half_as_ushort(__half h) { return h.bits; }
inline __half __ushort_as_half(unsigned short b) { return {b}; }
inline float __half2float(__half h) { _Float16 v; std::memcpy(&v, &h.bits, 2); return static_cast<float>(v); }

// fp8 e4m3fn, saturating, round to nearest even
enum __nv_saturation_t { __NV_NOSAT, __NV_SATFINITE };
enum __nv_fp8_interpretation_t { __NV_E4M3, __NV_E5M2 };
inline double kgen_e4m3_value(unsigned code) {  // code 0..0x7e
  const unsigned e = (code >> 3) & 15u, m = code & 7u;
  return e == 0 ? std::ldexp(m / 8.0, -6) : std::ldexp(1.0 + m / 8.0, static_cast<int>(e) - 7);
}
inline unsigned char __nv_cvt_float_to_fp8(float f, __nv_saturation_t, __nv_fp8_interpretation_t) {
  if (std::isnan(f)) return 0x7f;
  const unsigned sign = std::signbit(f) ? 0x80u : 0u;
  double a = std::fabs(static_cast<double>(f));
  if (a > 448.0) a = 448.0;
  unsigned best = 0;
  double bd = a;
  for (unsigned c = 1; c <= 0x7e; ++c) {
    const double d = std::fabs(kgen_e4m3_value(c) - a);
    if (d < bd || (d == bd && (c & 1u) == 0u && (best & 1u) == 1u)) { bd = d; best = c; }
  }
  return static_cast<unsigned char>(sign | best);
}
inline unsigned short __nv_cvt_float2_to_fp8x2(float2 v, __nv_saturation_t s, __nv_fp8_interpretation_t i) {
  return static_cast<unsigned short>(__nv_cvt_float_to_fp8(v.x, s, i) | (__nv_cvt_float_to_fp8(v.y, s, i) << 8));
}
inline float __frcp_rn(float a) { return 1.0f / a; }
inline double __dmul_rn(double a, double b) { return a * b; }
inline float __double2float_rn(double d) { return static_cast<float>(d); }
// round-toward-+inf arithmetic (e2m1): the x86 rounding mode around one operation. The volatile
// operands and result keep the operation between the two fesetround calls.
#include <cfenv>
#ifndef KGEN_SHIM_GLOBAL_ROUND_UP
inline float __fadd_ru(float a, float b) {
  const int old = std::fegetround();
  std::fesetround(FE_UPWARD);
  volatile float x = a, y = b;
  volatile float r = x + y;
  std::fesetround(old);
  return r;
}
inline float __fmaf_ru(float a, float b, float c) {
  const int old = std::fegetround();
  std::fesetround(FE_UPWARD);
  volatile float x = a, y = b, z = c;
  volatile float r = std::fma(static_cast<float>(x), static_cast<float>(y), static_cast<float>(z));
  std::fesetround(old);
  return r;
}
#else  // the caller has set FE_UPWARD for the whole program (tests/exact/e2m1.cc)
inline float __fadd_ru(float a, float b) { return a + b; }
inline float __fmaf_ru(float a, float b, float c) { return std::fma(a, b, c); }
#endif
