// kgen::indexer_logits, the sm_90a pipeline of fp4 keys (WgFp4Logits): packed rows staged by cp.async, each
// thread's part converted into the registers of wgmma's bf16 A operand.
#pragma once

#include "convert.cuh"
#include "wg_epilogue.cuh"
#include "wg_stage.cuh"
#include "wg_work.cuh"

namespace kgen {

namespace detail {

#if KGEN_READER_WGMMA
// fp4 keys on the sm_90a path: the rows are staged as stored (packed e2m1 and their ue8m0 scale bytes, a ring
// of kReaderWgStages tiles by cp.async); each thread converts its part of a tile (e2m1x8_bf16: exact) straight
// into the registers of the bf16 wgmma's A operand, which multiplies it by q (bf16, the B operand in shared
// memory; kReaderWgPairs: m64n128 for two MTP tokens), then the same epilogue as the other keys (wg::finish).
// No converted copy of the tile passes through shared memory: a tile costs its packed bytes' copy in and one
// read out, as fp8 keys do; a bf16 operand in shared memory would cost four times that again.
//
// The k order. The dot product over head_dim does not care in which order its k are summed, as long as q and
// the keys agree. A k16 step's A fragment gives thread (gid, tig) of each warp the k {2 tig, 2 tig + 1,
// 2 tig + 8, 2 tig + 9} of rows gid and gid + 8, as registers {0, 2} (h = 0) and {1, 3} (h = 1), two k a
// register. Here a thread multiplies a contiguous quarter of each of its two rows (values tig x kQuarter on,
// 16 B of a packed row at head_dim 128: one 32-value scale block a group of 8 steps), and step s's register h
// holds the quarter's values 8 (s / 2) + 2 (s % 2) + h and that + 4: the pairs e2m1x8_bf16 makes of a packed
// word. q is staged in that order (QInFp4Order): logical k 8 g + 2 tig + c of q is its value
// tig x kQuarter + 8 (g / 4) + g % 4 + 4 c.

// q's bf16 row in the k order above (wg::load_q's gather): the four 16-B columns 4 m .. 4 m + 3 of the B
// operand from the octets 8 m .. 8 m + 7 of the row's four quarters, column 4 m + r's tig-th 4-B word holding
// the quarter tig's values 8 m + r and 8 m + r + 4.
template <int kQuarter>
struct QInFp4Order {
  static constexpr int kColumns = 4, kInFlight = 1;
  __device__ static __forceinline__ void gather(const uint8_t* row, int kc, int col, uint4 (&out)[kColumns]) {
    const int g = kc * (128 / 16) + col;  // = 4 m
    uint32_t o[4][4];                     // octet m of quarter tig: the bf16 pairs {0, 1} .. {6, 7}
#pragma unroll
    for (int tig = 0; tig < 4; ++tig) {
      const uint4 x = __ldg(reinterpret_cast<const uint4*>(row + (tig * kQuarter + 2 * g) * reader::kOperandBytes));
      o[tig][0] = x.x, o[tig][1] = x.y, o[tig][2] = x.z, o[tig][3] = x.w;
    }
#pragma unroll
    for (int r = 0; r < 4; ++r) {  // values r and r + 4: the same half of pairs r / 2 and r / 2 + 2
      const uint32_t halves = r % 2 ? 0x7632u : 0x5410u;
      out[r] = make_uint4(
          __byte_perm(o[0][r / 2], o[0][r / 2 + 2], halves), __byte_perm(o[1][r / 2], o[1][r / 2 + 2], halves),
          __byte_perm(o[2][r / 2], o[2][r / 2 + 2], halves), __byte_perm(o[3][r / 2], o[3][r / 2 + 2], halves));
    }
  }
};

template <class C>
struct WgFp4Logits {
  static constexpr int H{C::kReaderHeads};
  static constexpr int kTile{C::kReaderWgTileKeys};
  static constexpr int kChunkBytes{C::kReaderWgChunkBytes};
  static constexpr int kChunks{C::kReaderWgChunks};  // 128-B chunks of a bf16 q row
  static constexpr int kStages{C::kReaderWgStages};
  static constexpr int kTokens{C::kReaderWgTokensPerCta};
  static constexpr int kAlign{C::kReaderWgAlign};
  static constexpr int kThreads{C::kReaderWarps * 32};
  static constexpr int kRowBytes{C::kRowBytes};      // packed e2m1 of one key
  static constexpr int kScaleBytes{C::kScaleBytes};  // its ue8m0 bytes, one per kBlock values
  static constexpr int kBlock{C::kBlock};
  static constexpr long long kPageBytes = C::kPageBytes;
  static constexpr int kL2Prefetch{C::kReaderWgL2Prefetch};
  static constexpr int kQChunkBytes = H * kChunkBytes;  // one chunk of a token's q rows
  static constexpr int kSteps = C::kHeadDim / 16;       // k16 steps of a row
  static constexpr int kQuarter = C::kHeadDim / 4;      // values of a row one thread multiplies
  // steps whose A registers one wgmma group holds (4 per step, 32 in all): a 16-B load of each of the thread's
  // two rows. head_dim is a multiple of 128 wherever this path stages (whole passes of 16-B pieces and whole 4-B
  // words of scale bytes leave 128 and 256), so whole groups.
  static constexpr int kGroupSteps = 8;
  static constexpr int kGroupWords = kGroupSteps / 2;  // packed 4-B words of eight values each
  // one group (head_dim 128): a tile's A registers are converted once and serve all of its tokens
  static constexpr bool kHeld = kSteps == kGroupSteps;
  static constexpr int kPieces = kRowBytes / 16;        // 16-B copies of a packed row
  static constexpr int kLoadRows = kThreads / kPieces;  // rows one pass of the threads stages
  static constexpr int kRowsPerThread = kTile / kLoadRows;
  static constexpr int kPackedStageBytes = kTile * kRowBytes;
  static constexpr int kStageBytes{reader::wg_fp4_stage<C>()};
  // two MTP tokens per m64n128 group (kReaderWgPairs): q chunk-major, so that two tokens' chunk is one operand
  static constexpr bool kPairs = C::kReaderWgPairs != 0 && kTokens > 1;
  // each token's heads as two m64n32 groups from the held tile, the next issued before the last is summed
  // (kReaderWgKeyRegisters: score_held)
  static constexpr bool kKeyRegisters = C::kReaderWgKeyRegisters != 0;
  static constexpr int kQTokenUnits = (kPairs ? 1 : kChunks) * (kQChunkBytes / 16);  // a token's q, in units

