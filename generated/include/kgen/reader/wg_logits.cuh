// kgen::indexer_logits, the sm_90a pipeline by cp.async (WgLogits): bf16 and fp8 keys whose rows are
// whole 128-B chunks.
//
// The sm_90a path. A CTA is one warpgroup. Per tile of 64 consecutive keys (wgmma M = 64: the key rows,
// K-major, the A operand) and query token (N = 64 heads: q, K-major, the B operand, staged once), the
// q.k products of one 128-B chunk of the rows are 4 wgmma k-steps of 32 B (m64n64k32 e4m3 for fp8,
// m64n64k16 bf16 for bf16) into 32 fp32 accumulators per thread; with kReaderWgPairs two MTP tokens share
// one m64n128 group (N = their 2 x 64 heads, 64 accumulators). The rows' chunks are staged by
// cp.async (16 B per thread and row, zero-filled for keys not read) into a ring of kReaderWgStages
// shared-memory stages; one pipeline step (one barrier pair, one cp.async group) covers kStepLoads of
// them: two tiles of 128-B rows, or a whole tile of longer rows, when the ring holds two such steps
// (an even ring of 4 or more), else one chunk. Several CTAs per SM hide each other's epilogues. Keys
// are read in place: every row's page comes from the block table (any page size).
#pragma once

#include "wg_epilogue.cuh"
#include "wg_stage.cuh"
#include "wg_work.cuh"

namespace kgen {

namespace detail {

#if KGEN_READER_WGMMA
template <class C>
struct WgLogits {
  static constexpr int H{C::kReaderHeads};
  static constexpr int kTile{C::kReaderWgTileKeys};
  static constexpr int kChunkBytes{C::kReaderWgChunkBytes};
  static constexpr int kChunks{C::kReaderWgChunks};
  static constexpr int kStages{C::kReaderWgStages};
  static constexpr int kTokens{C::kReaderWgTokensPerCta};
  static constexpr int kAlign{C::kReaderWgAlign};
  static constexpr int kThreads{C::kReaderWarps * 32};
  static constexpr bool kFp8 = C::kStoreDtype == Dtype::fp8_e4m3;
  static constexpr bool kScaled = C::kScaleKind != ScaleKind::none;
  static constexpr int kStageBytes = kTile * kChunkBytes;  // one chunk of the tile's rows
  static constexpr int kQChunkBytes = H * kChunkBytes;     // one chunk of a token's q rows
  static constexpr int kColumns = kChunkBytes / 16;        // 16-B columns of a chunk row
  static constexpr int kLoadRows = kThreads / kColumns;    // rows one pass of the CTA's threads stages
  static constexpr int kRowsPerThread = kTile / kLoadRows;
  static constexpr long long kRowBytes = C::kRowBytes;
  static constexpr long long kPageBytes = C::kPageBytes;
  static constexpr int kPageShift{C::kPageShift};
  static constexpr int kL2Prefetch{C::kReaderWgL2Prefetch};
  // Loads per pipeline step (each step pays one pair of barriers, one commit and one wait, and its
  // loads' tiles share them): two 64-key tiles when a tile is one load (128-B rows) and the ring holds
  // two steps or more; a whole tile when it is several loads and the ring holds two tiles; else one load.
  static constexpr int kStepLoads = kChunks == 1 ? (kStages % 2 == 0 && kStages >= 4 ? 2 : 1)
                                                 : (kStages % kChunks == 0 && kStages >= 2 * kChunks ? kChunks : 1);
  static constexpr int kStepTiles = kChunks == 1 ? kStepLoads : 1;  // tiles whose pages are looked up ahead
  static constexpr int kRingSteps = kStages / kStepLoads;
  // two MTP tokens per m64n128 group (kReaderWgPairs; one chunk per row, so q's tokens are consecutive)
  static constexpr bool kPairs = C::kReaderWgPairs != 0 && kTokens > 1;

  static_assert(kThreads == 128, "[wgmma] one warpgroup per CTA");
  static_assert(H == 64 && kTile == 64, "[wgmma] m64n64: 64 keys x 64 heads per instruction");
  static_assert(kChunkBytes == 128 && kRowBytes == kChunks * kChunkBytes, "[wgmma] rows of whole 128-B swizzle atoms");
  static_assert(reader::q_bytes(C::kStoreDtype) * C::kHeadDim == kRowBytes, "q rows are key rows' width");
  static_assert(kStageBytes % kAlign == 0 && kQChunkBytes % kAlign == 0, "[wgmma] operand bases 1024-B aligned");
  static_assert(kChunks == 1 || kTokens == 1, "several chunks per row: one token's accumulators per CTA");
  static_assert(kStages >= 2 && kTile % kLoadRows == 0, "staging shape");
  static_assert(kStages % kStepLoads == 0 && kRingSteps >= 2 && (kStepLoads % kChunks == 0 || kStepLoads == 1),
                "a step's loads are whole tiles (or one load) and the ring holds two steps or more");
  static_assert(reader::wg_smem<C>(kTokens) <= C::kReaderMaxSmemBytes, "[wgmma] shared memory within 227 KB");

