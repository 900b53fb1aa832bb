// kgen::indexer_logits, the sm_90a pipeline by TMA (WgTmaLogits): a producer warp and consumer
// warpgroups around a ring of mbarrier-guarded stages.
#pragma once

#include "wg_epilogue.cuh"
#include "wg_stage.cuh"
#include "wg_work.cuh"

namespace kgen {

namespace detail {

#if KGEN_READER_WGMMA
// The TMA variant of the sm_90a path (kReaderWgTma, kgen/reader_layout.py's reader_wg_tma): bf16 and fp8 keys whose
// 64-key tiles lie in one page. Warps [0, 4 x kConsumers) are kConsumers warpgroups that score tiles, the
// last warp the producer that stages them:
// - the producer walks the CTA's tiles in order into a ring of kStages stages. For a tile some token here
//   sees, whose page is inside the table and the cache, one lane copies each 128-B chunk of its 64 rows as
//   one box of the cache's tensor map (p.cache_map: the copy writes the 128-B swizzle wgmma reads) and fp8's
//   64 scales as one 256-B bulk copy, all completing on the stage's `full` barrier; otherwise the warp
//   writes the rows' factors (bf16: 1; NaN for a visible tile whose page is bad) and arrives. The table is
//   read 32 columns at a time, one entry per lane, ahead of the copies that need it.
// - warpgroup g scores tiles g, g + kConsumers, ...: it waits for the stage's `full` phase, multiplies
//   (the same wgmma and epilogue as WgLogits; kReaderWgPairs: two tokens per m64n128 group), and its four warps arrive
//   on the stage's `empty` barrier, which the producer waits for before it refills the stage. kReaderWgKeyRegisters
//   (fp8 MTP launches): the tile is first loaded into the A registers and the stage handed back at once
//   (score_from_registers).
// q and the weights are staged once per CTA by the consumers (cp.async, as WgLogits). The CTA's share of the
// work (wg::Work) is the producer's alone to compute: it publishes it in shared memory behind an mbarrier, which
// the consumers wait for after they started staging the guess's q (the share where every length is the longest).
template <class C>
struct WgTmaLogits {
  static constexpr int H{C::kReaderHeads};
  static constexpr int kTile{C::kReaderWgTileKeys};
  static constexpr int kChunkBytes{C::kReaderWgChunkBytes};
  static constexpr int kChunks{C::kReaderWgChunks};
  static constexpr int kStages{C::kReaderWgStages};
  static constexpr int kTokens{C::kReaderWgTokensPerCta};
  static constexpr int kConsumers{C::kReaderWgConsumers};
  static constexpr int kConsumerThreads = kConsumers * 128;
  static constexpr int kThreads{reader::wg_threads<C>()};
  static constexpr bool kFp8 = C::kStoreDtype == Dtype::fp8_e4m3;
  static constexpr bool kScaled = C::kScaleKind != ScaleKind::none;
  static constexpr int kBoxBytes = kTile * kChunkBytes;    // one box: a 128-B chunk of the tile's 64 rows
  static constexpr int kStageBytes = kChunks * kBoxBytes;  // a tile's rows
  static constexpr int kQChunkBytes = H * kChunkBytes;     // one chunk of a token's q rows
  static constexpr int kScaleTileBytes = kTile * 4;        // fp8: the tile's scales
  static constexpr uint32_t kTxBytes = kStageBytes + (kScaled ? kScaleTileBytes : 0);
  static constexpr int kPageShift{C::kPageShift};
  // two MTP tokens per m64n128 group (kReaderWgPairs): q chunk-major, so that two tokens' chunk is one operand
  static constexpr bool kPairs = C::kReaderWgPairs != 0 && kTokens > 1;
  static constexpr int kQTokenUnits = (kPairs ? 1 : kChunks) * (kQChunkBytes / 16);  // a token's q, in units
  // the register split (kReaderWgSplit): the producer a warpgroup that lowers its registers, the consumers raise
  static constexpr bool kSplit = C::kReaderWgSplit != 0;
  static constexpr int kProducerThreads = kSplit ? reader::kWgSplitProducerThreads : reader::kWgTmaProducerThreads;
  // fp8 tiles into the wgmma's A registers once for every token (kReaderWgKeyRegisters): the stage goes back to the
  // producer before the first token's wgmma, and no token's wgmma reads the keys from shared memory again
  static constexpr bool kKeyRegisters = C::kReaderWgKeyRegisters != 0;
  // a warpgroup jumps from one of its tiles to its next within a pair (skip_ahead) where that was measured faster:
  // on the H100 0.99x, 0.93-1.03x and 0.92-0.97x the time (keys in registers, pair, split). The m64n64 one-token
  // cubin walks tile by tile (1.00-1.01x with the jump), and so do bf16's pair cubins (with the jump NVRTC 13.0's
  // ptxas serializes bf16's split cubin's wgmma); bench/results/h100-2026-12-06-s28/README.md
  static constexpr bool kSkipAhead = kKeyRegisters || (kPairs && kFp8);

