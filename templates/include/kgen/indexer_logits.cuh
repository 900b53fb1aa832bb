// kgen::indexer_logits: the read side of an indexer-key cache. For query token t of sequence b and
// every key s of b's context, reading the keys in place in their pages through the block table:
//
//     logits[b * next_n + t, s] = sum_h w[b * next_n + t, h] * relu(q[b, t, h] . key(b, s))   (visible s)
//                               = -inf                                                         (otherwise)
//
// key(b, s) is token s % page_size of page block_table[b, s / page_size], dequantized: bf16 as
// stored; fp8 e4m3 codes (widened to f16 in registers, exactly, as is an fp8 q) times the token's scale
// (scale > 0, so it is applied after the relu, once per key); fp4 e2m1 codes times their ue8m0 block
// scale, widened to bf16 in registers (exact). Products are exact, sums fp32 (mma.sync m16n8k16).
// Visibility (MTP, next_n query tokens per sequence, the engines' rule): key s is visible to token t
// iff s < seq_lens[b] - next_n + 1 + t. A visible key whose page index lies outside [0, num_pages)
// or whose table column lies outside [0, max_pages) is not read: its logit is NaN (the op's
// check_bounds option reports such inputs before the launch).
//
// Byte facts: the writer's config struct (kgen_cfg::<variant>, kgen/layout.py's constants) plus the
// reader's constants (kgen.reader_layout.reader_constants). Reader::Twins re-derives every fact the reader
// relies on from the raw spec values, so writer and reader cannot disagree about a byte.
//
// Two paths, one launch shape each (kgen.reader_layout.runs_wgmma decides on the host, KGEN_READER_WGMMA
// and kReaderWgmma in the kernel): on sm_90a, for bf16 and fp8 keys whose rows are whole 128-B chunks,
// the wgmma path (64-key tiles, q . k on wgmma, one wave of CTAs): staged by TMA from a producer warp
// (WgTmaLogits, reader/wg_tma_logits.cuh; kReaderWgTma) or by cp.async (WgLogits, reader/wg_logits.cuh),
// and for fp4 keys (ue8m0 per 32) by cp.async, each tile widened into the registers of a bf16 operand
// (WgFp4Logits); elsewhere (other archs, other layouts, the CPU emulation unless built with
// KGEN_CPU_SHIM_WGMMA) the mma.sync path (IndexerLogits, reader/mma_sync.cuh) described next.
//
// Work split: grid (x: slices of the context, y: sequence b, z: groups of query tokens); a CTA scores
// ceil(max_seq_len / gridDim.x) keys rounded up to whole iterations (kgen.reader_plan.reader_launch).
// A CTA stages its tokens' q (in the mma fragment order, see below) and weights in shared memory,
// then each warp scores tiles of 32 keys (two m16 tiles: M = keys, N = heads, K = head_dim) with
// mma.sync: keys are the A operand, loaded straight from the page into registers as 16-B chunks
// (no shared memory), q the B operand. The sum over heads is per lane (relu, * w), then over the
// 4 lanes of a quad; each lane then stores one logit, so a warp's 32 stores are one 128-B line.
//
// Fragment mapping (layout.py's comment): lane (gid = lane / 4, tig = lane % 4) owns chunk tig of
// every 64-B group of a row; mma k-step j of group g takes the lane's values [j * E, (j + 1) * E)
// of that chunk (E = 4 values, widened to the 16-bit operand) as k = {2tig, 2tig+1, 2tig+8, 2tig+9}
// of mma m16n8k16 -- for A and B alike, so every product pairs the same dimension of q and key.
#pragma once

// The parts, by role (templates/include/kgen/reader/, included in this order):
//   rules.cuh          the reader's constants and static_assert twins (namespace reader)
//   launch.cuh         the path this compilation runs, PDL, launch bounds
//   convert.cuh        fp8 / fp4 / ue8m0 codes to 16-bit operands and fp32 scales
//   mma_sync.cuh       the mma.sync path (IndexerLogits)
//   wg_primitives.cuh  sm_90a copies, TMA, barriers, wgmma and descriptors (namespace wg)
//   wg_epilogue.cuh    the sm_90a epilogue (wg::finish*)
//   wg_work.cuh        the sm_90a work split (wg::Work)
//   wg_stage.cuh       the sm_90a staging helpers (shared memory, q, a tile's pages)
//   wg_logits.cuh, wg_tma_logits.cuh, wg_fp4_logits.cuh
//                      the sm_90a pipelines (cp.async, TMA, fp4)
//
// The rendered constants are long long; a path takes each as the type it computes with, brace-initialized
// (`static constexpr int kTile{C::kReaderWgTileKeys};`): a value that does not fit is a compile error where
// a cast would wrap. Static data members are emitted into the cubin's global data, so a fact a path derives
// is a constexpr function (reader::slot_of), not a new member.
#include "reader/rules.cuh"
#include "reader/launch.cuh"
#include "reader/convert.cuh"
#include "reader/mma_sync.cuh"
#include "reader/wg_primitives.cuh"
#include "reader/wg_epilogue.cuh"
#include "reader/wg_work.cuh"
#include "reader/wg_stage.cuh"
#include "reader/wg_logits.cuh"
#include "reader/wg_tma_logits.cuh"
#include "reader/wg_fp4_logits.cuh"

namespace kgen {

template <class C>
__global__ void __launch_bounds__(reader::threads<C>(), reader::min_blocks<C>())
    indexer_logits(const __grid_constant__ typename C::Params p) {
  // the writer's rule twins first (a spec no rule accepts has no layout to read), then the reader's
  static_assert(sizeof(rules::Twins<C>) > 0, "instantiates the rule twins");
  static_assert(sizeof(typename reader::TwinsIf<rules::Twins<C>::run, C>::type) > 0, "the reader's twins");
  if constexpr (reader::TwinsIf<rules::Twins<C>::run, C>::type::run) {
#if KGEN_READER_WGMMA
    if constexpr (C::kReaderWgmma != 0 && C::kStoreDtype == Dtype::fp4_e2m1) {
      detail::WgFp4Logits<C>::run(p);
    } else if constexpr (C::kReaderWgmma != 0 && C::kReaderWgTma != 0) {
      detail::WgTmaLogits<C>::run(p);
    } else if constexpr (C::kReaderWgmma != 0) {
      detail::WgLogits<C>::run(p);
    } else {
      detail::IndexerLogits<C>::run(p);
    }
#else
    detail::IndexerLogits<C>::run(p);
#endif
  }
}

}  // namespace kgen
