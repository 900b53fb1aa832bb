// kgen::indexer_logits, the sm_90a work split (wg::Work): which 64-key tiles of which (sequence, token
// group) pairs each CTA of the one-wave grid scores, derived by every CTA from seq_lens.
#pragma once

#include "launch.cuh"

namespace kgen {

namespace detail {

#if KGEN_READER_WGMMA
namespace wg {

// The launch's work, split by the keys each sequence really has (kgen.reader_plan.reader_wg_launch: a 1-D grid,
// one wave). A "pair" is sequence b's query-token group g (pair = b * groups + g; tokens [g kTokens, +ntok)),
// its tiles the 64-key tiles [0, ntiles) of b's context some token of the group sees:
// ntiles = ceil(min(visible_end, max_seq_len) / 64), visible_end = seq_len - next_n + t0 + ntok; its "fill
// tiles" the tm - ntiles others (tm = ceil(max_seq_len / 64): no key there is visible, -inf for the pair's
// ntok rows). The work is the list of every pair's tiles, pair by pair (T of them); CTA c of G = gridDim.x
// takes tiles [c k, (c + 1) k) of it, k = ceil(T / G) (so equal lengths split on pair boundaries where k
// divides a pair's tiles: no change of q inside a CTA), and likewise its share of the F = pairs x tm - T fill
// tiles. Each CTA derives its share from seq_lens itself (every warp alike: a sum and a scan over
// B x groups lengths, no schedule kernel and nothing on the host that depends on the lengths, so a captured
// CUDA graph replays it for any lengths). `guess` is the share where every pair has tm tiles (equal
// lengths): known before seq_lens is read, so the first table entries and q can be loaded meanwhile, and
// the share itself where the lengths say F = 0 (no division after they land).
template <class C, int kTokens, int kTile>
struct Work {
  struct Pair {
    int b, t0, ntok, seq_len, ntiles;
  };
  struct Share {
    int pair, tile, count;     // where the CTA's first tile is, and how many it scores
    int fill_pair, fill_tile;  // where its share of the fill tiles starts (fill tile fill_tile of that pair)
    int seq_len;               // the first pair's sequence length (a Cursor starts there without a load)
    long long fill_count;
  };
  // the share where every pair has tiles_max tiles: (pair, tile) of its first tile (pair = pairs(p) if none),
  // the list's index of that tile before clamping, and the tiles per CTA
  struct Guess {
    int pair, tile;
    long long t_lo, k;
  };

  __device__ static __forceinline__ int groups(const typename C::Params& p) {
    return (p.next_n + kTokens - 1) / kTokens;
  }
  __device__ static __forceinline__ int pairs(const typename C::Params& p) { return p.batch * groups(p); }
  __device__ static __forceinline__ int tiles_max(const typename C::Params& p) {
    return (p.max_seq_len + kTile - 1) / kTile;
  }

  // the pair's sequence and tokens (no load; one group per sequence, next_n <= kTokens, needs no division)
  __device__ static __forceinline__ Pair tokens_of(const typename C::Params& p, int pair) {
    const int ng = groups(p);
    Pair r;
    r.b = ng == 1 ? pair : pair / ng;
    r.t0 = ng == 1 ? 0 : (pair - r.b * ng) * kTokens;
    r.ntok = min(kTokens, p.next_n - r.t0);
    r.seq_len = 0;
    r.ntiles = 0;
    return r;
  }
  // the 64-key tiles of a pair's tokens [t0, +ntok) of a sequence of seq_len keys
  __device__ static __forceinline__ int tiles_of(const typename C::Params& p, int t0, int ntok, int seq_len) {
    const long long vis = reader::group_visible_end<long long>(p, seq_len, t0, ntok);
    const long long end = vis < 0 ? 0 : vis < p.max_seq_len ? vis : p.max_seq_len;
    return static_cast<int>(static_cast<unsigned>(end + kTile - 1) / static_cast<unsigned>(kTile));
  }
  __device__ static __forceinline__ Pair pair_of(const typename C::Params& p, int pair) {
    Pair r = tokens_of(p, pair);
    r.seq_len = __ldg(p.seq_lens + r.b);
    r.ntiles = tiles_of(p, r.t0, r.ntok, r.seq_len);
    return r;
  }

