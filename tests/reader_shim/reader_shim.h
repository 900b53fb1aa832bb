// CPU emulation of kgen::indexer_logits (force-included before the kernel source): what the writer's
// shim (tests/cpu_shim) lacks for the reader. A CTA is its threads, all running at once: a warp is 32
// std::threads (shuffles through the writer shim's warp exchange), __syncthreads a barrier of the
// CTA, dynamic shared memory one buffer per CTA. mma.sync is emulated from the PTX ISA's fragment
// layouts (m16n8k16 bf16, m16n8k32 e4m3; row.col, fp32 accumulate): every lane publishes its A and
// B registers, each lane then computes its own four D elements. The sm_90a path's primitives, the TMA
// variant's mbarriers, named barriers and copies included, are at the end (kgen_cpu::wg_emulation).
#pragma once
#define KGEN_CPU_SHIM 1
#include "kgen_cpu_shim.h"

#include <algorithm>
#include <barrier>
#include <condition_variable>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>

#define __align__(n) alignas(n)
#define KGEN_DYNAMIC_SMEM(name) unsigned char* name = kgen_cpu::tl_cta->smem

inline float __int_as_float(int i) { float f; std::memcpy(&f, &i, 4); return f; }
inline int min(int a, int b) { return a < b ? a : b; }
inline long long min(long long a, long long b) { return a < b ? a : b; }
[[noreturn]] inline void __trap() { std::abort(); }

namespace kgen_cpu {
// an mbarrier (PTX ISA): a phase completes when its pending arrivals and its expected copy bytes are both
// down to zero; the next phase then expects `count` arrivals again
struct Mbarrier {
  int count = 0, pending = 0;
  long long tx = 0;
  unsigned phase = 0;  // completed phases
};
struct Cta {
  std::barrier<> bar;
  unsigned char* smem;
  size_t smem_bytes = 0;  // the launch's dynamic shared memory
  int threads;
  uint32_t wg_a[128][4];  // a warpgroup's A registers of one wgmma with A from registers (mma_bf16_ra)
  std::mutex mu;          // guards the mbarriers and the named barriers
  std::condition_variable phase_done;
  std::map<uint32_t, Mbarrier> mbarriers;  // by shared address
  std::map<uint32_t, std::unique_ptr<std::barrier<>>> named;  // bar.sync id -> its barrier (id 0: `bar`)
  explicit Cta(int n) : bar(n), smem(nullptr), threads(n), wg_a{} {}
};
struct MmaTable {
  std::barrier<> bar{32};
  uint32_t regs[32][6];
};
inline thread_local Cta* tl_cta = nullptr;
inline thread_local MmaTable* tl_mma = nullptr;
inline thread_local dim3_ tl_grid, tl_block_dim;

inline float bf16_value(uint32_t bits16) { return __uint_as_float((bits16 & 0xffffu) << 16); }
inline float e4m3_value(uint32_t code) {
  code &= 0xffu;
  const float mag = static_cast<float>(kgen_e4m3_value(code & 0x7fu));  // 0x7f (NaN) never written
  return code & 0x80u ? -mag : mag;
}

// publish this lane's A (4 regs) and B (2 regs); afterwards tbl->regs[l] holds lane l's
inline MmaTable* publish(const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  const int lane = static_cast<int>(tl_thread.x & 31u);
  MmaTable* t = tl_mma;
  for (int i = 0; i < 4; ++i) t->regs[lane][i] = a[i];
  t->regs[lane][4] = b0;
  t->regs[lane][5] = b1;
  t->bar.arrive_and_wait();
  return t;
}

inline float f16_value(uint32_t bits16) {
  _Float16 h;
  const unsigned short b = static_cast<unsigned short>(bits16 & 0xffffu);
  std::memcpy(&h, &b, 2);
  return static_cast<float>(h);
}

// PTX mma.m16n8kK (row.col, fp32 accumulate) on elements of B bits, E = 32/B to a register:
// A row r, col k: lane 4*(r%8) + (k%4E)/E, reg (k/4E)*2 + r/8, element k%E.
// B row k, col n: lane 4*n + (k%4E)/E, reg k/4E, element k%E.
// D row r, col n: lane 4*(r%8) + n/2, element (r/8)*2 + n%2.
// (m16n8k16 .bf16/.f16: B = 16; m16n8k32 .e4m3: B = 8.) Element e of a register is its bits B*e up.
template <int K, int B, float (*Value)(uint32_t)>
inline void mma_m16n8(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  constexpr int E = 32 / B, P = 4 * E;
  MmaTable* t = publish(a, b0, b1);
  const int lane = static_cast<int>(tl_thread.x & 31u);
  float out[4];
  for (int e = 0; e < 4; ++e) {
    const int r = (lane / 4) + 8 * (e / 2), n = 2 * (lane % 4) + e % 2;
    float acc = d[e];
    for (int k = 0; k < K; ++k) {
      const uint32_t aw = t->regs[4 * (r % 8) + (k % P) / E][(k / P) * 2 + r / 8];
      const uint32_t bw = t->regs[4 * n + (k % P) / E][4 + k / P];
      acc += Value(aw >> (B * (k % E))) * Value(bw >> (B * (k % E)));
    }
    out[e] = acc;
  }
  t->bar.arrive_and_wait();  // every lane has read the table before it is written again
  for (int e = 0; e < 4; ++e) d[e] = out[e];
}

inline void mma_m16n8k16_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  mma_m16n8<16, 16, bf16_value>(d, a, b0, b1);
}
inline void mma_m16n8k16_f16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  mma_m16n8<16, 16, f16_value>(d, a, b0, b1);
}
inline void mma_m16n8k32_e4m3(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  mma_m16n8<32, 8, e4m3_value>(d, a, b0, b1);
}
}  // namespace kgen_cpu

