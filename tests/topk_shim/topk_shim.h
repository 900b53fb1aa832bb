// CPU emulation of kgen::indexer_topk (force-included after tests/reader_shim/reader_shim.h): the warp votes,
// shared-memory atomics and float4 loads the reader's shim lacks. A CTA's threads run at once (std::threads),
// CTAs one after another, so the kernel's static shared state is a function-local static.
#pragma once

#include <atomic>

#define KGEN_STATIC_SMEM static

struct float4 { float x, y, z, w; };
inline float4 make_float4(float a, float b, float c, float d) { return {a, b, c, d}; }
inline int __popc(unsigned v) { return __builtin_popcount(v); }
inline int __ffs(unsigned v) { return __builtin_ffs(static_cast<int>(v)); }
inline int atomicAdd(int* p, int v) { return std::atomic_ref<int>(*p).fetch_add(v); }
inline unsigned __ballot_sync(unsigned, bool take) {
  kgen_cpu::Warp* w = kgen_cpu::tl_warp;
  w->slots[kgen_cpu::tl_thread.x & 31u] = take ? 1u : 0u;
  w->bar.arrive_and_wait();
  unsigned r = 0;
  for (int l = 0; l < 32; ++l) r |= w->slots[l] << l;
  w->bar.arrive_and_wait();
  return r;
}
inline int __shfl_sync(unsigned, int v, int src) {
  return static_cast<int>(kgen_cpu::exchange(static_cast<uint32_t>(v), src));
}
inline int __shfl_down_sync(unsigned, int v, int o) {
  const int lane = static_cast<int>(kgen_cpu::tl_thread.x & 31u);
  return static_cast<int>(kgen_cpu::exchange(static_cast<uint32_t>(v), lane + o < 32 ? lane + o : lane));
}
inline bool __any_sync(unsigned mask, bool take) { return __ballot_sync(mask, take) != 0; }