  // A round of the lengths: lane l's pairs base + l, + 32, + 64, + 96 (indices clamped to the last pair, so
  // the four loads are unconditional and in flight together). The first round is loaded before anything
  // else, so its trip overlaps the rest of the prologue (a launch never has zero pairs: kgen.indexer).
  struct Lens {
    int v[4];
  };
  __device__ static __forceinline__ Lens load_lens(const typename C::Params& p, int base, int lane) {
    const int np = pairs(p), ng = groups(p);
    Lens l;
    if (ng == 1) {
#pragma unroll
      for (int u = 0; u < 4; ++u) l.v[u] = __ldg(p.seq_lens + min(base + u * 32 + lane, np - 1));
    } else {
#pragma unroll
      for (int u = 0; u < 4; ++u) l.v[u] = __ldg(p.seq_lens + min(base + u * 32 + lane, np - 1) / ng);
    }
    return l;
  }
  // the tiles of the round's pairs lane l holds (0 past the last pair)
  __device__ static __forceinline__ unsigned round_tiles(const typename C::Params& p, const Lens& l, int base, int lane,
                                                         int u) {
    const int pair = base + u * 32 + lane;
    if (pair >= pairs(p)) return 0u;
    const int ng = groups(p);
    const int t0 = ng == 1 ? 0 : pair % ng * kTokens;
    return static_cast<unsigned>(tiles_of(p, t0, min(kTokens, p.next_n - t0), l.v[u]));
  }

  // ceil(a / b) for 0 <= a, 0 < b (32-bit division where both fit)
  __device__ static __forceinline__ long long ceil_div(long long a, long long b) {
    if (a < (1ll << 32) && b < (1ll << 32)) {
      const unsigned ua = static_cast<unsigned>(a), ub = static_cast<unsigned>(b);
      return ua / ub + (ua % ub != 0u);
    }
    return (a + b - 1) / b;
  }
  __device__ static __forceinline__ long long shfl64(long long v, int src) {
    const unsigned lo = __shfl_sync(num::kFullMask, static_cast<unsigned>(v), src);
    const unsigned hi =
        __shfl_sync(num::kFullMask, static_cast<unsigned>(static_cast<unsigned long long>(v) >> 32), src);
    return static_cast<long long>((static_cast<unsigned long long>(hi) << 32) | lo);
  }
  // inclusive prefix sum over the warp's lanes (a pair's tiles < 2^26: 32 of them fit 32 bits)
  __device__ static __forceinline__ unsigned scan32(unsigned v, int lane) {
#pragma unroll
    for (int d = 1; d < 32; d *= 2) {
      const unsigned o = __shfl_sync(num::kFullMask, v, lane >= d ? lane - d : lane);
      if (lane >= d) v += o;
    }
    return v;
  }
  // (redux.sync: one instruction where a shuffle tree is five dependent ones; every lane takes part)
  __device__ static __forceinline__ unsigned warp_sum(unsigned v) { return __reduce_add_sync(num::kFullMask, v); }
  __device__ static __forceinline__ unsigned warp_or(unsigned v) { return __reduce_or_sync(num::kFullMask, v); }
  // (pair, tile) of tile t_lo of the list where every pair has tm tiles (32-bit division where it fits)
  __device__ static __forceinline__ void full_at(long long t_lo, long long tm, int& pair, int& tile) {
    if (t_lo < (1ll << 32)) {
      const unsigned q = static_cast<unsigned>(t_lo) / static_cast<unsigned>(tm);
      pair = static_cast<int>(q);
      tile = static_cast<int>(static_cast<unsigned>(t_lo) - q * static_cast<unsigned>(tm));
    } else {
      pair = static_cast<int>(t_lo / tm);
      tile = static_cast<int>(t_lo - pair * tm);
    }
  }