  static_assert(C::kStoreDtype == Dtype::fp4_e2m1 && C::kScaleKind == ScaleKind::ue8m0 && C::kScaleUnit == 1,
                "[wgmma-fp4] e2m1 keys, one ue8m0 byte per block");
  static_assert(kThreads == 128, "[wgmma-fp4] one warpgroup per CTA");
  static_assert(H == 64 && kTile == 64, "[wgmma-fp4] m64n64: 64 keys x 64 heads per instruction");
  static_assert(kChunkBytes == 128 && kChunks * kChunkBytes == C::kHeadDim * reader::kOperandBytes &&
                    kRowBytes * 2 == C::kHeadDim,
                "[wgmma-fp4] q rows of whole 128-B swizzle atoms; two e2m1 values a byte");
  static_assert(reader::q_bytes(C::kStoreDtype) * C::kHeadDim == kChunks * kChunkBytes, "q rows are operand rows");
  static_assert(kBlock == reader::wg_fp4_block() && kBlock == 8 * kGroupWords && kQuarter % kBlock == 0 &&
                    kScaleBytes * kBlock == C::kHeadDim,
                "[wgmma-fp4] a thread's quarter of a row is whole scale blocks, a group's words one block");
  static_assert(kSteps % kGroupSteps == 0, "[wgmma-fp4] head_dim a multiple of 128: whole groups of 8 k-steps");
  static_assert(kRowBytes % 16 == 0 && kThreads % kPieces == 0 && kTile % kLoadRows == 0 && kLoadRows % 8 == 0,
                "[wgmma-fp4] staging: whole 16-B pieces, whole passes of the threads");
  static_assert(kScaleBytes % 4 == 0 && C::kScaleRegionOffset % 4 == 0 && C::kScaleStride % 4 == 0,
                "[wgmma-fp4] a token's scale bytes are whole 4-B words");
  static_assert(kStageBytes % 16 == 0 && kPackedStageBytes % 16 == 0, "[wgmma-fp4] stages 16-B aligned");
  static_assert(kQChunkBytes % kAlign == 0, "[wgmma] operand bases 1024-B aligned");
  static_assert(kStages >= 2, "staging shape");
  static_assert(!kKeyRegisters || (kHeld && !kPairs), "[wgmma-fp4] two m64n32 groups a token from the held tile");
  static_assert(reader::wg_smem<C>(kTokens) <= C::kReaderMaxSmemBytes, "[wgmma] shared memory within 227 KB");

