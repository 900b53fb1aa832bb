// CPU emulation of kgen::indexer_topk (force-included after tests/reader_shim/reader_shim.h): the warp votes,
// shared-memory atomics and float4 loads the reader's shim lacks, and thread-block clusters: the CTAs of a
// cluster run at once (tests/topk_shim/run_topk.cc: every thread of every CTA a std::thread), distributed shared
// memory is the same offset in another CTA's buffer, the cluster barrier one barrier of all their threads.
#pragma once

#include <atomic>
#include <cstdlib>
#include <optional>
#include <vector>

namespace kgen_cpu {
struct Cluster {
  std::barrier<> bar;
  std::vector<Cta*> ctas;  // by rank (blockIdx.x)
  explicit Cluster(int threads) : bar(threads) {}
};
inline thread_local Cluster* tl_cluster = nullptr;
}  // namespace kgen_cpu

#define KGEN_CLUSTER_SHIM 1
namespace kgen {
namespace cluster {
template <class T>
inline T* map(T* p, unsigned rank) {
  kgen_cpu::Cluster* c = kgen_cpu::tl_cluster;
  unsigned char* own = kgen_cpu::tl_cta->smem;
  const auto at = reinterpret_cast<unsigned char*>(const_cast<std::remove_const_t<T>*>(p)) - own;
  // only this CTA's dynamic shared memory has a twin in another CTA, and only ranks of the cluster exist
  if (c == nullptr || rank >= c->ctas.size() || at < 0 ||
      static_cast<size_t>(at) + sizeof(T) > kgen_cpu::tl_cta->smem_bytes)
    std::abort();
  return reinterpret_cast<T*>(c->ctas[rank]->smem + at);
}
// the split barrier: a thread's arrival waits in its token until the thread waits (at most one phase behind, as
// std::barrier allows: no phase completes without this thread's next arrival)
inline thread_local std::optional<std::barrier<>::arrival_token> tl_arrival;
inline void arrive(bool = true) { tl_arrival.emplace(kgen_cpu::tl_cluster->bar.arrive()); }
inline void wait() {
  if (!tl_arrival) std::abort();  // a wait with no arrival before it
  kgen_cpu::tl_cluster->bar.wait(std::move(*tl_arrival));
  tl_arrival.reset();
}
inline void sync(bool = true) { kgen_cpu::tl_cluster->bar.arrive_and_wait(); }
}  // namespace cluster
}  // namespace kgen

struct float4 { float x, y, z, w; };
inline float4 make_float4(float a, float b, float c, float d) { return {a, b, c, d}; }
inline int __popc(unsigned v) { return __builtin_popcount(v); }
inline int __ffs(unsigned v) { return __builtin_ffs(static_cast<int>(v)); }
inline int atomicAdd(int* p, int v) { return std::atomic_ref<int>(*p).fetch_add(v); }
inline int max(int a, int b) { return a > b ? a : b; }
inline unsigned __ballot_sync(unsigned, bool take) {
  kgen_cpu::Warp* w = kgen_cpu::tl_warp;
  w->slots[kgen_cpu::tl_thread.x & 31u] = take ? 1u : 0u;
  w->bar.arrive_and_wait();
  unsigned r = 0;
  for (int l = 0; l < 32; ++l) r |= w->slots[l] << l;
  w->bar.arrive_and_wait();
  return r;
}
inline int __shfl_down_sync(unsigned, int v, int o) {
  const int lane = static_cast<int>(kgen_cpu::tl_thread.x & 31u);
  return static_cast<int>(kgen_cpu::exchange(static_cast<uint32_t>(v), lane + o < 32 ? lane + o : lane));
}
inline int __reduce_add_sync(unsigned, int v) {  // every lane takes part, as the kernel calls it
  int sum = 0;
  for (int src = 0; src < 32; ++src) sum += static_cast<int>(kgen_cpu::exchange(static_cast<uint32_t>(v), src));
  return sum;
}
inline bool __any_sync(unsigned mask, bool take) { return __ballot_sync(mask, take) != 0; }
inline unsigned __match_any_sync(unsigned, unsigned v) {  // one publication round, as __ballot_sync's
  kgen_cpu::Warp* w = kgen_cpu::tl_warp;
  w->slots[kgen_cpu::tl_thread.x & 31u] = v;
  w->bar.arrive_and_wait();
  unsigned r = 0;
  for (int l = 0; l < 32; ++l) r |= (w->slots[l] == v ? 1u : 0u) << l;
  w->bar.arrive_and_wait();
  return r;
}