  __device__ static __forceinline__ Guess guess(const typename C::Params& p) {
    const long long tm = tiles_max(p), T = pairs(p) * tm;
    Guess g;
    g.k = ceil_div(T, gridDim.x);
    g.t_lo = blockIdx.x * g.k;
    g.pair = pairs(p);
    g.tile = 0;
    if (g.t_lo < T) full_at(g.t_lo, tm, g.pair, g.tile);
    return g;
  }
  // the length of `pair` (warp-uniform) of the first round `first` (load_lens(p, 0, lane)) where it holds it,
  // by a shuffle; else loaded
  __device__ static __forceinline__ int first_len(const typename C::Params& p, const Lens& first, int pair) {
    if (pair < 128) {
      const int u = pair >> 5;
      const int v = u == 0 ? first.v[0] : u == 1 ? first.v[1] : u == 2 ? first.v[2] : first.v[3];
      return static_cast<int>(__shfl_sync(num::kFullMask, static_cast<unsigned>(v), pair & 31));
    }
    return __ldg(p.seq_lens + tokens_of(p, pair).b);
  }

  // this CTA's share (every lane of the calling warp gets it); `first`: load_lens(p, 0, lane), `known`: guess(p)
  // where the caller has it (else computed where the share is the guess)
  __device__ static Share share(const typename C::Params& p, int lane) {
    return share(p, lane, load_lens(p, 0, lane), nullptr);
  }
  __device__ static Share share(const typename C::Params& p, int lane, const Lens& first, const Guess* known) {
    const int np = pairs(p), tm = tiles_max(p);
    long long T = 0;
    // pass 1: the tiles' count, a round of 128 pairs at a time, each sum over 64 pairs (< 2^31: a pair has
    // at most 2^25 tiles)
    for (int base = 0; base < np; base += 128) {
      const Lens l = base == 0 ? first : load_lens(p, base, lane);
      const unsigned n01 = round_tiles(p, l, base, lane, 0) + round_tiles(p, l, base, lane, 1);
      const unsigned n23 = round_tiles(p, l, base, lane, 2) + round_tiles(p, l, base, lane, 3);
      T += static_cast<long long>(warp_sum(n01)) + warp_sum(n23);
    }
    const long long F = static_cast<long long>(np) * tm - T;
    Share s;
    s.fill_pair = np;
    s.fill_tile = 0;
    s.fill_count = 0;
    s.seq_len = 0;
    if (F == 0) {  // every pair has tm tiles (equal lengths): the share is the guess
      const Guess g = known ? *known : guess(p);
      s.pair = g.pair;
      s.tile = g.tile;
      s.count = g.t_lo < T ? static_cast<int>(g.k < T - g.t_lo ? g.k : T - g.t_lo) : 0;
      if (s.pair < np) s.seq_len = first_len(p, first, s.pair);
      return s;
    }
    const long long G = gridDim.x, c = blockIdx.x, kt = ceil_div(T, G), kf = ceil_div(F, G);
    const long long t_lo = c * kt < T ? c * kt : T, t_hi = (c + 1) * kt < T ? (c + 1) * kt : T;
    const long long f_lo = c * kf < F ? c * kf : F, f_hi = (c + 1) * kf < F ? (c + 1) * kf : F;
    s.count = static_cast<int>(t_hi - t_lo);
    s.fill_count = f_hi - f_lo;
    s.pair = np;
    s.tile = 0;
    long long tb = 0;  // tiles before this chunk of pairs
    for (int base = 0; base < np && ((s.count && s.pair == np) || (s.fill_count && s.fill_pair == np));
         base += 32) {  // pass 2: where the shares start
      const int pair = base + lane;
      const Pair q = pair < np ? pair_of(p, pair) : Pair{};
      const unsigned nt = pair < np ? static_cast<unsigned>(q.ntiles) : 0u;
      const unsigned nf = pair < np ? static_cast<unsigned>(tm) - nt : 0u;
      const long long it = tb + scan32(nt, lane), t_ex = it - nt;  // tiles through / before this pair
      const long long f_in = static_cast<long long>(pair + 1) * tm - it, f_ex = f_in - nf;  // fill tiles likewise
      const unsigned at = warp_or((nt && t_ex <= t_lo && t_lo < it ? (lane + 1u) << 8 : 0u) |
                                  (nf && f_ex <= f_lo && f_lo < f_in ? lane + 1u : 0u));
      const int at_t = static_cast<int>(at >> 8), at_f = static_cast<int>(at & 0xffu);
      if (s.pair == np && at_t) {
        s.pair = base + at_t - 1;
        s.tile = static_cast<int>(t_lo - shfl64(t_ex, at_t - 1));
        s.seq_len = static_cast<int>(__shfl_sync(num::kFullMask, static_cast<unsigned>(q.seq_len), at_t - 1));
      }
      if (s.fill_pair == np && at_f) {
        s.fill_pair = base + at_f - 1;
        s.fill_tile = static_cast<int>(f_lo - shfl64(f_ex, at_f - 1));
      }
      tb = shfl64(it, 31);
    }
    if (s.pair == np) s.count = 0;
    if (s.fill_pair == np) s.fill_count = 0;
    return s;
  }