  struct Smem {
    unsigned char* q;       // ntok x kChunks x kQChunkBytes (kPairs: chunk-major, wg::q_chunk_index), k order above
    unsigned char* stages;  // kStages x kStageBytes: packed rows, then their scale bytes
    float* row_info;        // kStages x kTile: 1, NaN for a row whose page is bad
    float* w;               // ntok x H
  };

  using Pages = wg::TilePages<C, kLoadRows, kRowsPerThread>;  // the rows' pages (as WgLogits)
  static constexpr bool kWholePages = Pages::whole_pages();
  using Work = wg::Work<C, kTokens, kTile>;

  // Stages tile `tile` into stage tile % kStages: the thread's 16-B piece of its rows, the rows' scale
  // bytes, each row's info word.
  __device__ static __forceinline__ void issue(const typename C::Params& p, const Smem& sm, int tile, const Pages& pg,
                                               int tid) {
    const int s = tile % kStages;
    const int k0 = pg.k0;
    const int piece = tid % kPieces, r0 = tid / kPieces;
    unsigned char* stage = sm.stages + s * kStageBytes;
    const uint32_t dst = wg::smem_addr(stage) + r0 * kRowBytes + piece * 16;
    const uint32_t scales = wg::smem_addr(stage + kPackedStageBytes);
    const int slot0 = reader::slot_of<C>(k0);
    float* info = sm.row_info + s * kTile;
    if (kWholePages && pg.whole >= 0) {
      const uint8_t* page = p.cache + pg.whole * kPageBytes;
      const uint8_t* src = page + (slot0 + r0) * kRowBytes + piece * 16;
#pragma unroll
      for (int j = 0; j < kRowsPerThread; ++j) {
        wg::cp16<kL2Prefetch>(dst + j * kLoadRows * kRowBytes, src + j * kLoadRows * kRowBytes, 16u);
      }
      const uint8_t* scale_src = page + C::kScaleRegionOffset + slot0 * C::kScaleStride;
      if constexpr (C::kScaleStride == kScaleBytes && C::kScaleRegionOffset % 16 == 0 &&
                    (kTile * kScaleBytes) % 16 == 0) {
        // the tile's scale bytes are consecutive (slot0 is a multiple of 64): 16-B copies, one a thread
        constexpr int kScalePieces = kTile * kScaleBytes / 16;
        static_assert(kScalePieces <= kThreads, "[wgmma-fp4] a tile's scale bytes in one pass of the threads");
        if (tid < kScalePieces) wg::cp16(scales + 16 * tid, scale_src + 16 * tid, 16u);
      } else {
        constexpr int kScaleWords = kScaleBytes / 4;
        for (int i = tid; i < kTile * kScaleWords; i += kThreads) {
          const int r = i / kScaleWords, wd = i % kScaleWords;
          wg::cp4z(scales + r * kScaleBytes + 4 * wd, scale_src + r * C::kScaleStride + 4 * wd, 4u);
        }
      }
      if (tid < kTile) info[tid] = 1.0f;
      return;
    }
#pragma unroll
    for (int j = 0; j < kRowsPerThread; ++j) {
      const int r = r0 + j * kLoadRows;
      const int slot = reader::slot_of<C>(k0 + r);
      const uint8_t* page = pg.rows[j] >= 0 ? p.cache + pg.rows[j] * kPageBytes : nullptr;
      wg::cp16(dst + j * kLoadRows * kRowBytes, page ? page + slot * kRowBytes + piece * 16 : p.cache, page ? 16u : 0u);
      // the row's scale words (zeros for a row not read)
      for (int wd = piece; wd < kScaleBytes / 4; wd += kPieces) {
        const uint8_t* src = page ? page + C::kScaleRegionOffset + slot * C::kScaleStride + 4 * wd : p.cache;
        wg::cp4z(scales + r * kScaleBytes + 4 * wd, src, page ? 4u : 0u);
      }
      if (piece == 0) info[r] = pg.rows[j] == -2 ? __int_as_float(0x7fc00000) : 1.0f;
    }
  }

