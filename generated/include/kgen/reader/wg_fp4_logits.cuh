// kgen::indexer_logits, the sm_90a pipeline of fp4 keys (WgFp4Logits): packed rows staged by cp.async,
// converted to a bf16 operand in shared memory, multiplied by wgmma.
#pragma once

#include "convert.cuh"
#include "wg_epilogue.cuh"
#include "wg_stage.cuh"
#include "wg_work.cuh"

namespace kgen {

namespace detail {

#if KGEN_READER_WGMMA
// fp4 keys on the sm_90a path: the rows are staged as stored (packed e2m1 and their ue8m0 scale bytes, a
// ring of kReaderWgStages tiles by cp.async), each tile converted by the CTA into one bf16 A operand in
// the 128-B swizzled layout the bf16 keys are staged in (e2m1x8_bf16: exact), then the same m64n64k16 bf16
// wgmma against q (bf16, the B operand; kReaderWgPairs: m64n128 for two MTP tokens) and the same epilogue
// (wg::finish). One pipeline step is one
// tile: its copies land (barrier), it is converted (barrier), multiplied.
template <class C>
struct WgFp4Logits {
  static constexpr int H{C::kReaderHeads};
  static constexpr int kTile{C::kReaderWgTileKeys};
  static constexpr int kChunkBytes{C::kReaderWgChunkBytes};
  static constexpr int kChunks{C::kReaderWgChunks};  // 128-B chunks of a bf16 operand row
  static constexpr int kStages{C::kReaderWgStages};
  static constexpr int kTokens{C::kReaderWgTokensPerCta};
  static constexpr int kAlign{C::kReaderWgAlign};
  static constexpr int kThreads{C::kReaderWarps * 32};
  static constexpr int kRowBytes{C::kRowBytes};      // packed e2m1 of one key
  static constexpr int kScaleBytes{C::kScaleBytes};  // its ue8m0 bytes, one per kBlock values
  static constexpr int kBlock{C::kBlock};
  static constexpr long long kPageBytes = C::kPageBytes;
  static constexpr int kL2Prefetch{C::kReaderWgL2Prefetch};
  static constexpr int kOperandChunkBytes = kTile * kChunkBytes;  // one chunk of the converted tile
  static constexpr int kQChunkBytes = H * kChunkBytes;            // one chunk of a token's q rows
  static constexpr int kColumns = kChunkBytes / 16;               // 16-B columns of an operand chunk row
  static constexpr int kChunkValues = kChunkBytes / 2;            // bf16 values of one operand chunk row
  static constexpr int kPackedChunkBytes = kChunkValues / 2;      // their packed bytes (two per byte)
  static constexpr int kPieceValues = 8;                          // values of one 16-B operand column
  static constexpr int kPieces = kRowBytes / 16;                  // 16-B copies of a packed row
  static constexpr int kLoadRows = kThreads / kPieces;            // rows one pass of the threads stages
  static constexpr int kRowsPerThread = kTile / kLoadRows;
  static constexpr int kConvertRounds = kTile * kChunks * kColumns / kThreads;  // operand columns per thread
  static constexpr int kPackedStageBytes = kTile * kRowBytes;
  static constexpr int kStageBytes{reader::wg_fp4_stage<C>()};
  // two MTP tokens per m64n128 group (kReaderWgPairs): q chunk-major, so that two tokens' chunk is one operand
  static constexpr bool kPairs = C::kReaderWgPairs != 0 && kTokens > 1;
  static constexpr int kQTokenUnits = (kPairs ? 1 : kChunks) * (kQChunkBytes / 16);  // a token's q, in units

