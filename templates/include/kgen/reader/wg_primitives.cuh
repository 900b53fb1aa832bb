// kgen::indexer_logits, the sm_90a primitives (namespace wg): cp.async copies, the TMA tensor and bulk
// copies, mbarriers, named barriers, the wgmma instructions and their shared-memory descriptors, the
// 128-B swizzle. Under the CPU emulation (KGEN_CPU_SHIM) the copies and barriers are tests/reader_shim's.
#pragma once

#include "launch.cuh"

namespace kgen {

namespace detail {

#if KGEN_READER_WGMMA
namespace wg {

#if defined(KGEN_CPU_SHIM)
// The CPU emulation of this path (tests/reader_shim, built with KGEN_CPU_SHIM_WGMMA): the same primitives
// in software (shared addresses as offsets into the CTA's buffer, copies done at once, wgmma computed by
// each thread from the descriptors' swizzled layout).
using namespace kgen_cpu::wg_emulation;
#else
__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
// 16 B global -> shared, bypassing L1; `bytes` 0 reads nothing and writes zeros. Prefetch: the L2 fetches
// the aligned 128 or 256 B around the address (the key rows of a tile are consecutive in their page)
template <int Prefetch = 0>
__device__ __forceinline__ void cp16(uint32_t dst, const void* src, uint32_t bytes) {
  if constexpr (Prefetch == 256) {
    asm volatile("cp.async.cg.shared.global.L2::256B [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(bytes)
                 : "memory");
  } else if constexpr (Prefetch == 128) {
    asm volatile("cp.async.cg.shared.global.L2::128B [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(bytes)
                 : "memory");
  } else {
    static_assert(Prefetch == 0, "L2 prefetch of 0, 128 or 256 B");
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(bytes) : "memory");
  }
}
__device__ __forceinline__ void cp4(uint32_t dst, const void* src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(dst), "l"(src) : "memory");
}
// 4 B global -> shared; `bytes` 0 reads nothing and writes zeros
__device__ __forceinline__ void cp4z(uint32_t dst, const void* src, uint32_t bytes) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src), "r"(bytes) : "memory");
}
__device__ __forceinline__ void commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
template <int N>
__device__ __forceinline__ void wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}
// shared memory written by the generic proxy (cp.async, st.shared) before wgmma (the async proxy) reads it
__device__ __forceinline__ void fence_async_proxy() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
__device__ __forceinline__ void mma_fence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void mma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
// until at most N committed groups are pending
template <int N = 0>
__device__ __forceinline__ void mma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// `v`, as a value the compiler cannot see through: what is computed from it inside a loop stays inside (the
// TMA variant's q staging, whose per-thread addresses hoisted out of the tile loop held about ten registers
// for the whole loop: the pair cubin 166 -> 122)
__device__ __forceinline__ int opaque(int v) {
  asm volatile("mov.b32 %0, %0;\n" : "+r"(v));
  return v;
}