  // The A registers of group `group` of a staged tile (steps group x kGroupSteps on): a[j][i + 2 h] of step j
  // holds row 16 warp + gid + 8 i, the thread's quarter's values 8 w + 2 (j % 2) + h and that + 4 (w, the
  // group's word j / 2). A group's 32 values of a row are one scale block: one scale byte a row. A scale
  // past 2^1 (a byte above 128: keys beyond 12 in magnitude) takes a second multiply (e2m1_rest).
  __device__ static __forceinline__ void convert(uint32_t (&a)[kGroupSteps][4], const unsigned char* stage, int group,
                                                 int warp, int gid, int tig) {
    const unsigned char* scales = stage + kPackedStageBytes;
    uint32_t e[2];
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int r = 16 * warp + gid + 8 * i;
      const unsigned char* packed = stage + r * kRowBytes + tig * (kQuarter / 2) + 4 * group * kGroupWords;
      const uint4 c = *reinterpret_cast<const uint4*>(packed);
      const uint32_t codes[kGroupWords] = {c.x, c.y, c.z, c.w};
      e[i] = scales[r * kScaleBytes + tig * (kQuarter / kBlock) + group];
      const uint32_t factor = e2m1_factor(e[i]);
#pragma unroll
      for (int w = 0; w < kGroupWords; ++w) {
        const uint4 v = e2m1x8_bf16(codes[w], factor);
        a[2 * w][i] = v.x, a[2 * w][2 + i] = v.y, a[2 * w + 1][i] = v.z, a[2 * w + 1][2 + i] = v.w;
      }
    }
    if (e2m1_splits(e[0]) || e2m1_splits(e[1])) {
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        const uint32_t rest = e2m1_rest(e[i]);
#pragma unroll
        for (int j = 0; j < kGroupSteps; ++j)
          a[j][i] = bf16x2_mul(a[j][i], rest), a[j][2 + i] = bf16x2_mul(a[j][2 + i], rest);
      }
    }
  }