  static_assert(reader::wg_readable<C>() && reader::wg_tma_readable<C>() && C::kReaderWgTma == 1,
                "[wgmma-tma] a layout the variant reads");
  static_assert(kThreads == kConsumerThreads + kProducerThreads, "[wgmma-tma] warpgroups + a warp (or warpgroup)");
  static_assert(!kSplit || (kPairs && reader::wg_split_fits<C>()), "[wgmma-tma] the split's registers fit the SM");
  static_assert(H == 64 && kTile == 64, "[wgmma] m64n64: 64 keys x 64 heads per instruction");
  static_assert(kChunkBytes == 128 && C::kRowBytes == kChunks * kChunkBytes, "[wgmma] rows of whole 128-B atoms");
  static_assert(reader::q_bytes(C::kStoreDtype) * C::kHeadDim == C::kRowBytes, "q rows are key rows' width");
  static_assert(kBoxBytes % C::kReaderWgAlign == 0 && kQChunkBytes % C::kReaderWgAlign == 0,
                "[wgmma] operand bases 1024-B aligned");
  static_assert(C::kPageSize % kTile == 0, "[wgmma-tma] a tile lies in one page");
  static_assert(!kScaled || (C::kScaleStride == 4 && C::kScaleRegionOffset % 16 == 0),
                "[wgmma-tma] a tile's scales are one 16-B aligned 256-B copy");
  static_assert(!kKeyRegisters || (kFp8 && kChunks == 1 && !kPairs),
                "[wgmma-tma] keys in registers: fp8 rows of one 128-B chunk, one token per group");
  static_assert(kStages % kConsumers == 0 && kStages >= 2 && kStages <= 32,
                "[wgmma-tma] whole rounds: a warpgroup reads a stage's previous tile before it waits for the next (a "
                "barrier is never two phases behind); a bit per stage in the producer's mask");
  static_assert(reader::wg_smem<C>(kTokens) <= C::kReaderMaxSmemBytes, "[wgmma] shared memory within 227 KB");

  struct Smem {           // the carve-up (reader::wg_smem): the stages' rows and q first (1024-B aligned)
    unsigned char* keys;  // kStages x kStageBytes
    unsigned char* q;     // ntok x kChunks x kQChunkBytes (kPairs: chunk-major, wg::q_chunk_index)
    float* row_info;      // kStages x kTile: scale (or 1), NaN for the rows of a bad page
    float* w;             // ntok x H
    uint32_t bars;        // kStages x (full, empty), then the share's barrier: shared address
    typename wg::Work<C, kTokens, kTile>::Share* share;  // the producer's share (after its barrier)
    __device__ uint32_t full(int s) const { return bars + 16u * s; }
    __device__ uint32_t empty(int s) const { return bars + 16u * s + 8u; }
    __device__ uint32_t shared() const { return bars + 16u * kStages; }
  };
  static_assert(sizeof(typename wg::Work<C, kTokens, kTile>::Share) + 8 == reader::kWgTmaShareBytes,
                "[wgmma-tma] the published share and its mbarrier (kgen/reader_layout.py READER_WG_TMA_SHARE_BYTES)");

  // lane l's table entry of column window + l (-1 past the table's columns)
  __device__ static __forceinline__ int table_entry(const typename C::Params& p, const int* table, int window,
                                                    int lane) {
    return window + lane < p.max_pages ? __ldg(table + window + lane) : -1;
  }

  using Work = wg::Work<C, kTokens, kTile>;

