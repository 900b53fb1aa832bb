// kgen::indexer_logits, the sm_90a epilogue: a 64-key tile's accumulators (m64n64, 64 heads) summed over
// the heads (relu, * w) and the quad's lanes, scaled per row, stored as the tile's logits.
//
// Accumulator layout (PTX wgmma, f32 D of m64nN): thread (warp w, gid = lane / 4, tig = lane % 4) holds
// d[4j + 2i + c] = row 16w + gid + 8i, column (head) 8j + 2tig + c. The sum over heads is per thread
// (relu, * w), then over the quad's 4 lanes; lanes tig 0 and 1 store rows gid and gid + 8. Of m64n128 (two
// tokens' 64 heads each) d[0, 32) are the first token's columns, d[32, 64) the second's: each half is
// one m64n64's accumulators, and goes through the same epilogue. Two m64n32 groups (keys in registers) are a
// token's heads [0, 32) and [32, 64), summed in the order of m64n64's columns.
#pragma once

#include "launch.cuh"
#include "wg_primitives.cuh"

namespace kgen {

namespace detail {

#if KGEN_READER_WGMMA
namespace wg {

// The epilogue of a 64-key tile (the accumulators of m64n64, 64 heads; WgLogits and WgFp4Logits): token
// t's logits row is `out` (logits + (b * next_n + t) * max_seq_len)
// the tile row whose logit this thread stores (tig < 2: rows gid and gid + 8 of the warp's 16)
__device__ __forceinline__ int finish_row(int warp, int gid, int tig) {
  return 16 * warp + gid + 8 * tig;
}
// acc's J column groups (8 heads each, their weights from `wt` on) added into the row sums: v0 and u0 row gid's even
// and odd heads, v1 and u1 row gid + 8's (four chains, each half as deep as one per row)
template <int J>
__device__ __forceinline__ void add_head_sums(const float (&acc)[4 * J], const float* wt, int tig, float& v0, float& u0,
                                              float& v1, float& u1) {
#pragma unroll
  for (int j = 0; j < J; ++j) {
    const float2 w = *reinterpret_cast<const float2*>(wt + 8 * j + 2 * tig);
    v0 = fmaf(w.x, fmaxf(acc[4 * j], 0.0f), v0);
    u0 = fmaf(w.y, fmaxf(acc[4 * j + 1], 0.0f), u0);
    v1 = fmaf(w.x, fmaxf(acc[4 * j + 2], 0.0f), v1);
    u1 = fmaf(w.y, fmaxf(acc[4 * j + 3], 0.0f), u1);
  }
}
// the row sums added over the quad's 4 lanes
__device__ __forceinline__ void quad_sums(float& v0, float& v1) {
  v0 += __shfl_xor_sync(num::kFullMask, v0, 1);
  v0 += __shfl_xor_sync(num::kFullMask, v0, 2);
  v1 += __shfl_xor_sync(num::kFullMask, v1, 1);
  v1 += __shfl_xor_sync(num::kFullMask, v1, 2);
}
// lanes tig 0 and 1 store rows gid and gid + 8 (their quad's sums v0, v1) as `out`[key], times `factor` (the row's
// scale, 1, or NaN for a bad page), -inf at keys the token does not see
__device__ __forceinline__ void store_logit(float v0, float v1, float factor, float* out, int k0, int key_end,
                                            int visible_t, int warp, int gid, int tig) {
  if (tig < 2) {
    const int key = k0 + finish_row(warp, gid, tig);
    if (key < key_end) {
      const float logit = key < visible_t ? (tig ? v1 : v0) * factor : -__int_as_float(0x7f800000);
      out[key] = logit;
    }
  }
}
// a thread's row sums over its quad, stored (store_logit)
__device__ __forceinline__ void finish_sums(float v0, float v1, float factor, float* out, int k0, int key_end,
                                            int visible_t, int warp, int gid, int tig) {
  quad_sums(v0, v1);
  store_logit(v0, v1, factor, out, k0, key_end, visible_t, warp, gid, tig);
}
// `factor`: this thread's row's (finish_row; its scale, 1, or NaN for a bad page)
__device__ __forceinline__ void finish_with(const float (&acc)[32], bool any, const float* wt, float factor, float* out,
                                            int k0, int key_end, int visible_t, int warp, int gid, int tig) {
  float v0 = 0.0f, v1 = 0.0f;  // rows gid and gid + 8 of the warp's 16
  if (any) {
    float u0 = 0.0f, u1 = 0.0f;  // the odd heads' sums: two chains per row, half as deep
    add_head_sums<8>(acc, wt, tig, v0, u0, v1, u1);
    v0 += u0;
    v1 += u1;
    quad_sums(v0, v1);
  }
  store_logit(v0, v1, factor, out, k0, key_end, visible_t, warp, gid, tig);
}
// token u's (0 or 1) accumulators of an m64n128 group
__device__ __forceinline__ const float (&token_half(const float (&acc)[64], int u))[32] {
  return *reinterpret_cast<const float (*)[32]>(acc + 32 * u);
}
// the first (or only) token's accumulators of an m64n128 (or m64n64) group, writable: the m64n64 group of the pair
// cubin's odd token runs on them
template <int N>
__device__ __forceinline__ float (&first_token(float (&acc)[N]))[32] {
  static_assert(N == 32 || N == 64, "m64n64 or m64n128 accumulators");
  return *reinterpret_cast<float (*)[32]>(acc);
}
__device__ __forceinline__ void finish(const float (&acc)[32], bool any, const float* wt, const float* info, float* out,
                                       int k0, int key_end, int visible_t, int warp, int gid, int tig) {
  const float factor = tig < 2 ? info[finish_row(warp, gid, tig)] : 0.0f;
  finish_with(acc, any, wt, factor, out, k0, key_end, visible_t, warp, gid, tig);
}

// A tile's tokens from key tiles the warpgroup holds in the wgmma's A registers (WgTmaLogits' fp8 tiles, WgFp4Logits'
// held fp4 tile): each token's heads [0, 32) and [32, 64) are two m64n32 groups, `issue(acc, b_lo)` committing one
// of them (acc = the held tile times q's 32 rows from descriptor b_lo on), each issued before the warpgroup sums
// the one ahead of it, so a wgmma runs while it adds up heads, with the 32 accumulators one m64n64 group takes. Every
// token is issued, also one that sees no key of the tile (its logits there are -inf whatever it sums; only the pair's
// last tile, starting fewer than ntok keys before the end of what its last token sees, can lie past the first
// token's keys): the token index is then the unrolled loop's, each q descriptor the first's plus a constant. The
// heads are summed in m64n64's order: the logits are the one-token cubin's, bitwise. `w`: the tokens' weights (H a
// token); `q_lo`, `token_units`, `half_units`: the first token's q, a token's q and heads [32, 64) of it, in
// descriptor units; `factor`: this thread's row's (finish_with).
template <int kTokens, int H, class Params, class Cursor, class Issue>
__device__ __forceinline__ void score_halves(const Params& p, const Cursor& at, const float* w, uint32_t q_lo,
                                             uint32_t token_units, uint32_t half_units, float factor, int k0, int warp,
                                             int gid, int tig, Issue&& issue) {
  const int ntok = at.at.ntok;
  float lo[16], hi[16];  // heads [0, 32) and [32, 64) of a token
  issue(lo, q_lo);
  float* out = at.row(p, 0);  // token t's logits row; the next token's is max_seq_len further
  // unrolled, and a path per case: an accumulator array in flight never meets another value of itself where
  // paths join (ptxas would copy it there, and serialize every wgmma)
#pragma unroll
  for (int t = 0; t < kTokens; ++t) {
    const uint32_t q_t = q_lo + t * token_units;
    const float* wt = w + t * H;
    const int visible_t = at.visible(p, t);
    issue(hi, q_t + half_units);
    mma_wait<1>();
    keep(lo);
    float v0 = 0.0f, u0 = 0.0f, v1 = 0.0f, u1 = 0.0f;
    add_head_sums<4>(lo, wt, tig, v0, u0, v1, u1);
    if (t + 1 == ntok) {
      mma_wait<0>();
      keep(hi);
      add_head_sums<4>(hi, wt + H / 2, tig, v0, u0, v1, u1);
      finish_sums(v0 + u0, v1 + u1, factor, out, k0, p.max_seq_len, visible_t, warp, gid, tig);
      break;
    }
    keep_sums(v0, u0, v1, u1);  // lo summed before the next token's first half overwrites it
    issue(lo, q_t + token_units);
    mma_wait<1>();
    keep(hi);
    add_head_sums<4>(hi, wt + H / 2, tig, v0, u0, v1, u1);
    finish_sums(v0 + u0, v1 + u1, factor, out, k0, p.max_seq_len, visible_t, warp, gid, tig);
    out += p.max_seq_len;
  }
}

}  // namespace wg
#endif  // KGEN_READER_WGMMA

}  // namespace detail

}  // namespace kgen