  // acc (+)= the staged tile times q (descriptor b_lo, chunks b_step units apart), group by group, in `a`: a
  // group's A registers stay untouched until its wgmma are done. kHeld: `a` already holds the tile (converted once
  // for all of its tokens); else each group is converted into `a` here.
  template <int N>
  __device__ static __forceinline__ void tile_mma(float (&acc)[N], uint32_t (&a)[kGroupSteps][4],
                                                  const unsigned char* stage, uint32_t b_lo, uint32_t b_step, int warp,
                                                  int gid, int tig) {
#pragma unroll
    for (int group = 0; group < kSteps / kGroupSteps; ++group) {
      if constexpr (!kHeld) convert(a, stage, group, warp, gid, tig);
      wg::mma_fence();
#pragma unroll
      for (int j = 0; j < kGroupSteps; ++j) {
        const int step = group * kGroupSteps + j;  // 32 B of q's rows: chunk step / 4, k-step step % 4
        const unsigned long long db = wg::desc_sw128_of(b_lo + (step / 4) * b_step + 2 * (step % 4));
        wg::mma_bf16_ra(acc, a[j], db, step > 0 ? 1u : 0u);
      }
      wg::mma_commit();
      wg::mma_wait();
      wg::keep(acc);
    }
  }

  // acc = 32 heads of q (the B operand's rows from b_lo on, chunks b_step units apart) times the tile held in `a`,
  // as one committed group; mma_wait tells when it is done
  __device__ static __forceinline__ void issue_half(float (&acc)[16], const uint32_t (&a)[kGroupSteps][4],
                                                    uint32_t b_lo, uint32_t b_step) {
    wg::mma_fence();
#pragma unroll
    for (int j = 0; j < kGroupSteps; ++j)
      wg::mma_bf16_ra(acc, a[j], wg::desc_sw128_of(b_lo + (j / 4) * b_step + 2 * (j % 4)), j > 0 ? 1u : 0u);
    wg::mma_commit();
  }

  // The tile's tokens from the held tile (kKeyRegisters), each token's 32-head halves as m64n32 groups
  // (wg::score_halves, as WgTmaLogits scores its fp8 tiles)
  __device__ static void score_held(const typename C::Params& p, const Smem& sm, const typename Work::Cursor& at,
                                    const uint32_t (&a)[kGroupSteps][4], const float* info, uint32_t q_lo,
                                    uint32_t q_step, int k0, int warp, int gid, int tig) {
    constexpr uint32_t kHalfUnits = H / 2 * kChunkBytes / 16;  // heads [32, 64) of a token's q, in descriptor units
    const float factor = tig < 2 ? info[wg::finish_row(warp, gid, tig)] : 0.0f;
    wg::score_halves<kTokens, H>(p, at, sm.w, q_lo, kQTokenUnits, kHalfUnits, factor, k0, warp, gid, tig,
                                 [&](float (&acc)[16], uint32_t b_lo) { issue_half(acc, a, b_lo, q_step); });
  }