// The TMA variant's primitives: mbarriers in shared memory (8 B each, addressed as shared offsets), the
// tensor copy of one box through the cache's tensor map (in the kernel's parameter space), a bulk copy.
__device__ __forceinline__ void bar_init(uint32_t bar, uint32_t arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(arrivals) : "memory");
}
// the initialized barriers visible to the other threads and to the async proxy (the copies complete on them)
__device__ __forceinline__ void bar_init_fence() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
__device__ __forceinline__ void bar_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
// arrive, and expect `bytes` more of copies completing on this phase
__device__ __forceinline__ void bar_arrive_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
// the calling warpgroup's registers per thread lowered / raised to N (every thread of the warpgroup alike)
template <int N>
__device__ __forceinline__ void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
}
template <int N>
__device__ __forceinline__ void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
}
// until the phase of parity `parity` has completed
__device__ __forceinline__ void bar_wait(uint32_t bar, uint32_t parity) {
  asm volatile(
      "{\n.reg .pred done;\nWAIT:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT;\n}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}
// an L2 policy for data read once: its lines are the first the L2 evicts
__device__ __forceinline__ unsigned long long evict_first_policy() {
  unsigned long long policy;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(policy));
  return policy;
}
// box (c0, c1, c2, c3) of the tensor map at `map` into shared memory at `dst`, completing on `bar`; with
// `Hint`, under the L2 policy `policy`
template <bool Hint = false>
__device__ __forceinline__ void tma_load_4d(uint32_t dst, const void* map, uint32_t bar, int c0, int c1, int c2, int c3,
                                            unsigned long long policy = 0) {
  if constexpr (Hint) {
    asm volatile(
        "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1, "
        "{%3, %4, %5, %6}], [%2], %7;\n" ::"r"(dst),
        "l"(map), "r"(bar), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "l"(policy)
        : "memory");
  } else {
    asm volatile(
        "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5, "
        "%6}], [%2];\n" ::"r"(dst),
        "l"(map), "r"(bar), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
        : "memory");
  }
}
// the tensor map's 128 B fetched ahead of the first copy that reads it
__device__ __forceinline__ void prefetch_map(const void* map) {
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(map) : "memory");
}
// `bytes` (a multiple of 16, both addresses 16-B aligned) global -> shared, completing on `bar`
template <bool Hint = false>
__device__ __forceinline__ void bulk_load(uint32_t dst, const void* src, uint32_t bytes, uint32_t bar,
                                          unsigned long long policy = 0) {
  if constexpr (Hint) {
    asm volatile(
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], %2, [%3], %4;\n" ::
            "r"(dst),
        "l"(src), "r"(bytes), "r"(bar), "l"(policy)
        : "memory");
  } else {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(dst),
                 "l"(src), "r"(bytes), "r"(bar)
                 : "memory");
  }
}
// a barrier of `threads` threads (a multiple of 32) with id `id` (0 is __syncthreads')
__device__ __forceinline__ void named_sync(uint32_t id, uint32_t threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
#endif

// Shared-memory matrix descriptor of a K-major operand in the 128-B swizzle: start address, leading
// byte offset 16 (unused by a K-major swizzled operand), stride 1024 B between 8-row groups, mode 1.
// Kept as its two words: the low one (the address field, addr / 16 in 14 bits, and the leading byte
// offset) and the constant high one (stride, mode). An operand `bytes` further on is the low word plus
// bytes / 16: a shared address stays below 256 KB, so the field never carries; the main loop adds a
// stage's and a k-step's offsets to one low word instead of re-deriving each descriptor.
__device__ __forceinline__ uint32_t desc_sw128_lo(uint32_t addr) {
  return ((addr & 0x3FFFFu) >> 4) | (1u << 16);
}
__device__ __forceinline__ unsigned long long desc_sw128_of(uint32_t lo) {
  return (static_cast<unsigned long long>((1024 >> 4) | (1u << 30)) << 32) | lo;
}

#if !defined(KGEN_CPU_SHIM)
// The operands of one m64nN wgmma with fp32 accumulators d[N / 2] (%0 .. %(N / 2 - 1)), descriptors a, b
// and the accumulate flag (the three after them): both instructions of each N take the same list.
#define KGEN_WGMMA_D16(o)                                                                                     \
  "+f"(d[o]), "+f"(d[o + 1]), "+f"(d[o + 2]), "+f"(d[o + 3]), "+f"(d[o + 4]), "+f"(d[o + 5]), "+f"(d[o + 6]), \
      "+f"(d[o + 7]), "+f"(d[o + 8]), "+f"(d[o + 9]), "+f"(d[o + 10]), "+f"(d[o + 11]), "+f"(d[o + 12]),      \
      "+f"(d[o + 13]), "+f"(d[o + 14]), "+f"(d[o + 15])
#define KGEN_WGMMA_M64N64_OPERANDS : KGEN_WGMMA_D16(0), KGEN_WGMMA_D16(16) : "l"(a), "l"(b), "r"(accumulate)
#define KGEN_WGMMA_M64N128_OPERANDS \
  : KGEN_WGMMA_D16(0), KGEN_WGMMA_D16(16), KGEN_WGMMA_D16(32), KGEN_WGMMA_D16(48) : "l"(a), "l"(b), "r"(accumulate)
#define KGEN_WGMMA_ACCUMULATORS                                                                                     \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, " \
  "%24, %25, %26, %27, %28, %29, %30, %31}"
#define KGEN_WGMMA_ACCUMULATORS_N128                                                                                \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, " \
  "%24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, "  \
  "%46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}"

// d (+)= A * B for one 32-B k-step: accumulate = 0 overwrites d. m64n64: one token's 64 heads; m64n128: two
// tokens' (their q rows consecutive, one B operand of 128 rows), d[0, 32) the first's, d[32, 64) the second's
__device__ __forceinline__ void mma_e4m3(float (&d)[32], unsigned long long a, unsigned long long b,
                                         uint32_t accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3 " KGEN_WGMMA_ACCUMULATORS
      ", %32, %33, p, 1, 1;\n}\n" KGEN_WGMMA_M64N64_OPERANDS);
}
__device__ __forceinline__ void mma_bf16(float (&d)[32], unsigned long long a, unsigned long long b,
                                         uint32_t accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " KGEN_WGMMA_ACCUMULATORS
      ", %32, %33, p, 1, 1, 0, 0;\n}\n" KGEN_WGMMA_M64N64_OPERANDS);
}
__device__ __forceinline__ void mma_e4m3(float (&d)[64], unsigned long long a, unsigned long long b,
                                         uint32_t accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 " KGEN_WGMMA_ACCUMULATORS_N128
      ", %64, %65, p, 1, 1;\n}\n" KGEN_WGMMA_M64N128_OPERANDS);
}
__device__ __forceinline__ void mma_bf16(float (&d)[64], unsigned long long a, unsigned long long b,
                                         uint32_t accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 " KGEN_WGMMA_ACCUMULATORS_N128
      ", %64, %65, p, 1, 1, 0, 0;\n}\n" KGEN_WGMMA_M64N128_OPERANDS);
}
// the same bf16 k16 steps with A from registers (fp4 keys, WgFp4Logits): a[0 .. 3] the thread's fragment of the
// 64 x 16 A tile (PTX ISA: rows 16 warp + gid + 8 (i % 2), k 2 tig + 8 (i / 2) + {0, 1} in register i)
#define KGEN_WGMMA_A_REGS "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3])
__device__ __forceinline__ void mma_bf16_ra(float (&d)[32], const uint32_t (&a)[4], unsigned long long b,
                                            uint32_t accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " KGEN_WGMMA_ACCUMULATORS
      ", {%32, %33, %34, %35}, %36, p, 1, 1, 0;\n}\n"
      : KGEN_WGMMA_D16(0), KGEN_WGMMA_D16(16)
      : KGEN_WGMMA_A_REGS, "l"(b), "r"(accumulate));
}
__device__ __forceinline__ void mma_bf16_ra(float (&d)[64], const uint32_t (&a)[4], unsigned long long b,
                                            uint32_t accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 " KGEN_WGMMA_ACCUMULATORS_N128
      ", {%64, %65, %66, %67}, %68, p, 1, 1, 0;\n}\n"
      : KGEN_WGMMA_D16(0), KGEN_WGMMA_D16(16), KGEN_WGMMA_D16(32), KGEN_WGMMA_D16(48)
      : KGEN_WGMMA_A_REGS, "l"(b), "r"(accumulate));
}
// bf16 m64n32k16 with A from registers (fp4 tiles converted once for every MTP token, WgFp4Logits; d[16]: 32 of a
// token's heads)
__device__ __forceinline__ void mma_bf16_ra(float (&d)[16], const uint32_t (&a)[4], unsigned long long b,
                                            uint32_t accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %21, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}"
      ", {%16, %17, %18, %19}, %20, p, 1, 1, 0;\n}\n"
      : KGEN_WGMMA_D16(0)
      : KGEN_WGMMA_A_REGS, "l"(b), "r"(accumulate));
}
// e4m3 m64n32k32 with A from registers (fp8 tiles loaded once for every MTP token, WgTmaLogits; d[16]: 32 of a
// token's heads): the same fragment as bf16's k16 in bytes (register i: row 16 warp + gid + 8 (i % 2), bytes
// 4 tig + 16 (i / 2) + {0 .. 3}, the lowest k in the low byte)
__device__ __forceinline__ void mma_e4m3_ra(float (&d)[16], const uint32_t (&a)[4], unsigned long long b,
                                            uint32_t accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %21, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n32k32.f32.e4m3.e4m3 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}"
      ", {%16, %17, %18, %19}, %20, p, 1, 1;\n}\n"
      : KGEN_WGMMA_D16(0)
      : KGEN_WGMMA_A_REGS, "l"(b), "r"(accumulate));
}
// four 8 x 8 matrices of 16-bit elements from shared memory: lane l gives the address of row l % 8 of matrix l / 8
// and receives, of matrix j, row l / 4's bytes 4 (l % 4) .. + 3 in r[j]
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr)
               : "memory");
}
#undef KGEN_WGMMA_A_REGS
#undef KGEN_WGMMA_D16
#undef KGEN_WGMMA_M64N64_OPERANDS
#undef KGEN_WGMMA_M64N128_OPERANDS
#undef KGEN_WGMMA_ACCUMULATORS
#undef KGEN_WGMMA_ACCUMULATORS_N128
#endif