  // byte offset of 16-B column c of row r in a 128-B swizzled chunk (8 rows x 128 B repeat)
  __device__ static __forceinline__ uint32_t swizzled(int r, int c) { return wg::swizzled128(r, c); }

  struct Smem {
    unsigned char* keys;  // kStages x kStageBytes
    unsigned char* q;     // ntok x kChunks x kQChunkBytes
    float* row_info;      // kStages x kTile: scale (or 1), NaN for a row whose page is bad
    float* w;             // ntok x H
  };

  using Pages = wg::TilePages<C, kLoadRows, kRowsPerThread>;
  static constexpr bool kWholePages = C::kPageSize % kTile == 0;

  using Work = wg::Work<C, kTokens, kTile>;

  // Stages chunk kc of the tile `pg` looked up (load u of the CTA) into stage u % kStages: the thread's
  // 16-B column of its rows, and with the last chunk each row's info word.
  __device__ static __forceinline__ void issue(const typename C::Params& p, const Smem& sm, int u, const Pages& pg,
                                               int tid) {
    const int kc = u % kChunks, s = u % kStages;
    const int k0 = pg.k0;
    const int col = tid % kColumns, r0 = tid / kColumns;
    // row r0 + j * kLoadRows lands at dst + j * kDstRowStep (the swizzle repeats every 8 rows)
    const uint32_t dst = wg::smem_addr(sm.keys + s * kStageBytes) + swizzled(r0, col);
    constexpr uint32_t kDstRowStep = kLoadRows * kChunkBytes;
    static_assert(kLoadRows % 8 == 0, "a thread's rows share their swizzle phase");
    const int slot0 = reader::slot_of<C>(k0);
    float* info = sm.row_info + s * kTile;
    if (kWholePages && pg.whole >= 0) {
      const uint8_t* page = p.cache + pg.whole * kPageBytes;
      const uint8_t* src = page + (slot0 + r0) * kRowBytes + kc * kChunkBytes + col * 16;
#pragma unroll
      for (int j = 0; j < kRowsPerThread; ++j) {
        wg::cp16<kL2Prefetch>(dst + j * kDstRowStep, src + j * kLoadRows * kRowBytes, 16u);
      }
      if (kc == kChunks - 1) {
        if constexpr (kScaled && C::kScaleStride == 4 && C::kScaleRegionOffset % 16 == 0) {
          // the tile's 64 scales are 256 consecutive bytes (slot0 is a multiple of 64): 16 copies of 16 B
          if (tid < kTile / 4) {
            wg::cp16(wg::smem_addr(info + 4 * tid), page + C::kScaleRegionOffset + (slot0 + 4 * tid) * 4, 16u);
          }
        } else if constexpr (kScaled) {
          if (tid < kTile)
            wg::cp4(wg::smem_addr(info + tid), page + C::kScaleRegionOffset + (slot0 + tid) * C::kScaleStride);
        } else {
          if (tid < kTile) info[tid] = 1.0f;
        }
      }
      return;
    }
#pragma unroll
    for (int j = 0; j < kRowsPerThread; ++j) {
      const int r = r0 + j * kLoadRows;
      const int slot = reader::slot_of<C>(k0 + r);
      const uint8_t* page = pg.rows[j] >= 0 ? p.cache + pg.rows[j] * kPageBytes : nullptr;
      const uint8_t* src = page ? page + slot * kRowBytes + kc * kChunkBytes + col * 16 : p.cache;
      wg::cp16(dst + j * kDstRowStep, src, page ? 16u : 0u);
      if (kc == kChunks - 1 && col == 0) {
        if (kScaled && page != nullptr) {
          wg::cp4(wg::smem_addr(info + r), page + C::kScaleRegionOffset + slot * C::kScaleStride);
        } else {
          info[r] = pg.rows[j] == -2 ? __int_as_float(0x7fc00000) : 1.0f;
        }
      }
    }
  }