  static_assert(C::kStoreDtype == Dtype::fp4_e2m1 && C::kScaleKind == ScaleKind::ue8m0 && C::kScaleUnit == 1,
                "[wgmma-fp4] e2m1 keys, one ue8m0 byte per block");
  static_assert(kThreads == 128, "[wgmma-fp4] one warpgroup per CTA");
  static_assert(H == 64 && kTile == 64, "[wgmma-fp4] m64n64: 64 keys x 64 heads per instruction");
  static_assert(kChunkBytes == 128 && kChunks * kChunkBytes == C::kHeadDim * reader::kOperandBytes &&
                    kChunks * kPackedChunkBytes == kRowBytes,
                "[wgmma-fp4] operand rows are the packed rows widened to bf16, whole 128-B swizzle atoms");
  static_assert(reader::q_bytes(C::kStoreDtype) * C::kHeadDim == kChunks * kChunkBytes, "q rows are operand rows");
  static_assert(kBlock == reader::wg_fp4_block() && kBlock % kPieceValues == 0 && kChunkValues % kBlock == 0 &&
                    kScaleBytes * kBlock == C::kHeadDim,
                "[wgmma-fp4] an operand column lies in one scale block");
  static_assert(kRowBytes % 16 == 0 && kThreads % kPieces == 0 && kTile % kLoadRows == 0 && kLoadRows % 8 == 0,
                "[wgmma-fp4] staging: whole 16-B pieces, whole passes of the threads");
  static_assert(kScaleBytes % 4 == 0 && C::kScaleRegionOffset % 4 == 0 && C::kScaleStride % 4 == 0,
                "[wgmma-fp4] a token's scale bytes are whole 4-B words");
  static_assert(kStageBytes % 16 == 0 && kPackedStageBytes % 16 == 0, "[wgmma-fp4] stages 16-B aligned");
  static_assert((kTile * kChunks * kColumns) % kThreads == 0, "[wgmma-fp4] conversion: whole rounds");
  static_assert(kOperandChunkBytes % kAlign == 0 && kQChunkBytes % kAlign == 0, "[wgmma] operand bases 1024-B aligned");
  static_assert(kStages >= 2, "staging shape");
  static_assert(reader::wg_smem<C>(kTokens) <= C::kReaderMaxSmemBytes, "[wgmma] shared memory within 227 KB");

  struct Smem {
    unsigned char* operand;  // kChunks x kOperandChunkBytes: the converted tile
    unsigned char* q;        // ntok x kChunks x kQChunkBytes (kPairs: chunk-major, wg::q_chunk_index)
    unsigned char* stages;   // kStages x kStageBytes: packed rows, then their scale bytes
    float* row_info;         // kStages x kTile: 1, NaN for a row whose page is bad
    float* w;                // ntok x H
  };

  using Pages = wg::TilePages<C, kLoadRows, kRowsPerThread>;  // the rows' pages (as WgLogits)
  static constexpr bool kWholePages = Pages::whole_pages();