// byte offset of 16-B column c of row r in a 128-B swizzled chunk (8 rows x 128 B repeat)
__device__ __forceinline__ uint32_t swizzled128(int r, int c) {
  return static_cast<uint32_t>(r * 128 + ((c ^ (r & 7)) << 4));
}

// the accumulators are read only after the wait: no instruction may move above it
template <int N>
__device__ __forceinline__ void keep(float (&d)[N]) {
#if !defined(KGEN_CPU_SHIM)
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
#endif
}

// the row sums are computed here: what reads the accumulators behind them stays above the next wgmma
__device__ __forceinline__ void keep_sums(float& a, float& b, float& c, float& d) {
#if !defined(KGEN_CPU_SHIM)
  asm volatile("" : "+f"(a), "+f"(b), "+f"(c), "+f"(d)::"memory");
#endif
}

// the wgmma k-steps of one 128-B chunk of a row: 32 B each (k32 e4m3, k16 bf16)
KGEN_HD constexpr int chunk_steps() {
  return reader::kWgChunkBytes / 32;
}

// acc (+)= a 64-key tile's A operand times q's B operand, over `Chunks` 128-B chunks of their rows (the A
// chunks `a_step`, q's `b_step` descriptor units apart from `a_lo`, `b_lo`), four wgmma k-steps of 32 B each
// (k32 e4m3 for `Fp8`, else k16 bf16); `add` false: the first k-step overwrites acc. Waits for the group.
// `N` accumulators per thread: 32 (m64n64, one token), 64 (m64n128, two tokens' q rows from b_lo on).
template <bool Fp8, int Chunks, int N = 32>
__device__ __forceinline__ void tile_mma(float (&acc)[N], uint32_t a_lo, uint32_t a_step, uint32_t b_lo,
                                         uint32_t b_step, bool add) {
  mma_fence();
#pragma unroll
  for (int kc = 0; kc < Chunks; ++kc) {
#pragma unroll
    for (int k = 0; k < chunk_steps(); ++k) {
      const unsigned long long da = desc_sw128_of(a_lo + kc * a_step + 2 * k);
      const unsigned long long db = desc_sw128_of(b_lo + kc * b_step + 2 * k);
      const uint32_t accumulate = add || kc > 0 || k > 0 ? 1u : 0u;
      if constexpr (Fp8) {
        mma_e4m3(acc, da, db, accumulate);
      } else {
        mma_bf16(acc, da, db, accumulate);
      }
    }
  }
  mma_commit();
  mma_wait();
  keep(acc);
}