  __device__ static void run(const typename C::Params& p) {
    KGEN_DYNAMIC_SMEM(smem);
    const int tid = static_cast<int>(threadIdx.x), lane = tid % 32, warp = tid / 32;
    const int gid = lane / 4, tig = lane % 4;
    const int ntok_max = min(kTokens, p.next_n);  // the launch's shared memory holds this many tokens' q

    Smem sm;
    sm.keys = wg::aligned_smem<C>(smem, ntok_max);
    sm.q = sm.keys + kStages * kStageBytes;
    sm.row_info = reinterpret_cast<float*>(sm.q + ntok_max * kChunks * kQChunkBytes);
    sm.w = sm.row_info + kStages * kTile;

    reader::wait_for_predecessor<C>();                        // before the first read of an input
    const typename Work::Share share = Work::share(p, lane);  // this CTA's tiles (every warp alike)
    const int nloads = share.count * kChunks;
    const int r0 = tid / kColumns;

    // pages[i]: tile i of the next step to issue (the table is read one step ahead of the copies), looked
    // up in order by `ahead`
    typename Work::Cursor ahead(p, share);
    int looked = 0;
    Pages pages[kStepTiles];
    const auto look = [&](Pages& pg) {
      pg.lookup(p, ahead, looked < share.count, r0);
      if (looked++ < share.count) ahead.advance(p);
    };
#pragma unroll
    for (int i = 0; i < kStepTiles; ++i) look(pages[i]);
    // step v's loads are v * kStepLoads ..; steps 0 .. kRingSteps - 2 now; step v + kRingSteps - 1 is
    // issued in iteration v, before its wait, into the stages step v - 1 used: kRingSteps steps in
    // flight while the CTA waits for the oldest
    const int nsteps = (nloads + kStepLoads - 1) / kStepLoads;
    const auto issue_step = [&](int step) {
#pragma unroll
      for (int g = 0; g < kStepLoads; ++g) {
        const int u = step * kStepLoads + g;
        if (u < nloads) {
          issue(p, sm, u, pages[g / kChunks], tid);
          if (u % kChunks == kChunks - 1) look(pages[g / kChunks]);
        }
      }
    };
#pragma unroll
    for (int v = 0; v < kRingSteps - 1; ++v) {
      if (v < nsteps) issue_step(v);
      wg::commit();
    }

    // the tiles scored, in order; q and the weights are those of `qpair` (staged when the pair changes)
    typename Work::Cursor at(p, share);
    int qpair = -1;
    const uint32_t keys_lo = wg::desc_sw128_lo(wg::smem_addr(sm.keys)), q_lo = wg::desc_sw128_lo(wg::smem_addr(sm.q));
    float acc[32];
#pragma unroll 1
    for (int v = 0; v < nsteps; ++v) {
      const int next = v + kRingSteps - 1;
      if (next < nsteps) {
        if (v > 0) __syncthreads();  // every thread is done with step v - 1's stages (and their row info)
        issue_step(next);
      }
      wg::commit();
      wg::wait<kRingSteps - 1>();  // step v has landed (this thread's part) ...
      wg::fence_async_proxy();
      __syncthreads();  // ... everyone's
#pragma unroll
      for (int g = 0; g < kStepLoads; ++g) {
        const int u = v * kStepLoads + g;
        if (kStepLoads > 1 && u >= nloads) break;
        const int kc = u % kChunks, s = u % kStages;
        if (kc == 0 && at.pair != qpair) {  // a new pair's first tile: its q and weights
          if (qpair >= 0) __syncthreads();  // every warp's wgmma is done with the last pair's q
          const long long q_token0 = reader::token_row(p, at.at.b, at.at.t0);
          wg::load_q<H, kChunks, kThreads, kRowBytes>(p.q, sm.q, q_token0, at.at.ntok, ntok_max, tid);
          for (int i = tid; i < at.at.ntok * H; i += kThreads) sm.w[i] = __ldg(p.weights + q_token0 * H + i);
          wg::fence_async_proxy();  // q, written by st.shared, is read by wgmma
          __syncthreads();
          qpair = at.pair;
        }
        const int k0 = at.k0();
        const uint32_t a_lo = keys_lo + s * (kStageBytes / 16);
#pragma unroll 1
        for (int t = 0; t < at.at.ntok; ++t) {
          const int visible_t = at.visible(p, t);  // keys [0, visible_t) are token t's
          const bool any = k0 < visible_t;         // a tile none of whose keys the token sees costs no mma
          if constexpr (kPairs) {                  // (one chunk per row: a load is a whole tile)
            if (t + 1 < at.at.ntok) {  // tokens t and t + 1 in one m64n128 group: the second sees one key more
              const int visible_u = at.visible(p, t + 1);
              const bool any_u = k0 < visible_u;
              float pair[64];
              if (any_u) wg::tile_mma<kFp8, 1, 64>(pair, a_lo, 0, q_lo + t * (kQChunkBytes / 16), 0, false);
              const float* info = sm.row_info + s * kTile;
              wg::finish(wg::token_half(pair, 0), any, sm.w + t * H, info, at.row(p, t), k0, p.max_seq_len, visible_t,
                         warp, gid, tig);
              wg::finish(wg::token_half(pair, 1), any_u, sm.w + (t + 1) * H, info, at.row(p, t + 1), k0, p.max_seq_len,
                         visible_u, warp, gid, tig);
              ++t;
              continue;
            }
          }
          if (any) {  // this load's chunk kc (the tile's first: acc overwritten)
            wg::tile_mma<kFp8, 1>(acc, a_lo, 0, q_lo + (t * kChunks + kc) * (kQChunkBytes / 16), 0, kc > 0);
          }
          if (kc == kChunks - 1) {
            wg::finish(acc, any, sm.w + t * H, sm.row_info + s * kTile, at.row(p, t), k0, p.max_seq_len, visible_t,
                       warp, gid, tig);
          }
        }
        if (kc == kChunks - 1) at.advance(p);
      }
    }
    Work::fill(p, share, tid, kThreads);
  }
};

#endif  // KGEN_READER_WGMMA

}  // namespace detail

}  // namespace kgen