  // Stages tile `tile` into stage tile % kStages: the thread's 16-B piece of its rows, the rows' scale
  // bytes, each row's info word.
  using Work = wg::Work<C, kTokens, kTile>;

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
        // the tile's scale bytes are consecutive (slot0 is a multiple of 64): 16-B copies
        for (int i = tid; i < kTile * kScaleBytes / 16; i += kThreads)
          wg::cp16(scales + 16 * i, scale_src + 16 * i, 16u);
      } else {
        constexpr int kWords = kScaleBytes / 4;
        for (int i = tid; i < kTile * kWords; i += kThreads) {
          const int r = i / kWords, wd = i % kWords;
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

  // The staged tile of stage s as the bf16 A operand: thread tid writes 16-B column tid % kColumns of
  // kConvertRounds (row, chunk) pairs; a warp's reads are 128 consecutive packed bytes, each group of
  // 8 lanes stores one swizzled 128-B row.
  __device__ static __forceinline__ void convert(const Smem& sm, int s, int tid) {
    const unsigned char* stage = sm.stages + s * kStageBytes;
    const unsigned char* scales = stage + kPackedStageBytes;
    const int col = tid % kColumns;
#pragma unroll
    for (int j = 0; j < kConvertRounds; ++j) {
      const int idx = tid / kColumns + j * (kThreads / kColumns);
      const int kc = idx % kChunks, r = idx / kChunks;
      const uint32_t codes =
          *reinterpret_cast<const uint32_t*>(stage + r * kRowBytes + kc * kPackedChunkBytes + col * (kPieceValues / 2));
      const uint32_t e = scales[r * kScaleBytes + (kc * kChunkValues + col * kPieceValues) / kBlock];
      *reinterpret_cast<uint4*>(sm.operand + kc * kOperandChunkBytes + wg::swizzled128(r, col)) =
          e2m1x8_bf16(codes, ue8m0_bf16x2(e));
    }
  }

  __device__ static void run(const typename C::Params& p) {
    KGEN_DYNAMIC_SMEM(smem);
    const int tid = static_cast<int>(threadIdx.x), lane = tid % 32, warp = tid / 32;
    const int gid = lane / 4, tig = lane % 4;
    const int ntok_max = min(kTokens, p.next_n);  // the launch's shared memory holds this many tokens' q

    Smem sm;  // the carve-up (reader::wg_smem): the operand and q first (1024-B aligned)
    sm.operand = wg::aligned_smem<C>(smem, ntok_max);
    sm.q = sm.operand + kChunks * kOperandChunkBytes;
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

    const uint32_t keys_lo = wg::desc_sw128_lo(wg::smem_addr(sm.operand)),
                   q_lo = wg::desc_sw128_lo(wg::smem_addr(sm.q));
    // q's token and chunk strides in descriptor units (wg::q_chunk_index)
    const uint32_t q_step = kPairs ? static_cast<uint32_t>(ntok_max) * (kQChunkBytes / 16) : kQChunkBytes / 16;
    typename Work::Cursor at(p, share);  // the tile scored; q and the weights are those of `qpair`
    int qpair = -1;
    float acc[32];
#pragma unroll 1
    for (int v = 0; v < ntiles; ++v, at.advance(p)) {
      const int next = v + kStages - 1;
      if (next < ntiles) {
        if (v > 0) __syncthreads();  // every thread is done with tile v - 1's stage and row info
        issue_tile(next);
      }
      wg::commit();
      wg::wait<kStages - 1>();  // tile v has landed (this thread's part) ...
      const int s = v % kStages;
      __syncthreads();  // ... everyone's; and every warp's wgmma of tile v - 1 is done with the operand and q
      convert(sm, s, tid);
      if (at.pair != qpair) {  // a new pair's first tile: its q (bf16, swizzled as the B operand) and weights
        const long long q_token0 = reader::token_row(p, at.at.b, at.at.t0);
        wg::load_q<H, kChunks, kThreads, kChunks * kChunkBytes, kPairs>(p.q, sm.q, q_token0, at.at.ntok, ntok_max, tid);
        for (int i = tid; i < at.at.ntok * H; i += kThreads) sm.w[i] = __ldg(p.weights + q_token0 * H + i);
        qpair = at.pair;
      }
      wg::fence_async_proxy();  // the operand (and q), written by st.shared, are read by wgmma
      __syncthreads();
      const int k0 = at.k0();
#pragma unroll 1
      for (int t = 0; t < at.at.ntok; ++t) {
        const int visible_t = at.visible(p, t);  // keys [0, visible_t) are token t's
        const bool any = k0 < visible_t;         // a tile none of whose keys the token sees costs no mma
        if constexpr (kPairs) {
          if (t + 1 < at.at.ntok) {  // tokens t and t + 1 in one m64n128 group: the second sees one key more
            const int visible_u = at.visible(p, t + 1);
            const bool any_u = k0 < visible_u;
            float pair[64];
            if (any_u) {
              wg::tile_mma<false, kChunks, 64>(pair, keys_lo, kOperandChunkBytes / 16, q_lo + t * kQTokenUnits, q_step,
                                               false);
            }
            const float* info = sm.row_info + s * kTile;
            wg::finish(wg::token_half(pair, 0), any, sm.w + t * H, info, at.row(p, t), k0, p.max_seq_len, visible_t,
                       warp, gid, tig);
            wg::finish(wg::token_half(pair, 1), any_u, sm.w + (t + 1) * H, info, at.row(p, t + 1), k0, p.max_seq_len,
                       visible_u, warp, gid, tig);
            ++t;
            continue;
          }
        }
        if (any) {  // the converted tile (bf16) times q
          wg::tile_mma<false, kChunks>(acc, keys_lo, kOperandChunkBytes / 16, q_lo + t * kQTokenUnits, q_step, false);
        }
        wg::finish(acc, any, sm.w + t * H, sm.row_info + s * kTile, at.row(p, t), k0, p.max_seq_len, visible_t, warp,
                   gid, tig);
      }
    }
    Work::fill(p, share, tid, kThreads);
  }
};

#endif  // KGEN_READER_WGMMA

}  // namespace detail

}  // namespace kgen