  // the share's tiles, in order, into the ring; `row_pair`, `window`, `entry`: the table columns
  // [window, +32) of row_pair's sequence the caller loaded (lane l: column window + l), -1: none
  __device__ static void produce(const typename C::Params& p, const Smem& sm, const typename Work::Share& share,
                                 int lane, int row_pair, int window, int entry) {
    const void* map = &p.cache_map;
    constexpr bool kHint = C::kReaderWgEvictFirst != 0;
    const unsigned long long policy = kHint ? wg::evict_first_policy() : 0;  // keys are read once
    uint32_t generic = 0;  // fp8: stages whose rows' factors this warp last wrote by st.shared
    typename Work::Cursor at(p, share);
    const int* table = reader::table_row(p, row_pair < 0 ? 0 : row_pair / Work::groups(p));
#pragma unroll 1
    for (int i = 0; i < share.count; ++i, at.advance(p)) {
      const int s = i % kStages;
      const int k0 = at.k0();
      const int col = k0 >> kPageShift;
      if (at.pair != row_pair || col < window || col >= window + 32) {
        if (at.pair != row_pair) table = reader::table_row(p, at.at.b);
        row_pair = at.pair;
        window = col;
        entry = table_entry(p, table, window, lane);
      }
      const int page = __shfl_sync(num::kFullMask, entry, col - window);
      if (i >= kStages) wg::bar_wait(sm.empty(s), static_cast<uint32_t>(i / kStages - 1) & 1u);
      // every tile of the list has a key some token of its pair sees
      const bool ok = col < p.max_pages && page >= 0 && page < p.num_pages;
      float* info = sm.row_info + s * kTile;
      if (!kScaled || !ok) {
        const float factor = ok ? 1.0f : __int_as_float(0x7fc00000);
        info[lane] = factor;
        info[lane + 32] = factor;
        generic |= 1u << s;
      }
      __syncwarp();
      if (lane == 0) {
        if (ok) {
          const int slot0 = reader::slot_of<C>(k0);
          wg::bar_arrive_tx(sm.full(s), kTxBytes);
          const uint32_t dst = wg::smem_addr(sm.keys + s * kStageBytes);
#pragma unroll
          for (int kc = 0; kc < kChunks; ++kc)
            wg::tma_load_4d<kHint>(dst + kc * kBoxBytes, map, sm.full(s), 0, kc, slot0, page, policy);
          if constexpr (kScaled) {
            if (generic >> s & 1u) {  // the factors a bad page's round wrote by st.shared, before the copy's
              wg::fence_async_proxy();
              generic &= ~(1u << s);
            }
            const uint8_t* scales = p.cache + page * C::kPageBytes + C::kScaleRegionOffset + slot0 * C::kScaleStride;
            wg::bulk_load<kHint>(wg::smem_addr(info), scales, kScaleTileBytes, sm.full(s), policy);
          }
        } else {
          wg::bar_arrive(sm.full(s));
        }
      }
    }
  }

  // kKeyRegisters: the tile's tokens from its rows in the A registers (wg::load_key_fragments), each token's
  // 32-head halves as m64n32 groups (wg::score_halves)
  __device__ static void score_from_registers(const typename C::Params& p, const Smem& sm,
                                              const typename Work::Cursor& at,
                                              const uint32_t (&keys)[wg::chunk_steps()][4], uint32_t q_lo, int k0,
                                              float factor, int gwarp, int lane) {
    constexpr uint32_t kHalfUnits = H / 2 * kChunkBytes / 16;  // heads [32, 64) of a token's q, in descriptor units
    wg::score_halves<kTokens, H>(p, at, sm.w, q_lo, kQTokenUnits, kHalfUnits, factor, k0, gwarp, lane / 4, lane % 4,
                                 [&](float (&acc)[16], uint32_t b_lo) { wg::issue_mma_ra(acc, keys, b_lo); });
  }