// cuda_fp8.h: two e4m3 (the low byte first) to two fp16, exactly
typedef unsigned short __nv_fp8x2_storage_t;
struct __half2_raw { unsigned short x, y; };
inline unsigned short kgen_e4m3_to_f16_bits(unsigned code) {
  const float v = kgen_cpu::e4m3_value(code);
  const _Float16 h = static_cast<_Float16>(v);  // exact: every e4m3 value is an fp16
  unsigned short b;
  std::memcpy(&b, &h, 2);
  return b;
}
inline __half2_raw __nv_cvt_fp8x2_to_halfraw2(__nv_fp8x2_storage_t x, __nv_fp8_interpretation_t) {
  return {kgen_e4m3_to_f16_bits(x & 0xffu), kgen_e4m3_to_f16_bits((x >> 8) & 0xffu)};
}

// PTX prmt (default mode) for selectors whose nibbles are below 8: byte n of the result is byte
// (s >> 4n) & 7 of the 8 bytes y:x
inline unsigned __byte_perm(unsigned x, unsigned y, unsigned s) {
  const unsigned long long both = (static_cast<unsigned long long>(y) << 32) | x;
  unsigned r = 0;
  for (int n = 0; n < 4; ++n) r |= static_cast<unsigned>((both >> (8 * ((s >> (4 * n)) & 7u))) & 0xffu) << (8 * n);
  return r;
}

// redux.sync add / or: every lane takes part (the kernel uses them for whole warps only)
inline unsigned __reduce_add_sync(unsigned, unsigned v) {
  unsigned r = 0;
  for (int src = 0; src < 32; ++src) r += kgen_cpu::exchange(v, src);
  return r;
}
inline unsigned __reduce_or_sync(unsigned, unsigned v) {
  unsigned r = 0;
  for (int src = 0; src < 32; ++src) r |= kgen_cpu::exchange(v, src);
  return r;
}

#define gridDim (kgen_cpu::tl_grid)
#define blockDim (kgen_cpu::tl_block_dim)
inline void __syncthreads() { kgen_cpu::tl_cta->bar.arrive_and_wait(); }
inline void __syncwarp(unsigned = 0xffffffffu) { kgen_cpu::tl_warp->bar.arrive_and_wait(); }
inline int __shfl_sync(unsigned, int v, int src) {
  return static_cast<int>(kgen_cpu::exchange(static_cast<uint32_t>(v), src));
}
// the launch's dynamic shared memory (kgen::mem::dynamic_smem_bytes): the emulated CTA's buffer
namespace kgen_cpu {
inline uint32_t dynamic_smem_bytes() { return static_cast<uint32_t>(tl_cta->smem_bytes); }
}  // namespace kgen_cpu
inline float2 operator*(float2 a, float b) { return {a.x * b, a.y * b}; }

