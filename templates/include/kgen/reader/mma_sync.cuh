// kgen::indexer_logits, the mma.sync path (every arch; sm_90a where the wgmma path does not read the
// layout, or with kReaderWgmma 0): IndexerLogits, the work split, fragment mapping and epilogue that
// kgen/indexer_logits.cuh's overview describes.
#pragma once

#include "convert.cuh"
#include "launch.cuh"

namespace kgen {

namespace detail {

// D += A * B on the tensor cores (fragment layouts of PTX mma.m16n8k16). Under the CPU
// emulation of the kernel (tests/reader_shim, KGEN_CPU_SHIM) a software mma with the same layouts.
__device__ __forceinline__ void mma_k16_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
#if defined(KGEN_CPU_SHIM)
  kgen_cpu::mma_m16n8k16_bf16(d, a, b0, b1);
#else
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
}

__device__ __forceinline__ void mma_k16_f16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
#if defined(KGEN_CPU_SHIM)
  kgen_cpu::mma_m16n8k16_f16(d, a, b0, b1);
#else
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
}

template <int Bytes>
__device__ __forceinline__ uint4 load_chunk(const uint8_t* p) {
  if constexpr (Bytes == 16) {
    return __ldg(reinterpret_cast<const uint4*>(p));
  } else if constexpr (Bytes == 8) {
    const uint2 a = __ldg(reinterpret_cast<const uint2*>(p)), b = __ldg(reinterpret_cast<const uint2*>(p) + 1);
    return make_uint4(a.x, a.y, b.x, b.y);
  } else {
    static_assert(Bytes == 4, "key loads are 4, 8 or 16 bytes wide");
    const unsigned int* w = reinterpret_cast<const unsigned int*>(p);
    return make_uint4(__ldg(w), __ldg(w + 1), __ldg(w + 2), __ldg(w + 3));
  }
}

template <class C>
struct IndexerLogits {
  static constexpr int H{C::kReaderHeads};
  static constexpr int kNT = H / 8;  // n8 tiles over the heads
  static constexpr int kWarps{C::kReaderWarps};
  static constexpr int kWarpKeys{C::kReaderWarpKeys};
  static constexpr int kMT = kWarpKeys / 16;  // m16 tiles per warp tile
  static constexpr int kRows = 2 * kMT;       // key rows a lane loads per tile: key r * 8 + gid
  static constexpr Dtype kKey = C::kStoreDtype;
  static constexpr bool kFp8 = kKey == Dtype::fp8_e4m3;
  static constexpr bool kFp4 = kKey == Dtype::fp4_e2m1;
  static constexpr int kGroups{C::kReaderGroups};
  static constexpr int kInFlight{C::kReaderGroupsInFlight};
  static constexpr int kBatches = (kGroups + kInFlight - 1) / kInFlight;
  static constexpr int kStepsPerChunk{C::kReaderStepsPerChunk};
  static constexpr int kSteps{C::kReaderSteps};
  static constexpr int kStepElems{C::kReaderStepElems};
  static constexpr int kChunkElems{C::kReaderChunkElems};
  static constexpr int kQBytes{reader::q_bytes(kKey)};
  static constexpr int kVec{C::kReaderKeyVectorBytes};
  static constexpr int kTokensPerCta{C::kReaderTokensPerCta};
  static constexpr bool kScaled = C::kScaleKind != ScaleKind::none;
  static constexpr int kQSlots = kSteps * kNT * 32;  // uint2 slots of one token's q in shared memory
  static constexpr long long kRowBytes = C::kRowBytes;
  static constexpr long long kPageBytes = C::kPageBytes;
  static constexpr int kPageShift{C::kPageShift};
  static constexpr bool kPrefetch = C::kReaderPrefetch != 0;  // the next tile's rows during this one's mma
  // the heads in passes of kNTP n8 tiles: fewer accumulator registers, the key rows reused
  static constexpr int kNTP{kNT / C::kReaderHeadPasses};