// A 64-key tile of fp8 rows (one 128-B chunk each, 128-B swizzled from `tile`, 1024-B aligned) into the wgmma A
// registers of the calling warp's rows 16 warp .. + 15, k-step s in a[s]: one ldmatrix a k-step, whose matrices j
// (rows + 8 (j % 2), bytes + 16 (j / 2) of the k-step's 32) are the fragment's registers (mma_e4m3_ra)
template <int Steps>
__device__ __forceinline__ void load_key_fragments(uint32_t (&a)[Steps][4], uint32_t tile, int warp, int lane) {
  const int j = lane / 8;  // the matrix whose row this lane addresses
  const int row = 16 * warp + 8 * (j % 2) + lane % 8;
#pragma unroll
  for (int s = 0; s < Steps; ++s) ldmatrix_x4(a[s], tile + swizzled128(row, 2 * s + j / 2));
}

// acc = the tile in `a` (load_key_fragments) times 32 heads of q, the B operand's rows from `b_lo` on (one 128-B
// chunk a row), as one committed group; mma_wait tells when it is done
template <int Steps>
__device__ __forceinline__ void issue_mma_ra(float (&acc)[16], const uint32_t (&a)[Steps][4], uint32_t b_lo) {
  mma_fence();
#pragma unroll
  for (int s = 0; s < Steps; ++s) mma_e4m3_ra(acc, a[s], desc_sw128_of(b_lo + 2 * s), s > 0 ? 1u : 0u);
  mma_commit();
}

}  // namespace wg
#endif  // KGEN_READER_WGMMA

}  // namespace detail

}  // namespace kgen