// The sm_90a path's primitives (kgen::detail::wg, compiled in with KGEN_CPU_SHIM_WGMMA). A shared address is
// the offset into the CTA's buffer; cp.async copies at once (zeros past `bytes`), so commit / wait and the
// fences have nothing left to order. wgmma m64n64 and m64n128 (one warpgroup, A and B K-major in shared memory, 128-B
// swizzle) is computed by each thread for its own 32 (64) accumulators, from the PTX ISA's layouts: D element
// d[4j + 2i + c] of thread (warp w, lane = 4 gid + tig) is row 16w + gid + 8i, column 8j + 2tig + c;
// operand row r, byte b of a k-step lies at start + (r / 8) * stride + (r % 8) * 128 + b, with address
// bits [4, 7) XORed with bits [7, 10) (the swizzle); fp32 sums of the k-step's products.
namespace kgen_cpu::wg_emulation {
inline uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(static_cast<const unsigned char*>(p) - tl_cta->smem);
}
inline void copy(uint32_t dst, const void* src, uint32_t n, uint32_t bytes) {
  if (bytes > n || dst % n || dst + n > tl_cta->smem_bytes) std::abort();
  if (bytes) std::memcpy(tl_cta->smem + dst, src, bytes);
  std::memset(tl_cta->smem + dst + bytes, 0, n - bytes);
}
template <int Prefetch = 0>
inline void cp16(uint32_t dst, const void* src, uint32_t bytes) { copy(dst, src, 16, bytes); }
inline void cp4(uint32_t dst, const void* src) { copy(dst, src, 4, 4); }
inline void cp4z(uint32_t dst, const void* src, uint32_t bytes) { copy(dst, src, 4, bytes); }
inline void commit() {}
template <int N>
inline void wait() {}
inline void fence_async_proxy() {}
inline void mma_fence() {}
inline int opaque(int v) { return v; }
inline void mma_commit() {}
template <int N = 0>
inline void mma_wait() {}

