// kgen::indexer_logits, the sm_90a staging helpers the pipelines share: the aligned carve-up of the
// dynamic shared memory, q staged as the swizzled B operand, and the block-table lookup of a tile's pages.
#pragma once

#include "wg_primitives.cuh"

namespace kgen {

namespace detail {

#if KGEN_READER_WGMMA
namespace wg {

// The 1024-B aligned base of the carve-up inside the launch's dynamic shared memory, which the host
// sized as reader::wg_smem<C>(ntok): a launch sized for another path would not fit, and stops here.
template <class C>
__device__ __forceinline__ unsigned char* aligned_smem(unsigned char* smem, int ntok) {
  constexpr uint32_t kAlign{C::kReaderWgAlign};
  const uint32_t pad = (kAlign - smem_addr(smem) % kAlign) % kAlign;
  if (mem::dynamic_smem_bytes() < reader::wg_smem<C>(ntok) - kAlign + pad) __trap();
  return smem + pad;
}

// q of the CTA's ntok tokens (rows of kQRowBytes per head in global memory) into shared memory as the
// swizzled B operand, chunk by chunk (kQChunkBytes = H x 128 B each), in the caller's open copy group.
// Token-major (chunk kc of token t at (t x kChunks + kc) x kQChunkBytes), or `ChunkMajor` ((kc x qtok + t) x
// kQChunkBytes, qtok the tokens the buffer holds): then a chunk's consecutive tokens are one B operand of
// 128 rows (m64n128 for two tokens), 1024-B aligned; the same for one chunk per row.
template <int kChunks, bool ChunkMajor>
__device__ __forceinline__ int q_chunk_index(int t, int kc, int qtok) {
  return ChunkMajor ? kc * qtok + t : t * kChunks + kc;
}
template <int H, int kChunks, int kThreads, long long kQRowBytes, bool ChunkMajor = false>
__device__ __forceinline__ void stage_q(const uint8_t* q, unsigned char* sq, long long q_token0, int ntok, int qtok,
                                        int tid) {
  constexpr int kColumns = 128 / 16, kQChunkBytes = H * 128;
  for (int i = tid; i < ntok * kChunks * H * kColumns; i += kThreads) {
    const int col = i % kColumns, h = i / kColumns % H, kc = i / (kColumns * H) % kChunks;
    const int t = i / (kColumns * H * kChunks);
    const uint8_t* src = q + ((q_token0 + t) * H + h) * kQRowBytes + kc * 128 + col * 16;
    cp16(smem_addr(sq + q_chunk_index<kChunks, ChunkMajor>(t, kc, qtok) * kQChunkBytes) + swizzled128(h, col), src,
         16u);
  }
}

// How load_q reads a q row (in global memory) into the B operand's 16-B columns: as stored, one column a load,
// four loads in flight a thread. A gather names the columns one item writes (kColumns: those of 128-B chunk kc
// from column col, a multiple of kColumns, on) and the items in flight a thread (kInFlight).
struct QAsStored {
  static constexpr int kColumns = 1, kInFlight = 4;
  __device__ static __forceinline__ void gather(const uint8_t* row, int kc, int col, uint4 (&out)[kColumns]) {
    out[0] = __ldg(reinterpret_cast<const uint4*>(row + kc * 128 + col * 16));
  }
};

// The same by plain loads and shared stores (no copy group: for a CTA whose copy groups count its key
// stages), the columns gathered from the row by `Gather` (QAsStored, or a pipeline's own k order).
template <int H, int kChunks, int kThreads, long long kQRowBytes, bool ChunkMajor = false, class Gather = QAsStored>
__device__ __forceinline__ void load_q(const uint8_t* q, unsigned char* sq, long long q_token0, int ntok, int qtok,
                                       int tid) {
  constexpr int kColumns = 128 / 16, kQChunkBytes = H * 128, kBatch = Gather::kInFlight;
  constexpr int kItemColumns = Gather::kColumns, kItems = kColumns / kItemColumns;  // items of a 128-B chunk
  static_assert(kColumns % kItemColumns == 0, "a gather's columns divide a chunk's");
  const int n = ntok * kChunks * H * kItems;
  for (int i0 = tid; i0 < n; i0 += kBatch * kThreads) {
    uint4 v[kBatch][kItemColumns];
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const int i = i0 + u * kThreads;
      const int item = i % kItems, h = i / kItems % H, kc = i / (kItems * H) % kChunks;
      const int t = i / (kItems * H * kChunks);
      if (i < n) Gather::gather(q + ((q_token0 + t) * H + h) * kQRowBytes, kc, item * kItemColumns, v[u]);
    }
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const int i = i0 + u * kThreads;
      const int item = i % kItems, h = i / kItems % H, kc = i / (kItems * H) % kChunks;
      const int t = i / (kItems * H * kChunks);
#pragma unroll
      for (int c = 0; c < kItemColumns; ++c)
        if (i < n)
          *reinterpret_cast<uint4*>(sq + q_chunk_index<kChunks, ChunkMajor>(t, kc, qtok) * kQChunkBytes +
                                    swizzled128(h, item * kItemColumns + c)) = v[u][c];
    }
  }
}

// Where a thread's kRowsPerThread rows of a 64-key tile (rows r0 + j * kLoadRows) live (both staging
// paths). `whole`: the page of a tile that lies in one page (page_size a multiple of 64) and is read
// entirely (every key visible to some token of its pair, inside max_seq_len, the page inside the table and
// cache): its rows are consecutive, so the copies need no per-row arithmetic; -1 otherwise, and then
// `rows` holds each row's page: the table's entry, -1 for a row not read, -2 for a visible row whose
// page lies outside the table or the cache (its logit is NaN). `k0`: the tile's first key, `pair` its pair
// (-1: no tile, nothing read). Looked up one step ahead of the copies, so the table's latency is not on
// their path.
template <class C, int kLoadRows, int kRowsPerThread>
struct TilePages {  // (no static data members: they would be emitted into the cubin's global data)
  int whole;
  int k0;
  int pair;
  int rows[kRowsPerThread];