  __device__ static void run(const typename C::Params& p) {
    KGEN_DYNAMIC_SMEM(smem);
    const int tid = static_cast<int>(threadIdx.x), lane = tid % 32, warp = tid / 32;
    const int gid = lane / 4, tig = lane % 4;
    const int ntok_max = min(kTokens, p.next_n);  // the launch's shared memory holds this many tokens' q

    Smem sm;  // the carve-up (reader::wg_smem): q first (1024-B aligned)
    sm.q = wg::aligned_smem<C>(smem, ntok_max);
    sm.stages = sm.q + ntok_max * kChunks * kQChunkBytes;
    sm.row_info = reinterpret_cast<float*>(sm.stages + kStages * kStageBytes);
    sm.w = sm.row_info + kStages * kTile;

    reader::wait_for_predecessor<C>();                        // before the first read of an input
    const typename Work::Share share = Work::share(p, lane);  // this CTA's tiles (every warp alike)
    const int ntiles = share.count;
    const int r0 = tid / kPieces;

    // the table is read one tile ahead, in order (`ahead`)
    typename Work::Cursor ahead(p, share);
    int looked = 0;
    Pages pages;
    const auto look = [&]() {
      pages.lookup(p, ahead, looked < ntiles, r0);
      if (looked++ < ntiles) ahead.advance(p);
    };
    look();
    const auto issue_tile = [&](int tile) {
      issue(p, sm, tile, pages, tid);
      look();
    };
    // tiles 0 .. kStages - 2 now; tile v + kStages - 1 in iteration v, into the stage tile v - 1 used
#pragma unroll
    for (int v = 0; v < kStages - 1; ++v) {
      if (v < ntiles) issue_tile(v);
      wg::commit();
    }

    const uint32_t q_lo = wg::desc_sw128_lo(wg::smem_addr(sm.q));
    // q's token and chunk strides in descriptor units (wg::q_chunk_index)
    const uint32_t q_step = kPairs ? static_cast<uint32_t>(ntok_max) * (kQChunkBytes / 16) : kQChunkBytes / 16;
    typename Work::Cursor at(p, share);  // the tile scored; q and the weights are those of `qpair`
    int qpair = -1;
    float acc[32];
#pragma unroll 1
    for (int v = 0; v < ntiles; ++v, at.advance(p)) {
      wg::wait<kStages - 2>();  // tile v has landed (this thread's part) ...
      __syncthreads();          // ... everyone's; every thread is done with tile v - 1 (its stage, row info, q)
      const int next = v + kStages - 1;
      if (next < ntiles) issue_tile(next);  // into tile v - 1's stage
      wg::commit();
      if (at.pair != qpair) {  // a new pair's first tile: its q (bf16, swizzled as the B operand) and weights
        const long long q_token0 = reader::token_row(p, at.at.b, at.at.t0);
        wg::load_q<H, kChunks, kThreads, kChunks * kChunkBytes, kPairs, QInFp4Order<kQuarter>>(
            p.q, sm.q, q_token0, at.at.ntok, ntok_max, tid);
        for (int i = tid; i < at.at.ntok * H; i += kThreads) sm.w[i] = __ldg(p.weights + q_token0 * H + i);
        qpair = at.pair;
        wg::fence_async_proxy();  // q, written by st.shared, is read by wgmma
        __syncthreads();
      }
      const int s = v % kStages;
      const unsigned char* stage = sm.stages + s * kStageBytes;
      const float* info = sm.row_info + s * kTile;
      const int k0 = at.k0();
      uint32_t a[kGroupSteps][4];  // the tile's A registers (kHeld), else one group's at a time
      if constexpr (kHeld) convert(a, stage, 0, warp, gid, tig);
      if constexpr (kKeyRegisters) {
        score_held(p, sm, at, a, info, q_lo, q_step, k0, warp, gid, tig);
      } else {
#pragma unroll 1
        for (int t = 0; t < at.at.ntok; ++t) {
          const int visible_t = at.visible(p, t);  // keys [0, visible_t) are token t's
          const bool any = k0 < visible_t;         // a tile none of whose keys the token sees costs no mma
          if constexpr (kPairs) {
            if (t + 1 < at.at.ntok) {  // tokens t and t + 1 in one m64n128 group: the second sees one key more
              const int visible_u = at.visible(p, t + 1);
              const bool any_u = k0 < visible_u;
              float pair[64];
              if (any_u) tile_mma(pair, a, stage, q_lo + t * kQTokenUnits, q_step, warp, gid, tig);
              wg::finish(wg::token_half(pair, 0), any, sm.w + t * H, info, at.row(p, t), k0, p.max_seq_len, visible_t,
                         warp, gid, tig);
              wg::finish(wg::token_half(pair, 1), any_u, sm.w + (t + 1) * H, info, at.row(p, t + 1), k0, p.max_seq_len,
                         visible_u, warp, gid, tig);
              ++t;
              continue;
            }
          }
          if (any) tile_mma(acc, a, stage, q_lo + t * kQTokenUnits, q_step, warp, gid, tig);
          wg::finish(acc, any, sm.w + t * H, info, at.row(p, t), k0, p.max_seq_len, visible_t, warp, gid, tig);
        }
      }
    }
    Work::fill(p, share, tid, kThreads);
  }
};

#endif  // KGEN_READER_WGMMA

}  // namespace detail

}  // namespace kgen