  // Walks the list from a share's first tile: `pair`, `tile` and the pair's facts `at` (pairs without
  // tiles skipped). Past the last pair, `pair` is pairs(p) and nothing more is read; the first pair's length
  // is the share's.
  struct Cursor {
    int pair, tile, np;
    Pair at;
    __device__ __forceinline__ Cursor(const typename C::Params& p, const Share& s)
        : pair(s.pair), tile(s.tile), np(pairs(p)) {
      at.ntiles = 0;
      if (pair < np) {
        at = tokens_of(p, pair);
        at.seq_len = s.seq_len;
        at.ntiles = tiles_of(p, at.t0, at.ntok, at.seq_len);
      }
    }
    __device__ __forceinline__ void advance(const typename C::Params& p) {
      if (++tile < at.ntiles) return;
      tile = 0;
      at.ntiles = 0;
      while (++pair < np) {
        at = pair_of(p, pair);
        if (at.ntiles > 0) return;
      }
    }
    __device__ __forceinline__ int k0() const { return tile * kTile; }
    // logits row of the pair's token t (of at.ntok)
    __device__ __forceinline__ float* row(const typename C::Params& p, int t) const {
      return p.logits + (reader::token_row(p, at.b, at.t0) + t) * p.max_seq_len;
    }
    // keys [0, visible(t)) are the pair's token t's
    __device__ __forceinline__ int visible(const typename C::Params& p, int t) const {
      return reader::visible_end(p, at.seq_len, at.t0, t);
    }
  };

  // The share's fill tiles (-inf), by `threads` threads (thread index `tid`): plain stores, a warp's 32 one line.
  __device__ static void fill(const typename C::Params& p, const Share& s, int tid, int threads) {
    const int np = pairs(p), tm = tiles_max(p);
    long long left = s.fill_count;
    int j = s.fill_tile;
    for (int pair = s.fill_pair; left > 0 && pair < np; ++pair, j = 0) {
      const Pair q = pair_of(p, pair);
      const int avail = tm - q.ntiles - j;
      if (avail <= 0) continue;
      const int n = avail < left ? avail : static_cast<int>(left);
      const int c0 = (q.ntiles + j) * kTile, c1 = min(p.max_seq_len, c0 + n * kTile);
      for (int t = 0; t < q.ntok; ++t) {
        float* row = p.logits + (reader::token_row(p, q.b, q.t0) + t) * p.max_seq_len;
        for (int i = c0 + tid; i < c1; i += threads) row[i] = -__int_as_float(0x7f800000);
      }
      left -= n;
    }
  }
};

}  // namespace wg
#endif  // KGEN_READER_WGMMA

}  // namespace detail

}  // namespace kgen