  KGEN_HD static constexpr bool whole_pages() { return C::kPageSize % C::kReaderWgTileKeys == 0; }
  // the tile at `cur` (a Work cursor; `live` false: past the CTA's share, nothing looked up)
  template <class Cursor>
  __device__ __forceinline__ void lookup(const typename C::Params& p, const Cursor& cur, bool live, int r0) {
    constexpr int kTile{C::kReaderWgTileKeys}, kPageShift{C::kPageShift};
    whole = -1;
    pair = live ? cur.pair : -1;
    k0 = cur.k0();
#pragma unroll
    for (int j = 0; j < kRowsPerThread; ++j) rows[j] = -1;
    if (!live) return;
    const int* table = reader::table_row(p, cur.at.b);
    const int visible_end = cur.visible(p, cur.at.ntok - 1), key_end = p.max_seq_len;
    if constexpr (whole_pages()) {
      const int c = k0 >> kPageShift;
      const int page = c < p.max_pages ? __ldg(table + c) : -1;
      if (k0 + kTile <= min(visible_end, key_end) && page >= 0 && page < p.num_pages) {
        whole = page;
        return;
      }
    }
#pragma unroll
    for (int j = 0; j < kRowsPerThread; ++j) {
      const int key = k0 + r0 + j * kLoadRows;
      if (key < visible_end && key < key_end) {
        const int c = key >> kPageShift;
        const int page = c < p.max_pages ? __ldg(table + c) : -1;
        rows[j] = page >= 0 && page < p.num_pages ? page : -2;
      }
    }
  }
};

}  // namespace wg
#endif  // KGEN_READER_WGMMA

}  // namespace detail

}  // namespace kgen