inline const unsigned char* operand_byte(unsigned long long desc, int row, int byte) {
  if ((desc >> 62) != 1u) std::abort();  // the 128-B swizzle
  const uint32_t start = static_cast<uint32_t>(desc & 0x3fffu) << 4;
  const uint32_t stride = static_cast<uint32_t>((desc >> 32) & 0x3fffu) << 4;
  uint32_t a = start + static_cast<uint32_t>(row / 8) * stride + static_cast<uint32_t>(row % 8) * 128u + byte;
  a ^= ((a >> 7) & 7u) << 4;
  if (a >= tl_cta->smem_bytes) std::abort();
  return tl_cta->smem + a;
}
template <int ElemBytes, int N, class Value>
inline void mma(float (&d)[N], unsigned long long da, unsigned long long db, uint32_t accumulate, Value value) {
  const int tid = static_cast<int>(tl_thread.x & 127u), warp = tid / 32, gid = tid % 32 / 4, tig = tid % 4;
  for (int j = 0; j < N / 4; ++j)
    for (int i = 0; i < 2; ++i)
      for (int c = 0; c < 2; ++c) {
        const int m = 16 * warp + gid + 8 * i, n = 8 * j + 2 * tig + c;
        float sum = accumulate ? d[4 * j + 2 * i + c] : 0.0f;
        for (int b = 0; b < 32; b += ElemBytes) sum += value(operand_byte(da, m, b)) * value(operand_byte(db, n, b));
        d[4 * j + 2 * i + c] = sum;
      }
}
// m64n64 (d[32]) and m64n128 (d[64]: B's 128 rows, columns 64 .. 127 in d[32, 64))
template <int N>
inline void mma_bf16(float (&d)[N], unsigned long long da, unsigned long long db, uint32_t accumulate) {
  static_assert(N == 32 || N == 64, "m64n64 or m64n128");
  mma<2>(d, da, db, accumulate, [](const unsigned char* p) { return bf16_value(p[0] | (p[1] << 8)); });
}
template <int N>
inline void mma_e4m3(float (&d)[N], unsigned long long da, unsigned long long db, uint32_t accumulate) {
  static_assert(N == 32 || N == 64, "m64n64 or m64n128");
  mma<1>(d, da, db, accumulate, [](const unsigned char* p) { return e4m3_value(p[0]); });
}
// bf16 m64nNk16 with A from registers (N 32, 64 or 128 heads: d[N / 2]): the CTA is the one warpgroup
// (WgFp4Logits); every thread publishes its four A registers (PTX ISA: register i of lane 4 gid + tig in warp w
// holds row 16 w + gid + 8 (i % 2), k 2 tig + 8 (i / 2) and the next, the lower k in the low half), then computes
// its own accumulators from them.
template <int N>
inline void mma_bf16_ra(float (&d)[N], const uint32_t (&a)[4], unsigned long long db, uint32_t accumulate) {
  static_assert(N == 16 || N == 32 || N == 64, "m64n32, m64n64 or m64n128");
  Cta* cta = tl_cta;
  if (cta->threads != 128) std::abort();
  const int tid = static_cast<int>(tl_thread.x), warp = tid / 32, gid = tid % 32 / 4, tig = tid % 4;
  for (int i = 0; i < 4; ++i) cta->wg_a[tid][i] = a[i];
  cta->bar.arrive_and_wait();
  const auto a_value = [cta](int m, int k) {
    const uint32_t reg = cta->wg_a[32 * (m / 16) + 4 * (m % 8) + (k % 8) / 2][2 * (k / 8) + (m % 16) / 8];
    return bf16_value(reg >> (16 * (k % 2)));
  };
  for (int j = 0; j < N / 4; ++j)
    for (int i = 0; i < 2; ++i)
      for (int c = 0; c < 2; ++c) {
        const int m = 16 * warp + gid + 8 * i, n = 8 * j + 2 * tig + c;
        float sum = accumulate ? d[4 * j + 2 * i + c] : 0.0f;
        for (int k = 0; k < 16; ++k) {
          const unsigned char* b = operand_byte(db, n, 2 * k);
          sum += a_value(m, k) * bf16_value(b[0] | (b[1] << 8));
        }
        d[4 * j + 2 * i + c] = sum;
      }
  cta->bar.arrive_and_wait();  // every thread has read the registers before they are published again
}
// e4m3 m64n32k32 with A from registers (WgTmaLogits' fp8 tiles, 32 heads a group): a thread's accumulators are
// rows of its own warp, so the warp publishes its A registers (register i of lane 4 gid + tig: row gid + 8 (i % 2)
// of the warp's 16, bytes 4 tig + 16 (i / 2) .. + 3, the lowest k in the low byte) and each thread sums its own
inline void mma_e4m3_ra(float (&d)[16], const uint32_t (&a)[4], unsigned long long db, uint32_t accumulate) {
  MmaTable* t = publish(a, 0u, 0u);
  const int lane = static_cast<int>(tl_thread.x & 31u), gid = lane / 4, tig = lane % 4;
  for (int j = 0; j < 4; ++j)
    for (int i = 0; i < 2; ++i)
      for (int c = 0; c < 2; ++c) {
        const int n = 8 * j + 2 * tig + c;
        float sum = accumulate ? d[4 * j + 2 * i + c] : 0.0f;
        for (int k = 0; k < 32; ++k) {
          const uint32_t reg = t->regs[4 * gid + (k % 16) / 4][2 * (k / 16) + i];
          sum += e4m3_value(reg >> (8 * (k % 4))) * e4m3_value(*operand_byte(db, n, k));
        }
        d[4 * j + 2 * i + c] = sum;
      }
  t->bar.arrive_and_wait();  // every lane has read the table before it is written again
}
// ldmatrix .x4 (16-bit elements): every lane publishes its row address; lane l then reads, of matrix j, the row
// lane 8 j + l / 4 addressed, at byte 4 (l % 4) (a row address not 16-B aligned, or past the buffer, aborts)
inline void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
  MmaTable* t = publish({addr, 0u, 0u, 0u}, 0u, 0u);
  const int lane = static_cast<int>(tl_thread.x & 31u);
  for (int j = 0; j < 4; ++j) {
    const uint32_t row = t->regs[8 * j + lane / 4][0];  // a row of 16 B, 16-B aligned
    if (row % 16 || row + 16 > tl_cta->smem_bytes) std::abort();
    std::memcpy(&r[j], tl_cta->smem + row + 4 * (lane % 4), 4);
  }
  t->bar.arrive_and_wait();
}