  __device__ static void run(const typename C::Params& p) {
    KGEN_DYNAMIC_SMEM(smem);
    // the warp's index as a warp-uniform value (a broadcast): ptxas then knows the role branches below, and
    // the warpgroup's, are not divergent, and keeps the wgmma asynchronous across them
    const int tid = static_cast<int>(threadIdx.x), lane = tid % 32, warp = __shfl_sync(num::kFullMask, tid / 32, 0);
    const int gid = lane / 4, tig = lane % 4;
    const int ntok_max = min(kTokens, p.next_n);  // the launch's shared memory holds this many tokens' q

    Smem sm;
    sm.keys = wg::aligned_smem<C>(smem, ntok_max);
    sm.q = sm.keys + kStages * kStageBytes;
    sm.row_info = reinterpret_cast<float*>(sm.q + ntok_max * kChunks * kQChunkBytes);
    sm.w = sm.row_info + kStages * kTile;
    sm.bars = wg::smem_addr(sm.w + ntok_max * H);
    sm.share = reinterpret_cast<typename Work::Share*>(reinterpret_cast<unsigned char*>(sm.w + ntok_max * H) +
                                                       16 * kStages + 8);
    if (tid == kConsumerThreads) {
      for (int s = 0; s < kStages; ++s) {
        wg::bar_init(sm.full(s), 1);   // the producer's lane 0 (its copies add their bytes)
        wg::bar_init(sm.empty(s), 4);  // the consuming warpgroup's four warps
      }
      wg::bar_init(sm.shared(), 1);  // the producer's lane 0, once the share is written
      wg::bar_init_fence();
      wg::prefetch_map(&p.cache_map);  // a parameter, not an input: before the predecessor completes
    }
    __syncthreads();

    reader::wait_for_predecessor<C>();  // before the first read of an input
    // the share of equal lengths, while seq_lens is on its way: the producer loads its first table entries,
    // the consumers its q (used where it is the share)
    const typename Work::Guess guess = Work::guess(p);
    const int guess_pair = guess.pair;
    const bool guessed = guess_pair < Work::pairs(p);
    if (warp >= kConsumers * 4) {
      if constexpr (kSplit) {  // the whole warpgroup gives registers back; its first warp produces
        wg::setmaxnreg_dec<C::kReaderWgSplitProducerRegisters>();
        if (warp != kConsumers * 4) return;
      }
      const typename Work::Lens lens = Work::load_lens(p, 0, lane);  // first: its trip overlaps what follows
      const int col = (guess.tile * kTile) >> kPageShift;
      // (the row spelled out, not reader::table_row: through the helper the address's two 64-bit addends
      // swap registers in two instructions, so the machine code would not stay as it was)
      const int entry =
          guessed
              ? table_entry(p, p.block_table + static_cast<long long>(Work::tokens_of(p, guess_pair).b) * p.max_pages,
                            col, lane)
              : -1;
      const typename Work::Share share = Work::share(p, lane, lens, &guess);  // this CTA's tiles
      if (lane == 0) {
        *sm.share = share;
        wg::bar_arrive(sm.shared());  // (release: the share's stores before the arrival)
      }
      produce(p, sm, share, lane, guessed ? guess_pair : -1, col, entry);
      Work::fill(p, share, lane, 32);  // the columns past the pairs' tiles, while the consumers score
      return;
    }
    if constexpr (kSplit) wg::setmaxnreg_inc<C::kReaderWgSplitConsumerRegisters>();
    int qpair = -1;                          // the pair whose q and weights are staged (or on their way: q_pending)
    bool q_pending = false;                  // its copy group not yet waited for
    const auto stage_pair = [&](int pair) {  // q and the weights by cp.async: no thread waits for them here
      const typename Work::Pair q = Work::tokens_of(p, pair);
      const long long q_token0 = reader::token_row(p, q.b, q.t0);
      const int me = wg::opaque(tid);  // (the addresses computed here, not kept across the tile loop)
      wg::stage_q<H, kChunks, kConsumerThreads, C::kRowBytes, kPairs>(p.q, sm.q, q_token0, q.ntok, ntok_max, me);
      for (int j = me; j < q.ntok * H; j += kConsumerThreads)
        wg::cp4(wg::smem_addr(sm.w + j), p.weights + q_token0 * H + j);
      wg::commit();
      qpair = pair;
      q_pending = true;
    };
    if (guessed) stage_pair(guess_pair);
    wg::bar_wait(sm.shared(), 0);  // (acquire: the producer's share)
    const typename Work::Share share = *sm.share;

    const int group = warp / 4, gwarp = warp % 4;
    const uint32_t keys_addr = wg::smem_addr(sm.keys);
    const uint32_t keys_lo = wg::desc_sw128_lo(keys_addr), q_lo = wg::desc_sw128_lo(wg::smem_addr(sm.q));
    const int row = wg::finish_row(gwarp, gid, tig);
    // q's token and chunk strides in descriptor units (wg::q_chunk_index)
    const uint32_t q_step = kPairs ? static_cast<uint32_t>(ntok_max) * (kQChunkBytes / 16) : kQChunkBytes / 16;
    // the stage's last read is done (its rows' factors are in registers): back to the producer
    const auto release = [&](int s) {
      __syncwarp();
      if (lane == 0) wg::bar_arrive(sm.empty(s));
    };
    // Warpgroup g scores tiles g, g + kConsumers, ... of the share, and every warpgroup takes part in each change
    // of pair alike: all consumers are done with the last pair's q (their tiles before the change), then restage
    // the pair's q and weights together. So each warpgroup meets every pair's first tile; within a pair, where
    // kSkipAhead, it jumps from tile i (warpgroup `turn`'s) to its own next one (the loop's step lands on it).
    typename Work::Cursor at(p, share);
    bool q_used = false;  // some tile was scored with the staged q
    const auto skip_ahead = [&](int& i, int turn) {
      if constexpr (kSkipAhead) {
        const int skip = group - turn + (group > turn ? 0 : kConsumers) - 1;  // tiles between, of other warpgroups
        if (at.tile + skip + 1 < at.at.ntiles) {
          at.tile += skip;
          i += skip;
        }
      }
    };
#pragma unroll 1
    for (int i = 0; i < share.count; ++i, at.advance(p)) {
      if (at.pair != qpair) {
        if (q_pending) wg::wait<0>();                     // no copy still writes the buffer
        if (q_used) wg::named_sync(1, kConsumerThreads);  // every consumer is done with the last pair's q
        stage_pair(at.pair);
        q_used = false;
      }
      if (q_pending) {
        wg::wait<0>();
        wg::fence_async_proxy();  // q, written by cp.async, is read by wgmma
        wg::named_sync(1, kConsumerThreads);
        q_pending = false;
      }
      q_used = true;
      const int turn = i % kConsumers;  // the warpgroup that scores tile i
      if (turn != group) {
        skip_ahead(i, turn);
        continue;
      }
      const int s = i % kStages;
      const int k0 = at.k0();
      wg::bar_wait(sm.full(s), static_cast<uint32_t>(i / kStages) & 1u);
      const uint32_t a_lo = keys_lo + s * (kStageBytes / 16);
      const float factor = tig < 2 ? sm.row_info[s * kTile + row] : 0.0f;  // the row's scale, 1, or NaN
      const int ntok = at.at.ntok;
      if constexpr (kKeyRegisters) {
        uint32_t keys[wg::chunk_steps()][4];  // the tile's A operand
        wg::load_key_fragments(keys, keys_addr + s * kStageBytes, gwarp, lane);
        release(s);  // before any token's wgmma: none reads the stage
        score_from_registers(p, sm, at, keys, q_lo, k0, factor, gwarp, lane);
      } else {
#pragma unroll 1
        for (int t = 0; t < ntok; ++t) {
          const int visible_t = at.visible(p, t);  // keys [0, visible_t) are token t's
          const bool any = k0 < visible_t;         // a tile none of whose keys the token sees costs no mma
          // one array for both groups of the pair cubin: ptxas then gives the m64n64 group's 32 accumulators the
          // registers of the m64n128 group's first half (two arrays do not fit 4 warpgroups per SM)
          float acc[kPairs ? 64 : 32];
          if constexpr (kPairs) {
            if (t + 1 < ntok) {  // tokens t and t + 1 in one m64n128 group: the second sees one key more
              const int visible_u = at.visible(p, t + 1);
              const bool any_u = k0 < visible_u;
              if (any_u)
                wg::tile_mma<kFp8, kChunks, 64>(acc, a_lo, kBoxBytes / 16, q_lo + t * kQTokenUnits, q_step, false);
              if (t + 2 == ntok) release(s);
              wg::finish_with(wg::token_half(acc, 0), any, sm.w + t * H, factor, at.row(p, t), k0, p.max_seq_len,
                              visible_t, gwarp, gid, tig);
              wg::finish_with(wg::token_half(acc, 1), any_u, sm.w + (t + 1) * H, factor, at.row(p, t + 1), k0,
                              p.max_seq_len, visible_u, gwarp, gid, tig);
              ++t;
              continue;
            }
          }
          float (&one)[32] = wg::first_token(acc);
          if (any) wg::tile_mma<kFp8, kChunks>(one, a_lo, kBoxBytes / 16, q_lo + t * kQTokenUnits, q_step, false);
          if (t == ntok - 1) release(s);
          wg::finish_with(one, any, sm.w + t * H, factor, at.row(p, t), k0, p.max_seq_len, visible_t, gwarp, gid, tig);
        }
      }
      skip_ahead(i, turn);
    }
  }
};
#endif  // KGEN_READER_WGMMA

}  // namespace detail

}  // namespace kgen