  static_assert(H % 8 == 0 && kMT >= 1 && kWarpKeys % 16 == 0, "tile shape");
  static_assert(kStepsPerChunk * kStepElems == kChunkElems, "a chunk feeds whole steps");
  static_assert(kQSlots * 8 == H * C::kHeadDim * reader::kOperandBytes, "q fragment slots cover q exactly");
  static_assert(kQSlots % (kWarps * 32) == 0, "q staging: whole rounds of the CTA's threads");

  // Element (of q's head_dim) that lane tig's 8-B step piece starts at, for k-step s.
  __device__ static __forceinline__ int q_element(int s, int tig) {
    const int g = s / kStepsPerChunk, j = s % kStepsPerChunk;
    return g * 4 * kChunkElems + tig * kChunkElems + j * kStepElems;
  }

  // The 4 mma A registers of m-tile mt for k-step j of a chunk (rows lo = 2mt, hi = 2mt + 1).
  __device__ static __forceinline__ void a_regs(const uint4 (&ch)[kRows], int mt, int j, const float (&fp4s)[kRows],
                                                uint32_t (&a)[4]) {
    const uint4 lo = ch[2 * mt], hi = ch[2 * mt + 1];
    if constexpr (kFp8) {
      // step j takes elements [4j, 4j + 4) of the chunk: word j, widened to two f16x2 words
      const uint32_t wlo = (&lo.x)[j], whi = (&hi.x)[j];
      a[0] = e4m3x2_f16(wlo);
      a[2] = e4m3x2_f16(wlo >> 16);
      a[1] = e4m3x2_f16(whi);
      a[3] = e4m3x2_f16(whi >> 16);
    } else if constexpr (kFp4) {
      // step j takes elements [4j, 4j + 4) of the chunk: bytes 2j and 2j + 1
      const uint32_t wlo = (&lo.x)[j / 2] >> (16 * (j % 2)), whi = (&hi.x)[j / 2] >> (16 * (j % 2));
      a[0] = e2m1x2_bf16(wlo & 0xffu, fp4s[2 * mt]);
      a[2] = e2m1x2_bf16((wlo >> 8) & 0xffu, fp4s[2 * mt]);
      a[1] = e2m1x2_bf16(whi & 0xffu, fp4s[2 * mt + 1]);
      a[3] = e2m1x2_bf16((whi >> 8) & 0xffu, fp4s[2 * mt + 1]);
    } else {
      // step j takes words 2j, 2j + 1 of the chunk (8 bytes)
      a[0] = (&lo.x)[2 * j];
      a[2] = (&lo.x)[2 * j + 1];
      a[1] = (&hi.x)[2 * j];
      a[3] = (&hi.x)[2 * j + 1];
    }
  }

  __device__ static __forceinline__ void mma(float (&d)[4], const uint32_t (&a)[4], uint2 b) {
    if constexpr (kFp8) {
      mma_k16_f16(d, a, b.x, b.y);
    } else {
      mma_k16_bf16(d, a, b.x, b.y);
    }
  }

  __device__ static __forceinline__ float dequant_scale(const uint8_t* p) {
    if constexpr (C::kScaleKind == ScaleKind::ue8m0) {
      return exp2_biased(__ldg(p));
    } else {
      return __ldg(reinterpret_cast<const float*>(p));
    }
  }
  // 2^(e - 127) for a ue8m0 byte e (e = 0: 2^-127, a subnormal; e = 255: NaN)
  __device__ static __forceinline__ float exp2_biased(uint32_t e) {
    if (e == 255u) return __uint_as_float(0x7fc00000u);
    return e == 0u ? __uint_as_float(0x00400000u) : __uint_as_float(e << 23);
  }

  // Where the rows of one warp tile live: per loaded row r (key k0 + 8r + gid) its page (null: not
  // read) and slot, whether its page is outside the table/cache, and the lane's own key (row tig).
  struct Tile {
    const uint8_t* pagep[kRows];
    int slot[kRows];
    bool bad[kRows];
    int my_key;
  };
  // What a tile's rows hold: the lane's chunks, fp4 block scales, and its own key's scale.
  struct Rows {
    uint4 ch[kInFlight][kRows];
    float fp4s[kInFlight][kRows];
    float my_scale;
  };