// The TMA variant's primitives. An mbarrier is Cta::mbarriers[its shared address], waited for on a condition
// variable; a copy is done at once and completes its bytes on its barrier then. A tensor map is the
// emulation's own (tests/reader_emulate.py writes it into Params): the tensor's address, then its dims,
// byte strides and box as 64-bit words, innermost first; a box is copied with the 128-B swizzle the wgmma
// operand reads (and the descriptors above decode), zeros where it leaves the tensor.
struct TensorMap {
  const unsigned char* base;
  unsigned long long dims[4], strides[3], box[4];
};
inline void bar_complete(Cta* cta, Mbarrier& b) {  // under cta->mu
  if (b.pending == 0 && b.tx == 0) {
    ++b.phase;
    b.pending = b.count;
    cta->phase_done.notify_all();
  }
}
inline Mbarrier& bar_at(Cta* cta, uint32_t bar) {  // under cta->mu; an address never initialised aborts
  const auto it = cta->mbarriers.find(bar);
  if (it == cta->mbarriers.end()) std::abort();
  return it->second;
}
inline void bar_init(uint32_t bar, uint32_t arrivals) {
  Cta* cta = tl_cta;
  if (bar % 8 || bar + 8 > cta->smem_bytes) std::abort();
  std::lock_guard<std::mutex> lk(cta->mu);
  cta->mbarriers[bar] = Mbarrier{static_cast<int>(arrivals), static_cast<int>(arrivals), 0, 0};
}
inline void bar_init_fence() {}
inline void bar_arrive_tx(uint32_t bar, uint32_t bytes) {
  Cta* cta = tl_cta;
  std::lock_guard<std::mutex> lk(cta->mu);
  Mbarrier& b = bar_at(cta, bar);
  if (b.pending <= 0) std::abort();  // more arrivals than the phase expects
  b.tx += bytes;
  --b.pending;
  bar_complete(cta, b);
}
inline void bar_arrive(uint32_t bar) { bar_arrive_tx(bar, 0); }
inline void bar_copied(uint32_t bar, uint32_t bytes) {  // a copy's complete_tx
  Cta* cta = tl_cta;
  std::lock_guard<std::mutex> lk(cta->mu);
  Mbarrier& b = bar_at(cta, bar);
  b.tx -= bytes;
  if (b.tx < 0) std::abort();  // bytes no arrival expected
  bar_complete(cta, b);
}
// until the phase of parity `parity` has completed (the current phase's parity is the other one)
inline void bar_wait(uint32_t bar, uint32_t parity) {
  Cta* cta = tl_cta;
  std::unique_lock<std::mutex> lk(cta->mu);
  cta->phase_done.wait(lk, [&] { return (bar_at(cta, bar).phase & 1u) != parity; });
}
template <int N>
inline void setmaxnreg_dec() {}
template <int N>
inline void setmaxnreg_inc() {}
inline unsigned long long evict_first_policy() { return 0; }
inline void prefetch_map(const void*) {}
template <bool Hint = false>
inline void tma_load_4d(uint32_t dst, const void* map, uint32_t bar, int c0, int c1, int c2, int c3,
                        unsigned long long = 0) {
  const TensorMap& m = *static_cast<const TensorMap*>(map);
  const unsigned long long row = m.box[0], rows = m.box[1] * m.box[2] * m.box[3];
  if (m.base == nullptr || row != 128 || m.box[1] != 1 || m.box[3] != 1 || dst % 1024 ||
      dst + rows * row > tl_cta->smem_bytes)
    std::abort();  // the kernel's one box shape: 128-B rows of one chunk of one page
  for (unsigned long long r = 0; r < rows; ++r) {
    const unsigned long long key = static_cast<unsigned long long>(c2) + r;
    const bool in = c0 == 0 && static_cast<unsigned long long>(c1) < m.dims[1] && key < m.dims[2] &&
                    static_cast<unsigned long long>(c3) < m.dims[3];
    const unsigned char* src = m.base + c1 * m.strides[0] + key * m.strides[1] + c3 * m.strides[2];
    for (unsigned long long b = 0; b < row; ++b) {
      uint32_t a = dst + static_cast<uint32_t>(r * row + b);
      a ^= ((a >> 7) & 7u) << 4;
      tl_cta->smem[a] = in ? src[b] : 0;
    }
  }
  bar_copied(bar, static_cast<uint32_t>(rows * row));
}
template <bool Hint = false>
inline void bulk_load(uint32_t dst, const void* src, uint32_t bytes, uint32_t bar, unsigned long long = 0) {
  if (bytes % 16 || dst % 16 || reinterpret_cast<uintptr_t>(src) % 16 || dst + bytes > tl_cta->smem_bytes)
    std::abort();
  std::memcpy(tl_cta->smem + dst, src, bytes);
  bar_copied(bar, bytes);
}
// bar.sync id, threads: the threads that name the id meet (id 0 is __syncthreads')
inline void named_sync(uint32_t id, uint32_t threads) {
  Cta* cta = tl_cta;
  std::barrier<>* b = &cta->bar;
  if (id != 0) {
    std::lock_guard<std::mutex> lk(cta->mu);
    auto& slot = cta->named[id];
    if (!slot) slot = std::make_unique<std::barrier<>>(static_cast<std::ptrdiff_t>(threads));
    b = slot.get();
  }
  b->arrive_and_wait();
}
}  // namespace kgen_cpu::wg_emulation
