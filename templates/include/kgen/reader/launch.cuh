// kgen::indexer_logits, the launch side of the kernel: which path this compilation runs
// (KGEN_READER_WGMMA), the dynamic shared memory, the wait for the grid before (PDL) and the launch
// bounds of the path.
#pragma once

#include "../memory.cuh"
#include "rules.cuh"

#ifndef KGEN_DYNAMIC_SMEM
#define KGEN_DYNAMIC_SMEM(name) extern __shared__ __align__(16) unsigned char name[]
#endif

// The sm_90a path (wgmma + cp.async) is compiled for sm_90a only (the arch-specific feature macro);
// elsewhere, and under the CPU emulation, the mma.sync path. kgen.arch.has_wgmma is the host's twin:
// it picks the launch (grid, shared memory) of the path the loaded cubin runs.
#if (defined(__CUDA_ARCH_FEAT_SM90_ALL) && !defined(KGEN_CPU_SHIM)) || defined(KGEN_CPU_SHIM_WGMMA)
#define KGEN_READER_WGMMA 1
#else
#define KGEN_READER_WGMMA 0
#endif

namespace kgen {

namespace reader {

// Programmatic dependent launch: where the spec asks for it (C::kPdl), the launch sets the programmatic
// stream serialization attribute (kgen.layout.uses_pdl, as for the writer), so this grid may start while
// the kernel before it (the writer storing the keys this one reads, or a top-k still reading the last
// logits) runs on. Nothing before this call reads an input or writes an output; after it, the grids
// before this one are complete and their memory visible. The next grid may start its own prologue now.
template <class C>
__device__ __forceinline__ void wait_for_predecessor() {
  if constexpr (C::kPdl != 0) {
    mem::pdl_wait();
    mem::pdl_launch_dependents();
  }
}

// __launch_bounds__' minimum CTAs per SM of the path this compilation runs (wgmma: the CTAs the
// launch plans per SM, so that registers never bind before shared memory does)
template <class C>
KGEN_HD constexpr int min_blocks() {
#if KGEN_READER_WGMMA
  constexpr long long blocks = C::kReaderWgmma ? C::kReaderWgMinBlocks : C::kReaderMinBlocks;
#else
  constexpr long long blocks = C::kReaderMinBlocks;
#endif
  static_assert(blocks >= 0 && blocks <= 32, "a CTA count per SM");
  return static_cast<int>(blocks);
}
// and its threads per CTA (the TMA variant: its consumer warpgroups and the producer warp)
template <class C>
KGEN_HD constexpr int threads() {
#if KGEN_READER_WGMMA && !defined(KGEN_CPU_SHIM)
  constexpr int n{C::kReaderWgmma ? wg_threads<C>() : C::kReaderWarps * 32};
#else
  constexpr int n{C::kReaderWarps * 32};
#endif
  return n;
}

// a key's slot in its page (page_size a power of two)
template <class C>
KGEN_HD constexpr int slot_of(int key) {
  return key & int{C::kPageSize - 1};
}

// Row offsets into the Params' arrays, in 64 bits (B x max_pages table entries, B x next_n x max_seq_len
// logits may pass 2^31): sequence b's block-table row, and the row of query token t of sequence b (of q's
// tokens, the weights' and the logits' rows).
template <class P>
__device__ __forceinline__ auto table_row(const P& p, int b) {
  return p.block_table + static_cast<long long>(b) * p.max_pages;
}
template <class P>
__device__ __forceinline__ long long token_row(const P& p, int b, int t) {
  return static_cast<long long>(b) * p.next_n + t;
}

// The visibility rule (kgen.score's): query token t0 + t (of its sequence's next_n) of a sequence of seq_len keys
// sees keys [0, visible_end): the keys up to its own, seq_len - (next_n - 1 - t0 - t) of them; a group of ntok
// tokens from t0 sees what its last one does, group_visible_end = visible_end(t0, ntok - 1). I: the type the caller
// computes in (64 bits where seq_len may be near 2^31). The order of the additions is part of each form: the
// compiler keeps it, so another order changes every reader's machine code.
template <class I = int, class P>
__device__ __forceinline__ I visible_end(const P& p, int seq_len, int t0, int t = 0) {
  return static_cast<I>(seq_len) - p.next_n + 1 + t0 + t;
}
template <class I = int, class P>
__device__ __forceinline__ I group_visible_end(const P& p, int seq_len, int t0, int ntok) {
  return static_cast<I>(seq_len) - p.next_n + t0 + ntok;
}

}  // namespace reader

}  // namespace kgen