  __device__ static __forceinline__ Tile locate(const typename C::Params& p, const int* table, int k0, int visible_end,
                                                int key_end, int gid, int tig) {
    Tile t;
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const int key = k0 + 8 * r + gid;
      t.pagep[r] = nullptr;
      t.slot[r] = reader::slot_of<C>(key);
      t.bad[r] = false;
      if (key < visible_end && key < key_end) {
        const int col = key >> kPageShift;
        const int page = col < p.max_pages ? __ldg(table + col) : -1;
        if (page >= 0 && page < p.num_pages) {
          t.pagep[r] = p.cache + page * kPageBytes;
        } else {
          t.bad[r] = true;
        }
      }
    }
    t.my_key = k0 + 8 * tig + gid;
    return t;
  }

  __device__ static __forceinline__ void fetch(const Tile& t, int g0, int tig, Rows& rows) {
    load_groups(t.pagep, t.slot, g0, tig, rows.ch, rows.fp4s);
    rows.my_scale = 1.0f;
    if constexpr (kScaled && !kFp4) {
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        if (r == tig && t.pagep[r] != nullptr) {
          rows.my_scale = dequant_scale(t.pagep[r] + C::kScaleRegionOffset + t.slot[r] * C::kScaleStride);
        }
      }
    }
  }

  __device__ static __forceinline__ bool my_bad(const Tile& t, int tig) {
    bool bad = false;
#pragma unroll
    for (int r = 0; r < kRows; ++r) bad = r == tig ? t.bad[r] : bad;
    return bad;
  }

  __device__ static void run(const typename C::Params& p) {
    KGEN_DYNAMIC_SMEM(smem);
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int gid = lane / 4, tig = lane % 4;
    const int b = blockIdx.y;
    const int t0 = blockIdx.z * kTokensPerCta;
    const int ntok = min(kTokensPerCta, p.next_n - t0);
    // keys per CTA: the context split evenly over gridDim.x, in whole CTA iterations
    constexpr int kStep = kWarps * kWarpKeys;
    const int per_cta = (p.max_seq_len + static_cast<int>(gridDim.x) - 1) / static_cast<int>(gridDim.x);
    const int keys_per_cta = (per_cta + kStep - 1) / kStep * kStep;
    const long long key0 = static_cast<long long>(blockIdx.x) * keys_per_cta;
    if (key0 >= p.max_seq_len) return;  // the whole CTA, before its one __syncthreads
    const int key_end = static_cast<int>(min(static_cast<long long>(p.max_seq_len), key0 + keys_per_cta));
    uint2* qs = reinterpret_cast<uint2*>(smem);
    float* ws = reinterpret_cast<float*>(smem + static_cast<size_t>(ntok) * kQSlots * 8);

    reader::wait_for_predecessor<C>();  // before the first read of an input
    const int seq_len = __ldg(p.seq_lens + b);
    const int* table = reader::table_row(p, b);
    // the last key any of this CTA's tokens can see
    const int visible_end = reader::group_visible_end(p, seq_len, t0, ntok);
    int k0 = static_cast<int>(key0) + warp * kWarpKeys;

    // the first tile's rows are requested before q is staged: the two latencies overlap
    Tile tile = locate(p, table, k0, visible_end, key_end, gid, tig);
    Rows rows;
    if constexpr (kBatches == 1) fetch(tile, 0, tig, rows);

    // stage q (fragment order, as the 16-bit operand) and weights of this CTA's tokens: each thread
    // issues a round of loads before it stores any (one latency per round, not per load)
    const long long q_token0 = reader::token_row(p, b, t0);
    constexpr int kThreads = kWarps * 32, kPer = kQSlots / kThreads, kRound = kPer < 8 ? kPer : 8;
#pragma unroll 1
    for (int t = 0; t < ntok; ++t) {
#pragma unroll 1
      for (int i0 = 0; i0 < kPer; i0 += kRound) {
        uint2 piece[kRound];
#pragma unroll
        for (int u = 0; u < kRound; ++u) {
          const int r = (i0 + u) * kThreads + static_cast<int>(threadIdx.x);
          const int l = r % 32, n = (r / 32) % kNT, s = r / (32 * kNT);
          const long long off = ((q_token0 + t) * H + 8 * n + l / 4) * C::kHeadDim + q_element(s, l % 4);
          if constexpr (kFp8) {  // 4 e4m3 of q -> 4 f16
            piece[u].x = __ldg(reinterpret_cast<const unsigned int*>(p.q + off));
          } else {
            piece[u] = __ldg(reinterpret_cast<const uint2*>(p.q + off * kQBytes));
          }
        }
#pragma unroll
        for (int u = 0; u < kRound; ++u) {
          const int r = (i0 + u) * kThreads + static_cast<int>(threadIdx.x);
          if constexpr (kFp8) piece[u] = make_uint2(e4m3x2_f16(piece[u].x), e4m3x2_f16(piece[u].x >> 16));
          qs[t * kQSlots + r] = piece[u];
        }
      }
    }
    for (int i = threadIdx.x; i < ntok * H; i += blockDim.x) ws[i] = __ldg(p.weights + q_token0 * H + i);
    __syncthreads();

#pragma unroll 1
    for (; k0 < key_end; k0 += kStep) {
      // the next tile's pages now (and with kPrefetch its rows): in flight while this one computes
      const Tile next = locate(p, table, k0 + kStep, visible_end, key_end, gid, tig);
      const bool bad = my_bad(tile, tig);
      if constexpr (kBatches == 1) {
        Rows ahead;
        if constexpr (kPrefetch) fetch(next, 0, tig, ahead);
#pragma unroll 1
        for (int t = 0; t < ntok; ++t) {
          float v[kRows] = {};
          // a tile none of whose keys token t sees costs no mma (its logits are -inf)
          const int passes = k0 < reader::visible_end(p, seq_len, t0, t) ? kNT : 0;
#pragma unroll 1
          for (int n0 = 0; n0 < passes; n0 += kNTP) {
            float acc[kMT][kNTP][4];
            zero(acc);
            compute_groups(rows.ch, rows.fp4s, 0, qs + t * kQSlots, n0, lane, acc);
            accumulate(acc, ws + t * H, n0, tig, v);
          }
          finish(p, v, b, t0 + t, seq_len, tile.my_key, rows.my_scale, bad, key_end, tig);
        }
        if constexpr (kPrefetch) {
          rows = ahead;
        } else {
          fetch(next, 0, tig, rows);
        }
      } else {
#pragma unroll 1
        for (int t = 0; t < ntok; ++t) {
          float v[kRows] = {};
          float my_scale = 1.0f;
          const int passes = k0 < reader::visible_end(p, seq_len, t0, t) ? kNT : 0;
#pragma unroll 1
          for (int n0 = 0; n0 < passes; n0 += kNTP) {
            float acc[kMT][kNTP][4];
            zero(acc);
#pragma unroll 1
            for (int gb = 0; gb < kBatches; ++gb) {
              Rows part;
              fetch(tile, gb * kInFlight, tig, part);
              compute_groups(part.ch, part.fp4s, gb * kInFlight, qs + t * kQSlots, n0, lane, acc);
              my_scale = part.my_scale;
            }
            accumulate(acc, ws + t * H, n0, tig, v);
          }
          finish(p, v, b, t0 + t, seq_len, tile.my_key, my_scale, bad, key_end, tig);
        }
      }
      tile = next;
    }
  }

  __device__ static __forceinline__ void zero(float (&acc)[kMT][kNTP][4]) {
#pragma unroll
    for (int m = 0; m < kMT; ++m)
#pragma unroll
      for (int n = 0; n < kNTP; ++n)
#pragma unroll
        for (int i = 0; i < 4; ++i) acc[m][n][i] = 0.0f;
  }

  // Loads the lane's chunk of groups [g0, g0 + kInFlight) of every row (zeros for unread rows), and
  // for fp4 the chunk's block scale (chunk 4g + tig holds values [32 (4g + tig), +32): one block).
  __device__ static __forceinline__ void load_groups(const uint8_t* const (&pagep)[kRows], const int (&slot)[kRows],
                                                     int g0, int tig, uint4 (&ch)[kInFlight][kRows],
                                                     float (&fp4s)[kInFlight][kRows]) {
#pragma unroll
    for (int gg = 0; gg < kInFlight; ++gg) {
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        ch[gg][r] = make_uint4(0u, 0u, 0u, 0u);
        fp4s[gg][r] = 0.0f;
        const int g = g0 + gg;
        if (pagep[r] != nullptr && g < kGroups) {
          const uint8_t* row = pagep[r] + slot[r] * kRowBytes;
          ch[gg][r] = load_chunk<kVec>(row + g * reader::kGroupBytes + tig * reader::kChunkBytes);
          if constexpr (kFp4) {
            fp4s[gg][r] = exp2_biased(
                __ldg(pagep[r] + C::kScaleRegionOffset + slot[r] * C::kScaleStride + (4 * g + tig) * C::kScaleUnit));
          }
        }
      }
    }
  }

  __device__ static __forceinline__ void compute_groups(const uint4 (&ch)[kInFlight][kRows],
                                                        const float (&fp4s)[kInFlight][kRows], int g0, const uint2* qt,
                                                        int n0, int lane, float (&acc)[kMT][kNTP][4]) {
#pragma unroll
    for (int gg = 0; gg < kInFlight; ++gg) {
      if (g0 + gg >= kGroups) break;
#pragma unroll
      for (int j = 0; j < kStepsPerChunk; ++j) {
        const int s = (g0 + gg) * kStepsPerChunk + j;
        uint32_t a[kMT][4];
#pragma unroll
        for (int m = 0; m < kMT; ++m) a_regs(ch[gg], m, j, fp4s[gg], a[m]);
#pragma unroll
        for (int n = 0; n < kNTP; ++n) {
          const uint2 bq = qt[(s * kNT + n0 + n) * 32 + lane];
#pragma unroll
          for (int m = 0; m < kMT; ++m) mma(acc[m][n], a[m], bq);
        }
      }
    }
  }

  // v[r] += sum over the lane's heads 8n + 2tig + {0, 1} (n in this pass) of w * relu(dot), row r
  __device__ static __forceinline__ void accumulate(const float (&acc)[kMT][kNTP][4], const float* wt, int n0, int tig,
                                                    float (&v)[kRows]) {
#pragma unroll
    for (int n = 0; n < kNTP; ++n) {
      const float2 w = *reinterpret_cast<const float2*>(wt + 8 * (n0 + n) + 2 * tig);
#pragma unroll
      for (int m = 0; m < kMT; ++m) {
        v[2 * m] = fmaf(w.x, fmaxf(acc[m][n][0], 0.0f), v[2 * m]);
        v[2 * m] = fmaf(w.y, fmaxf(acc[m][n][1], 0.0f), v[2 * m]);
        v[2 * m + 1] = fmaf(w.x, fmaxf(acc[m][n][2], 0.0f), v[2 * m + 1]);
        v[2 * m + 1] = fmaf(w.y, fmaxf(acc[m][n][3], 0.0f), v[2 * m + 1]);
      }
    }
  }

  // the quad's lanes sum their heads; lane tig stores row tig (key 8 tig + gid): a warp's 32 stores
  // are the tile's 32 consecutive logits
  __device__ static __forceinline__ void finish(const typename C::Params& p, const float (&v)[kRows], int b, int t,
                                                int seq_len, int my_key, float my_scale, bool my_bad, int key_end,
                                                int tig) {
    float mine = 0.0f;
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      float x = v[r];
      x += __shfl_xor_sync(num::kFullMask, x, 1);
      x += __shfl_xor_sync(num::kFullMask, x, 2);
      if (r == tig) mine = x;
    }
    if (my_key < key_end) {
      const bool visible = my_key < reader::visible_end(p, seq_len, t);
      const float out = !visible ? -__int_as_float(0x7f800000) : my_bad ? __int_as_float(0x7fc00000) : mine * my_scale;
      p.logits[reader::token_row(p, b, t) * p.max_seq_len + my_key] = out;
    }
  }
};

}  // namespace detail

}  // namespace kgen
