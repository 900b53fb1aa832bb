// kgen::indexer_topk: the k largest visible logits of each query row, by radix select (docs/reader.md, "Top-k").
//
// One CTA per row r = b * next_n + j of the reader's fp32 logits [B * next_n, max_seq_len]. The row sees its
// first L = clamp(seq_lens[b] - next_n + 1 + j, 0, max_seq_len) keys (kgen.score's visibility rule). Each
// logit maps to an order-preserving uint32 (larger float -> larger key; -0 and +0 one key) and to a coarse bin
// (coarse_bin of the key, coarse_bin_of of the value: the sign, the octave within a window and the top mantissa
// bits; a monotone map):
//   * a read of the row builds the coarse bins' shared-memory histogram; a suffix scan finds the threshold bin
//     (fewer than k keys above it, at least k in it and above);
//   * when that bin holds at most kTopkCandidates keys (every row of at most kTopkCandidates keys), a second
//     read emits the keys above it and copies the bin's (key, index) pairs into shared memory, where a thread
//     per candidate counts the candidates ahead of its own (at most kTopkRankCap of them), or they are
//     refined: the value's bits, kTopkRefineBits at a time, then, among the keys equal to the k-th value, the
//     indices (the lower index wins: ~index is the key);
//   * else (a row of few distinct values) the k largest keys are selected digit by digit, most significant
//     first: a read builds the histogram of the current digit among the keys that match the digits fixed so
//     far, the next read emits the keys above the threshold bin and, once the bin fits, copies it into shared
//     memory for the refinement; otherwise it builds the next digit's histogram.
//
// A long row runs on a cluster of C = gridDim.x CTAs (the launch's cluster dimension is (gridDim.x, 1, 1); rank =
// blockIdx.x, kgen.topk_plan.topk_cluster picks C from max_seq_len). CTA r takes keys [r * s, (r + 1) * s) of the row
// (s = ceil(L / C) rounded up to four), held in shared memory where the launch gave it room (else each pass reads the
// slice again from the row: kgen.topk_plan.topk_shared_bytes). The coarse bins come first, as on one CTA: each rank
// adds its histogram of them into rank 0's, where rank 0 alone finds the row's threshold bin. When that bin holds at
// most kTopkClusterCandidates keys, one read of each slice emits its winners and sends its share of the bin's (key,
// index) pairs into rank 0's shared memory (offsets from atomics on rank 0's counters), and rank 0 refines them
// alone. Else the digit loop, every digit (kTopkClusterBits bits) a local histogram, a cluster barrier and a merge
// through distributed shared memory: rank r sums the C histograms' chunk r of the bins, and after a second cluster
// barrier every CTA finds the same threshold from the chunks' counts and the one chunk that holds it
// (cluster_threshold); winners go to the row's output at positions counted by an atomic in rank 0's shared memory;
// keys equal to the k-th value are taken in index order across the ranks (rank r takes its first min(eq_r, need - sum
// of eq below r), eq_r read from the ranks' last histograms). No global workspace.
// On one CTA, a bin that still overflows after all 32 bits (more than kTopkCandidates keys equal to the k-th
// value) is emitted by one ordered read of the row (a block scan per chunk), the same rule.
//
// Output: indices [B * next_n, k] int32. A row with L > k holds k distinct indices < L in no particular order;
// a row with L <= k holds 0..L-1 ascending, then -1 (SGLang's and vLLM's padding). indexer_topk_slots runs the same
// selection, then writes each index as its cache slot through the block table (map_to_slots). Every number the kernel
// builds in (threads, digits, capacity, shared memory) comes from kgen/topk_plan.py through the config.
#pragma once

#include "memory.cuh"

// the CPU emulation (tests/topk_shim) gives a CTA's dynamic and static shared memory its own way
#ifndef KGEN_DYNAMIC_SMEM
#define KGEN_DYNAMIC_SMEM(name) extern __shared__ __align__(16) unsigned char name[]
#endif

// distributed shared memory and the cluster barrier (sm_90+); the CPU emulation (tests/topk_shim) defines its own
#ifndef KGEN_CLUSTER_SHIM
namespace kgen {
namespace cluster {
// the generic address of `p` (this CTA's shared memory) in the shared memory of the cluster's CTA `rank`
template <class T>
__device__ __forceinline__ T* map(T* p, unsigned rank) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  unsigned long long out;
  asm volatile("mapa.u64 %0, %1, %2;" : "=l"(out) : "l"(reinterpret_cast<unsigned long long>(p)), "r"(rank));
  return reinterpret_cast<T*>(out);
#else
  return p;  // no clusters before sm_90: every launch has one CTA per row
#endif
}
// The cluster barrier in two halves: arrive, work that needs no other CTA, then wait (until every thread of every
// CTA of the cluster arrived). A thread whose memory writes before the barrier another CTA reads after it arrives
// with `publish` (release: a GPU-scope memory barrier first, which waits for the thread's stores, global ones too);
// a thread that publishes nothing arrives relaxed, without it. The wait acquires. sync() is the two at once.
__device__ __forceinline__ void arrive(bool publish = true) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if (publish) {
    asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory");
  } else {
    asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
  }
#endif
}
__device__ __forceinline__ void wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory");
#else
  __syncthreads();  // no clusters before sm_90: the CTA alone
#endif
}
__device__ __forceinline__ void sync(bool publish = true) {
  arrive(publish);
  wait();
}
}  // namespace cluster
}  // namespace kgen
#endif

namespace kgen {
namespace topk {

constexpr unsigned kFullMask = 0xffffffffu;
constexpr uint32_t kSignBit = 1u << 31;  // of an IEEE float; also the top bit of ~index (indices < 2^31)

// larger float -> larger key; -0.0 is +0.0's key (the two compare equal); every NaN above +inf, as torch.topk
__device__ __forceinline__ uint32_t order_key(float f) {
  const uint32_t u = __float_as_uint(__fadd_rn(f, 0.0f));  // -0 + 0 = +0 (round to nearest)
  const uint32_t flip = static_cast<uint32_t>(static_cast<int>(u) >> 31) | kSignBit;
  return f != f ? 0xffffffffu : u ^ flip;
}

// The coarse bin of an order key (so -0 is +0's bin and NaN the top one): below kCodes for a negative value, from
// kCodes for the others, then the magnitude's code: its octave within the window [2^Low, 2^(Low + octaves)) and its
// top Mantissa bits, clamped to the window (smaller magnitudes share the lowest code, larger and inf and NaN the
// highest). The map is monotone (a larger key never has a lower bin) and integer-only: one histogram splits a row
// into the keys above, in and below a threshold bin, though the bins are no prefix of the key. 32 bins per octave
// where the key's own top 11 bits give 4: a row's logits, a few octaves wide, spread over many more bins (fewer
// candidates in the threshold bin, fewer shared-memory atomics on one counter).
template <class C>
__host__ __device__ __forceinline__ constexpr uint32_t coarse_bin(uint32_t key) {
  constexpr int kMantissa{C::kTopkCoarseMantissaBits};
  constexpr int kCodes = 1 << (C::kTopkCoarseBits - 1);                 // magnitude codes per sign
  constexpr int kLow = (127 + C::kTopkCoarseLowExponent) << kMantissa;  // the window's lowest code, unclamped
  static_assert(C::kTopkCoarseBits - 1 > kMantissa && kMantissa <= 23, "a window of whole octaves");
  static_assert(C::kTopkCoarseLowExponent >= -126 && C::kTopkCoarseLowExponent + (kCodes >> kMantissa) <= 128,
                "the window lies within fp32's normal exponents");
  const bool negative = (key & kSignBit) == 0;
  const uint32_t magnitude = (negative ? ~key : key) & ~kSignBit;  // the value's bits, less its sign
  const int unclamped = static_cast<int>(magnitude >> (23 - kMantissa)) - kLow;
  const int code = unclamped < 0 ? 0 : (unclamped > kCodes - 1 ? kCodes - 1 : unclamped);
  return static_cast<uint32_t>(negative ? kCodes - 1 - code : kCodes + code);
}

// The smallest order key whose coarse bin is `bin` (in [0, 2 kCodes)), so that a threshold bin is a range of keys
// and a read compares values with its ends (coarse_values) instead of binning them again. A non-negative value's
// code c starts at magnitude (c + low) << s (code 0 at zero); a negative value's key falls as its magnitude grows
// (the key is ~(sign | magnitude)), so its bin starts at the key of its code's largest magnitude (bin 0 at key 0).
template <class C>
__host__ __device__ __forceinline__ constexpr uint32_t coarse_floor(uint32_t bin) {
  constexpr uint32_t kCodes = 1u << (C::kTopkCoarseBits - 1);
  constexpr uint32_t kLow = (127 + C::kTopkCoarseLowExponent) << C::kTopkCoarseMantissaBits;
  constexpr int kShift = 23 - C::kTopkCoarseMantissaBits;
  if (bin >= kCodes) return kSignBit | (bin == kCodes ? 0u : (bin - kCodes + kLow) << kShift);
  const uint32_t code = kCodes - 1 - bin;
  return code == kCodes - 1 ? 0u : ~kSignBit - (((code + kLow + 1) << kShift) - 1u);
}

// coarse_floor inverts coarse_bin: each bin's floor lies in the bin, and the key below it in the bin below
// (checked at compile time for every bin of the config)
template <class C>
__host__ __device__ constexpr bool coarse_floors_invert() {
  constexpr uint32_t kBins = 1u << C::kTopkCoarseBits;
  if (coarse_floor<C>(0) != 0u || coarse_bin<C>(0u) != 0u || coarse_bin<C>(0xffffffffu) != kBins - 1) return false;
  for (uint32_t b = 1; b < kBins; ++b) {
    const uint32_t f = coarse_floor<C>(b);
    if (coarse_bin<C>(f) != b || coarse_bin<C>(f - 1u) != b - 1) return false;
  }
  return true;
}

// coarse_bin(order_key(f)) from the bits `u` of f + 0 (so that -0 is +0) without the order key: the magnitude's
// code, mirrored below kCodes for a negative value, every NaN (of either sign) in the top bin. A histogram pass that
// needs no key saves order_key's sign flip and coarse_bin's undoing of it (coarse_bins_agree checks the two agree).
template <class C>
__host__ __device__ __forceinline__ constexpr uint32_t value_bin(uint32_t u) {
  constexpr int kMantissa{C::kTopkCoarseMantissaBits};
  constexpr int kCodes = 1 << (C::kTopkCoarseBits - 1);
  constexpr int kLow = (127 + C::kTopkCoarseLowExponent) << kMantissa;
  constexpr uint32_t kInf = 0x7f800000u;  // the magnitude bits of inf; a NaN's are above
  const uint32_t magnitude = u & ~kSignBit;
  const bool negative = (u & kSignBit) != 0 && magnitude <= kInf;
  const int unclamped = static_cast<int>(magnitude >> (23 - kMantissa)) - kLow;
  const int code = unclamped < 0 ? 0 : (unclamped > kCodes - 1 ? kCodes - 1 : unclamped);
  return static_cast<uint32_t>(negative ? kCodes - 1 - code : kCodes + code);
}

// the coarse bin of a value, as coarse_bin(order_key(f)) (-0 folded into +0 by the same addition)
template <class C>
__device__ __forceinline__ uint32_t coarse_bin_of(float f) {
  return value_bin<C>(__float_as_uint(__fadd_rn(f, 0.0f)));
}

// value_bin agrees with coarse_bin(order_key(.)): on both sides of every bin's floor (the bits of the value whose
// order key that is; both maps are monotone in the key, so agreeing at every step they agree everywhere), at -inf,
// +inf, +0 and on NaNs of both signs (checked at compile time for every bin of the config)
template <class C>
__host__ __device__ constexpr bool coarse_bins_agree() {
  constexpr uint32_t kBins = 1u << C::kTopkCoarseBits;
  // the value bits of a (non-NaN) order key: order_key's inverse
  const auto bits = [](uint32_t key) { return (key & kSignBit) != 0 ? key & ~kSignBit : ~key; };
  for (uint32_t b = 1; b < kBins; ++b) {
    const uint32_t f = coarse_floor<C>(b);
    if (value_bin<C>(bits(f)) != b || value_bin<C>(bits(f - 1u)) != b - 1) return false;
  }
  const uint32_t nans[] = {0x7fc00000u, 0xffc00000u, 0x7f800001u, 0xff800001u, 0xffffffffu};
  for (uint32_t u : nans) {
    if (value_bin<C>(u) != kBins - 1) return false;
  }
  return value_bin<C>(0xff800000u) == coarse_bin<C>(0x007fffffu) && value_bin<C>(0x7f800000u) == kBins - 1 &&
         value_bin<C>(0u) == coarse_bin<C>(kSignBit);
}

// The keys of coarse bin `bin`: [lo, hi], every key above hi in a higher bin
struct KeyRange {
  uint32_t lo, hi;
};
template <class C>
__device__ __forceinline__ KeyRange coarse_range(uint32_t bin) {
  constexpr uint32_t kBins = 1u << C::kTopkCoarseBits;
  return {coarse_floor<C>(bin), bin + 1 < kBins ? coarse_floor<C>(bin + 1) - 1u : 0xffffffffu};
}

// The float t with order_key(f) >= key exactly when !(f <= t), for every f (a NaN f or t makes the test true): the
// value of the largest key below `key` that order_key gives. Below key 0 there is none (t NaN: every f passes); -0
// has +0's key, so below +0's key lies -denorm_min's, not -0's; between +inf's key and the NaNs' there is no value
// (t = +inf: only NaNs pass). A read of values tests them against a range of keys without building their keys.
__device__ __forceinline__ float key_floor_value(uint32_t key) {
  constexpr uint32_t kInfKey = 0xff800000u;          // order_key(+inf)
  if (key == 0u) return __uint_as_float(~kSignBit);  // a NaN
  uint32_t below = key - 1u < kInfKey ? key - 1u : kInfKey;
  below = below == ~kSignBit ? below - 1u : below;
  return __uint_as_float((below & kSignBit) != 0 ? below & ~kSignBit : ~below);
}

// A coarse bin as a read of values tests it: order_key(f) >= lo exactly when !(f <= from), order_key(f) > hi exactly
// when !top && !(f <= past) (the top bin has no key above it). A float compare or two a value (coarse_sweep), where
// the keys' test built each key first (an add, a NaN test and a sign flip).
struct ValueRange {
  float from, past;
  bool top;
};
template <class C>
__device__ __forceinline__ ValueRange coarse_values(uint32_t bin) {
  const KeyRange keys = coarse_range<C>(bin);
  return {key_floor_value(keys.lo), key_floor_value(keys.hi + 1u), keys.hi == 0xffffffffu};
}

// `key >> shift` for shift in [0, 32] (32: nothing, every key matches an empty prefix)
__device__ __forceinline__ uint32_t high(uint32_t key, int shift) {
  return static_cast<uint32_t>(static_cast<unsigned long long>(key) >> shift);
}

struct Shared {
  int emitted;              // indices written to the row's output (of a cluster: rank 0's counts the row's)
  int collected;            // candidates copied into shared memory (of a cluster: into rank 0's)
  int digit, above, equal;  // find_threshold's answer
  int mine_out, mine_in;    // a cluster rank's own winners and candidates, counted as it writes them
  int base_out, base_in;    // where they go: this rank's offsets in the row's output and rank 0's candidates
  int chunk;                // a cluster rank's count of the keys in its chunk of the merged histogram
  ValueRange range;         // the coarse threshold bin's values (coarse_select's)
  int warp_sum[32];
};

// a / d for a >= 0 and d >= 1: a shift where d is a power of two (the launch's next_n and cluster sizes are), else
// a 32-bit division (~24 instructions on a warp's dependent chain)
__device__ __forceinline__ int quotient(int a, int d) {
  return (d & (d - 1)) == 0 ? a >> (__ffs(d) - 1) : a / d;
}

__device__ __forceinline__ int lane_id() {
  return static_cast<int>(threadIdx.x & 31);
}

// sum(sh.warp_sum[lo, hi)) for every lane of the calling warp: lane w reads warp w's sum, one redux.sync (sm_80+)
// adds them (where a loop over the warps would be up to 32 dependent adds of shared loads)
template <int Threads>
__device__ __forceinline__ int warp_sums(const Shared& sh, int lo, int hi) {
  static_assert(Threads / 32 <= 32, "a lane per warp");
  const int w = lane_id();
  return __reduce_add_sync(kFullMask, w >= lo && w < hi && w < Threads / 32 ? sh.warp_sum[w] : 0);
}

// a warp-uniform call: each lane with `take` writes `value` at the next free position of `out`
__device__ __forceinline__ void emit(bool take, int value, int* counter, int* out) {
  const unsigned m = __ballot_sync(kFullMask, take);
  if (m == 0) return;
  const int leader = __ffs(m) - 1;
  int base = 0;
  if (lane_id() == leader) base = atomicAdd(counter, __popc(m));
  base = __shfl_sync(kFullMask, base, leader);
  if (take) out[base + __popc(m & ((1u << lane_id()) - 1u))] = value;
}

__device__ __forceinline__ void push(bool take, uint32_t key, int index, int* counter, uint32_t* keys, int* idx) {
  const unsigned m = __ballot_sync(kFullMask, take);
  if (m == 0) return;
  const int leader = __ffs(m) - 1;
  int base = 0;
  if (lane_id() == leader) base = atomicAdd(counter, __popc(m));
  base = __shfl_sync(kFullMask, base, leader);
  if (take) {
    const int at = base + __popc(m & ((1u << lane_id()) - 1u));
    keys[at] = key;
    idx[at] = index;
  }
}

// A warp-uniform call: each lane claims as many consecutive slots of `counter` as it has `take`s (of four), after
// those of the lanes below it, with one atomic for the warp (a lane's count, 0 to 4, summed over the lanes below
// from the ballots of its three bits). Returns the lane's first slot (meaningless for a lane that takes none).
__device__ __forceinline__ int claim4(const bool* take, int* counter) {
  const int n = static_cast<int>(take[0]) + take[1] + take[2] + take[3];
  const unsigned b0 = __ballot_sync(kFullMask, n & 1), b1 = __ballot_sync(kFullMask, n & 2);
  const unsigned b2 = __ballot_sync(kFullMask, n & 4);
  const int total = __popc(b0) + 2 * __popc(b1) + 4 * __popc(b2);
  if (total == 0) return 0;
  const unsigned below = (1u << lane_id()) - 1u;
  int base = 0;
  if (lane_id() == 0) base = atomicAdd(counter, total);
  return __shfl_sync(kFullMask, base, 0) + __popc(b0 & below) + 2 * __popc(b1 & below) + 4 * __popc(b2 & below);
}

// The inclusive suffix sum of `v` over the lanes [lane, lane + Span) of the calling warp (every lane takes part):
// log2(Span) shuffles. Span 32: the lanes from this one up.
template <int Span>
__device__ __forceinline__ int warp_suffix_sum(int v) {
  static_assert(Span >= 1 && Span <= 32, "lanes of one warp");
#pragma unroll
  for (int o = 1; o < Span; o <<= 1) {
    const int n = __shfl_down_sync(kFullMask, v, o);
    if (lane_id() + o < 32) v += n;
  }
  return v;
}

// The sum of `local` over the threads above this one (block-wide, every thread calls it: one barrier between
// the warps' sums being written and read)
template <int Threads>
__device__ __forceinline__ int sum_above(int local, Shared& sh) {
  const int suffix = warp_suffix_sum<32>(local);
  const int warp = static_cast<int>(threadIdx.x >> 5);
  if (lane_id() == 0) sh.warp_sum[warp] = suffix;
  __syncthreads();
  return suffix - local + warp_sums<Threads>(sh, warp + 1, Threads / 32);
}

// The threshold bin of `hist[0, bins)` for the `need` largest (1 <= need <= sum): the bin d with
// sum(hist[d + 1:]) < need <= sum(hist[d:]); `sh.above` = sum(hist[d + 1:]), `sh.equal` = hist[d]. Block-wide:
// every thread calls it after the histogram is complete; on return every thread may read sh. Thread t scans the
// bins [t p, (t + 1) p), p = ceil(bins / Threads): `Per` where the caller knows it at compile time (the loops
// unrolled, no trip count to compute: find_threshold_of), else 0. The one thread that finds the bin also calls
// found(bin) before the last barrier (what every thread would derive from the bin, derived once).
struct NoHook {
  __device__ __forceinline__ void operator()(int) const {}
};
template <int Threads, int Per = 0, class Found = NoHook>
__device__ __forceinline__ void find_threshold(const int* hist, int bins, int need, Shared& sh, Found found = {}) {
  const int per = Per > 0 ? Per : (bins + Threads - 1) / Threads;
  const int lo = min(bins, static_cast<int>(threadIdx.x) * per), hi = min(bins, lo + per);
  int local = 0;
  if constexpr (Per > 0) {
#pragma unroll
    for (int i = 0; i < Per; ++i) local += lo + i < hi ? hist[lo + i] : 0;
  } else {
    for (int b = lo; b < hi; ++b) local += hist[b];
  }
  int run = sum_above<Threads>(local, sh);
  const auto visit = [&](int b) {
    const int h = hist[b];
    if (run < need && run + h >= need) {
      sh.digit = b;
      sh.above = run;
      sh.equal = h;
      found(b);
    }
    run += h;
  };
  if constexpr (Per > 0) {
#pragma unroll
    for (int i = Per - 1; i >= 0; --i) {
      if (lo + i < hi) visit(lo + i);
    }
  } else {
    for (int b = hi - 1; b >= lo; --b) visit(b);
  }
  __syncthreads();
}

// find_threshold over a histogram of Bins counters, a number known at compile time
template <int Threads, int Bins, class Found = NoHook>
__device__ __forceinline__ void find_threshold_of(const int* hist, int need, Shared& sh, Found found = {}) {
  find_threshold<Threads, (Bins + Threads - 1) / Threads>(hist, Bins, need, sh, found);
}

// suffix[b] = sum(hist[b:]) for every b of a histogram of Bins counters, Bins / Threads of them a thread. Block-wide:
// on return every thread may read `suffix` (and sh.warp_sum is free again).
template <int Threads, int Bins>
__device__ __forceinline__ void suffix_sums(const int* hist, int* suffix, Shared& sh) {
  constexpr int kPer = Bins / Threads;
  static_assert(kPer * Threads == Bins, "whole bins a thread");
  const int lo = static_cast<int>(threadIdx.x) * kPer;
  int v[kPer], local = 0;
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    v[i] = hist[lo + i];
    local += v[i];
  }
  int run = sum_above<Threads>(local, sh);
#pragma unroll
  for (int i = kPer - 1; i >= 0; --i) {
    run += v[i];
    suffix[lo + i] = run;
  }
  __syncthreads();
}

template <int Threads>
__device__ __forceinline__ void clear(int* hist, int bins) {
  for (int i = static_cast<int>(threadIdx.x); i < bins; i += Threads) hist[i] = 0;
}

// clear over a histogram of Bins counters, a number known at compile time: unrolled, no trip count to compute
template <int Threads, int Bins>
__device__ __forceinline__ void clear_of(int* hist) {
#pragma unroll
  for (int i = 0; i < (Bins + Threads - 1) / Threads; ++i) {
    const int b = i * Threads + static_cast<int>(threadIdx.x);
    if (Bins % Threads == 0 || b < Bins) hist[b] = 0;
  }
}

// the sum of every thread's `v` (block-wide; every thread gets it)
template <int Threads>
__device__ __forceinline__ int block_sum(int v, Shared& sh) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(kFullMask, v, o);
  __syncthreads();  // earlier readers of warp_sum are done
  if (lane_id() == 0) sh.warp_sum[threadIdx.x >> 5] = v;
  __syncthreads();
  return warp_sums<Threads>(sh, 0, Threads / 32);
}

// f(valid, first, values) over x[0, n), four values per call (values[c] is element first + c when `contiguous`,
// else element first alone; valid[c] whether it lies in [0, n)), each call block-uniform (every thread calls it
// the same number of times): a scalar head and tail (only where the row has them) around 16-B aligned float4
// loads, Unroll of them in flight per thread (a slot no thread loads is not visited: short rows pay for their
// keys, not for the unroll).
template <int Threads, int Unroll, class F>
__device__ __forceinline__ void for_each_value(const float* x, int n, F&& f) {
  const int t = static_cast<int>(threadIdx.x);
  const int mis = static_cast<int>((reinterpret_cast<unsigned long long>(x) >> 2) & 3);
  const int head = min(n, (4 - mis) & 3);
  const int vecs = (n - head) >> 2;
  const int tail = head + 4 * vecs;
  // the head (< 4 values before the first aligned float4) and the tail (< 4 after the last), one call
  if (head > 0 || tail < n) {
    const int at = t < 4 ? t : tail + t - 4;
    const bool v = t < 4 ? t < head : at < n && t < 8;
    bool ok[4] = {v, false, false, false};
    float values[4] = {v ? x[at] : 0.f, 0.f, 0.f, 0.f};
    f(ok, at, values, false);
  }
  const float4* xv = reinterpret_cast<const float4*>(x + head);
  for (int base = 0; base < vecs; base += Threads * Unroll) {
    float4 r[Unroll];
#pragma unroll
    for (int u = 0; u < Unroll; ++u) {
      const int v = base + u * Threads + t;
      r[u] = v < vecs ? xv[v] : make_float4(0.f, 0.f, 0.f, 0.f);
    }
#pragma unroll
    for (int u = 0; u < Unroll; ++u) {
      if (base + u * Threads >= vecs) break;  // no thread has this load (the same for the whole block)
      const int v = base + u * Threads + t;
      const bool in = v < vecs;
      bool ok[4] = {in, in, in, in};
      float values[4] = {r[u].x, r[u].y, r[u].z, r[u].w};
      f(ok, head + 4 * v, values, true);
    }
  }
}

// a visitor of four values that hands `f` their order keys instead (f outlives it: the caller's read)
template <class F>
__device__ __forceinline__ auto keyed(F& f) {
  return [&f](const bool* ok, int first, const float* value, bool contiguous) {
    uint32_t keys[4] = {order_key(value[0]), order_key(value[1]), order_key(value[2]), order_key(value[3])};
    f(ok, first, keys, contiguous);
  };
}

// for_each_value with each value's order key
template <int Threads, int Unroll, class F>
__device__ __forceinline__ void for_each_key(const float* x, int n, F&& f) {
  for_each_value<Threads, Unroll>(x, n, keyed(f));
}

// the bits at and above `shift` (shift in [0, 32]; 32: none)
__device__ __forceinline__ uint32_t above_mask(int shift) {
  return shift >= 32 ? 0u : ~0u << shift;
}

// Refine the `eq` candidates keys[0, n) matching `prefix` above `shift` (the others are decided), `need` of
// them to take (1 <= need <= eq), RefineBits bits per step: the ones above each step's threshold digit are
// emitted. Returns true when done (every selected candidate emitted), false when the bits ran out with
// need < eq (ties on the full key: prefix, eq and need say which).
template <int Threads, int RefineBits>
__device__ bool refine(const uint32_t* keys, const int* idx, const int n, uint32_t& prefix, int& shift, int& need,
                       int& eq, int* hist, Shared& sh, int* out) {
  while (need < eq && shift > 0) {
    const int bits = min(RefineBits, shift), next = shift - bits;
    const uint32_t mask = (1u << bits) - 1u;
    const uint32_t p = high(prefix, shift);
    __syncthreads();  // the last step's readers of hist and sh are done
    clear<Threads>(hist, 1 << bits);
    __syncthreads();
    for (int c = static_cast<int>(threadIdx.x); c < n; c += Threads) {
      const uint32_t key = keys[c];
      if (high(key, shift) == p) atomicAdd(&hist[(key >> next) & mask], 1);
    }
    __syncthreads();
    find_threshold<Threads>(hist, 1 << bits, need, sh);
    const uint32_t d = static_cast<uint32_t>(sh.digit);
    for (int base = 0; base < n; base += Threads) {
      const int c = base + static_cast<int>(threadIdx.x);
      const uint32_t key = c < n ? keys[c] : 0u;
      emit(c < n && high(key, shift) == p && ((key >> next) & mask) > d, c < n ? idx[c] : 0, &sh.emitted, out);
    }
    prefix |= d << next;
    shift = next;
    need -= sh.above;
    eq = sh.equal;
  }
  if (need != eq) return false;
  const uint32_t p = high(prefix, shift);
  for (int base = 0; base < n; base += Threads) {
    const int c = base + static_cast<int>(threadIdx.x);
    emit(c < n && high(keys[c], shift) == p, c < n ? idx[c] : 0, &sh.emitted, out);
  }
  return true;
}

// After `refine` ran out of bits (more than `need` of the n candidates equal the k-th value `value`): the lower
// index wins. ~index orders them (indices < 2^31: bit 31 set; the other candidates become 0, matching nothing).
template <int Threads, int RefineBits>
__device__ void break_ties(uint32_t* keys, const int* idx, const int n, const uint32_t value, int need, int eq,
                           int* hist, Shared& sh, int* out) {
  __syncthreads();  // refine's readers of keys are done
  for (int c = static_cast<int>(threadIdx.x); c < n; c += Threads) {
    keys[c] = keys[c] == value ? ~static_cast<uint32_t>(idx[c]) : 0u;
  }
  __syncthreads();
  uint32_t prefix = kSignBit;
  int shift = 31;
  refine<Threads, RefineBits>(keys, idx, n, prefix, shift, need, eq, hist, sh, out);
}

// Exact selection among a few candidates (n <= Threads; keys, idx in shared memory, complete): `need` of them, the
// larger key first and, among equal keys, the lower index. Each candidate becomes one 64-bit word, key above ~index,
// so that the order is the words' order; thread c counts the words above its own (every thread reads the same word
// at once: a broadcast, eight loads in flight) and takes its candidate when fewer than `need` are. The words being
// distinct, the count is the candidate's rank, and rank r's index goes to slot sh.emitted + r of `out` with no atomic
// (the keys above the candidates have all claimed their slots: a barrier passed since). `scratch` holds the n words
// (free shared memory: a histogram's). n^2 comparisons against the refinement's dozen barriers: the plan's
// kTopkRankCap says where.
template <int Threads>
__device__ __forceinline__ void rank_select(const uint32_t* keys, const int* idx, const int n, const int need,
                                            unsigned long long* scratch, Shared& sh, int* out) {
  const int t = static_cast<int>(threadIdx.x);
  unsigned long long word = 0;
  if (t < n) {
    word = static_cast<unsigned long long>(keys[t]) << 32 | static_cast<uint32_t>(~idx[t]);
    scratch[t] = word;
  }
  __syncthreads();
  if (t < n) {
    constexpr int kInFlight = 8;
    int ahead = 0, c = 0;
    for (; c + kInFlight <= n; c += kInFlight) {
#pragma unroll
      for (int u = 0; u < kInFlight; ++u) ahead += scratch[c + u] > word ? 1 : 0;
    }
    for (; c < n; ++c) ahead += scratch[c] > word ? 1 : 0;
    if (ahead < need) out[sh.emitted + ahead] = idx[t];
  }
}

// The `eq` candidates keys[0, eq) (complete, in shared memory), `need` of them to take (1 <= need <= eq), the
// larger key first and, among equal keys, the lower index: ranked by a thread each (at most kTopkRankCap), else
// refined from the first bit and, when the bits run out, by index. `hist` is free shared memory of kTopkBins counters
// (the rank count's words, the refinement's histograms).
template <class C>
__device__ __forceinline__ void select_candidates(uint32_t* keys, const int* idx, const int eq, int need, int* hist,
                                                  Shared& sh, int* out) {
  constexpr int T = static_cast<int>(C::kTopkThreads);
  constexpr int kRefine = static_cast<int>(C::kTopkRefineBits);
  if (eq <= static_cast<int>(C::kTopkRankCap)) {
    rank_select<T>(keys, idx, eq, need, reinterpret_cast<unsigned long long*>(hist), sh, out);
    return;
  }
  uint32_t prefix = 0;
  int shift = 32, left = eq;
  if (!refine<T, kRefine>(keys, idx, eq, prefix, shift, need, left, hist, sh, out)) {
    break_ties<T, kRefine>(keys, idx, eq, prefix, need, left, hist, sh, out);
  }
}

// f over a cluster CTA's slice, as for_each_value calls it (block-uniform, four values a call, `first` the slice
// index): from shared memory where the CTA holds the slice (`held`, 16-B groups), else read again from the row (x).
template <int Threads, int Unroll, class F>
__device__ __forceinline__ void for_each_slice_value(const float* held, const float* x, int n, F&& f) {
  if (held == nullptr) {
    for_each_value<Threads, Unroll>(x, n, f);
    return;
  }
  for (int base = 0; base < n; base += 4 * Threads) {
    const int first = base + 4 * static_cast<int>(threadIdx.x);
    const float4 v = first < n ? reinterpret_cast<const float4*>(held)[first >> 2] : make_float4(0.f, 0.f, 0.f, 0.f);
    const bool ok[4] = {first < n, first + 1 < n, first + 2 < n, first + 3 < n};
    const float value[4] = {v.x, v.y, v.z, v.w};
    f(ok, first, value, true);
  }
}

// for_each_slice_value with each value's order key
template <int Threads, int Unroll, class F>
__device__ __forceinline__ void for_each_slice_key(const float* held, const float* x, int n, F&& f) {
  for_each_slice_value<Threads, Unroll>(held, x, n, keyed(f));
}

// The visitor of one emitting read (for_each_value's f) of a row whose coarse threshold bin is `bin`: the values
// above it go to `out` (at slots counted by `emitted`), the bin's (order key, index) pairs to ckey / cidx (counted by
// `collected`); indices are the visited ones plus `offset`. Values are tested as floats (coarse_values), first
// against the bin's floor alone; only the bin's few get a key.
__device__ __forceinline__ auto coarse_sweep(ValueRange bin, int offset, int* emitted, int* out, int* collected,
                                             uint32_t* ckey, int* cidx) {
  return [=](const bool* v, int first, const float* value, bool contiguous) {
    bool reach[4], any = false;  // in the bin or above it
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      reach[c] = v[c] && !(value[c] <= bin.from);
      any = any || reach[c];
    }
    // most values lie below the threshold bin: one compare and one vote skip four of them per lane, warp by warp
    if (!__any_sync(kFullMask, any)) return;
    bool take[4], in_bin[4], any_in = false;
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      take[c] = reach[c] && !bin.top && !(value[c] <= bin.past);
      in_bin[c] = reach[c] && !take[c];
      any_in = any_in || in_bin[c];
    }
    int at = claim4(take, emitted);
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      if (take[c]) out[at++] = offset + (contiguous ? first + c : first);
    }
    // the bin holds a few of the row's keys: most warps that reach here have none of them, one vote says so
    if (!__any_sync(kFullMask, any_in)) return;
    at = claim4(in_bin, collected);
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      if (in_bin[c]) {
        ckey[at] = order_key(value[c]);
        cidx[at++] = offset + (contiguous ? first + c : first);
      }
    }
  };
}

// The one-CTA path (L > k): the coarse histogram of the row and its threshold bin (need = k), then one read that
// emits the keys above the bin and copies the bin's (key, index) pairs into shared memory, ranked there (at most
// kTopkRankCap) or refined from the first bit. Returns false, having emitted nothing, when the bin holds more than
// kTopkCandidates keys (the digit-by-digit reads take the row).
template <class C>
__device__ bool coarse_select(const float* x, const int L, const int k, int* out, int* hist, uint32_t* ckey, int* cidx,
                              Shared& sh) {
  constexpr int T = static_cast<int>(C::kTopkThreads);
  constexpr int kBits = static_cast<int>(C::kTopkCoarseBits);
  constexpr int kUnroll = static_cast<int>(C::kTopkUnroll);
  clear_of<T, 1 << kBits>(hist);
  if (threadIdx.x == 0) sh.emitted = sh.collected = 0;
  __syncthreads();
  for_each_value<T, kUnroll>(x, L, [&](const bool* v, int, const float* value, bool) {
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      if (v[c]) atomicAdd(&hist[coarse_bin_of<C>(value[c])], 1);
    }
  });
  __syncthreads();
  // the thread that finds the bin builds its value range, once and off the other threads' chain (every thread
  // building it after the scan was slower: docs/reader.md); the cluster path has each rank build its own, where
  // reading rank 0's after the cluster barrier would add a remote read to every rank's chain
  find_threshold_of<T, 1 << kBits>(hist, k, sh,
                                   [&sh](int bin) { sh.range = coarse_values<C>(static_cast<uint32_t>(bin)); });
  const ValueRange bin = sh.range;
  const int above = sh.above, eq = sh.equal;
  if (eq > static_cast<int>(C::kTopkCandidates)) return false;
  for_each_value<T, kUnroll>(x, L, coarse_sweep(bin, 0, &sh.emitted, out, &sh.collected, ckey, cidx));
  __syncthreads();
  select_candidates<C>(ckey, cidx, eq, k - above, hist, sh, out);
  return true;
}

// A threshold bin as every thread of a CTA holds it: sum(merged[digit + 1:]) = above < need <= above + equal
struct Threshold {
  int digit, above, equal;
};

// The threshold bin for the `need` largest keys of the cluster's histogram: the sum over the ranks of each rank's
// `h[0, bins)` (complete on every rank: the caller passed a cluster barrier since they were written). A
// reduce-scatter: rank r sums chunk r (bins [r w, (r + 1) w), w = ceil(bins / C)) over the C ranks into its own
// `merged` and counts the chunk's keys; after a cluster barrier every rank finds the chunk that holds the need-th
// key from the top by the C counts, then the bin within it, in that chunk alone (copied from its owner into
// `scratch`, each counter read once). Of other CTAs' counters a CTA reads (C - 1) w for its chunk and w for the
// threshold's where that is another's, 2048 of them at most for 2048 bins, where summing every bin itself read
// (C - 1) x 2048. Block-wide, every thread gets the answer. `merged` is read by other ranks until they pass the
// caller's next cluster barrier; `scratch` (w counters) is this CTA's alone.
template <class C>
__device__ __forceinline__ Threshold cluster_threshold(const int* h, const int bins, const int need, int* merged,
                                                       int* scratch, Shared& sh) {
  constexpr int T = static_cast<int>(C::kTopkThreads);
  constexpr int kMax = static_cast<int>(C::kTopkClusterMax);
  static_assert(kMax <= 32, "a lane per rank");
  const int t = static_cast<int>(threadIdx.x);
  const int rank = static_cast<int>(blockIdx.x), ranks = static_cast<int>(gridDim.x);
  const int w = (bins + ranks - 1) / ranks;
  const auto chunk_lo = [&](int r) { return min(bins, r * w); };
  int mine = 0;
  for (int b = chunk_lo(rank) + t; b < chunk_lo(rank + 1); b += T) {
    int sum = 0;
#pragma unroll
    for (int r = 0; r < kMax; ++r) sum += r < ranks ? cluster::map(h, static_cast<unsigned>(r))[b] : 0;
    merged[b] = sum;
    mine += sum;
  }
  mine = block_sum<T>(mine, sh);
  if (t == 0) sh.chunk = mine;
  cluster::sync();  // every rank's chunk is merged and counted
  // lane r holds rank r's count, then the count of the chunks from r up (a suffix scan over the ranks)
  const int lane = lane_id();
  const int count = lane < ranks ? *cluster::map(&sh.chunk, static_cast<unsigned>(lane)) : 0;
  const int suffix = warp_suffix_sum<kMax>(count);
  const unsigned holds = __ballot_sync(kFullMask, lane < ranks && suffix - count < need && need <= suffix);
  const int q = __ffs(holds) - 1;  // the one chunk that holds the need-th key
  const int above = __shfl_sync(kFullMask, suffix - count, q);
  const int lo = chunk_lo(q), n = chunk_lo(q + 1) - lo;
  const int* chunk = merged + lo;
  if (q != rank) {  // block-uniform
    const int* owner = cluster::map(merged, static_cast<unsigned>(q)) + lo;
    for (int b = t; b < n; b += T) scratch[b] = owner[b];
    __syncthreads();
    chunk = scratch;
  }
  find_threshold<T>(chunk, n, need - above, sh);
  return {lo + sh.digit, above + sh.above, sh.equal};
}

// The row on a cluster of gridDim.x CTAs, this one rank blockIdx.x (the header comment; L > k): its slice's coarse
// histogram (the slice's values kept in shared memory where the launch gave room, else each later pass reads the
// row again), a cluster barrier, the merged histogram's threshold bin; then either one sweep of the slice (winners
// out, the bin's pairs to rank 0, which ranks or refines them) or, when the bin overflows rank 0's candidates, a
// digit per pass (a local histogram, a cluster barrier, the merged threshold), then one emitting read of the slice
// (and, for keys equal to the k-th value, an ordered one).
template <class C>
__device__ bool cluster_select(const float* x, const int L, const int k, int* out, unsigned char* smem, Shared& sh) {
  constexpr int T = static_cast<int>(C::kTopkThreads);
  constexpr int kBits = static_cast<int>(C::kTopkClusterBits);
  constexpr int kBins = static_cast<int>(C::kTopkClusterBins);
  constexpr int kCoarse = static_cast<int>(C::kTopkCoarseBits);
  constexpr int kCap = static_cast<int>(C::kTopkClusterCandidates);
  constexpr int kUnroll = static_cast<int>(C::kTopkUnroll);
  static_assert(kCoarse <= kBits && C::kTopkRefineBits <= kBits, "the coarse and refining histograms fit a digit's");
  static_assert(C::kTopkClusterFixedBytes == C::kTopkStateBytes + 3 * 4 * kBins + 8 * kCap && 2 * kBins >= C::kTopkBins,
                "kgen/topk_plan.py's TOPK_CLUSTER_FIXED_BYTES: the state, three histograms, rank 0's candidates (and "
                "select_candidates' scratch: two histograms' memory)");
  static_assert(C::kTopkClusterFixedBytes % 16 == 0, "the slice's values in 16-B groups");
  int* hists = reinterpret_cast<int*>(smem + C::kTopkStateBytes);  // two digits' histograms, alternating
  int* merged = hists + 2 * kBins;
  uint32_t* ckey = reinterpret_cast<uint32_t*>(merged + kBins);  // rank 0's: the row's coarse candidates
  int* cidx = reinterpret_cast<int*>(ckey + kCap);
  const int t = static_cast<int>(threadIdx.x);
  const int rank = static_cast<int>(blockIdx.x), ranks = static_cast<int>(gridDim.x);
  const int s = (quotient(L + ranks - 1, ranks) + 3) & ~3;  // ceil(L / ranks) rounded up to four
  const int lo = min(L, rank * s), n = min(L, lo + s) - lo;
  const float* slice = x + lo;
  // this rank's slice, where it fits (block-uniform), else null: every pass reads the row
  float* held = C::kTopkClusterFixedBytes + 4ull * s <= mem::dynamic_smem_bytes()
                    ? reinterpret_cast<float*>(smem + C::kTopkClusterFixedBytes)
                    : nullptr;
  const auto key_at = [&](int i) { return order_key(held != nullptr ? held[i] : slice[i]); };
  // The coarse pass. Every rank adds its histogram into rank 0's `merged`, rank 0 finds the row's threshold bin
  // there and the others read it from rank 0's state: three cluster barriers, the first one's wait after the pass.
  int* coarse = hists + kBins;  // this rank's: the second buffer (the digit loop's pass 1 reuses it)
  int* suffix = hists;          // suffix sums of `coarse`: the first buffer, the digit loop's pass 0 reuses it
  clear_of<T, 1 << kCoarse>(coarse);
  if (rank == 0) clear_of<T, 1 << kCoarse>(merged);
  if (t == 0) sh.emitted = sh.collected = sh.mine_out = sh.mine_in = 0;  // rank 0's are the row's counters
  __syncthreads();
  cluster::arrive(rank == 0);  // rank 0's zeros; the wait after the pass (every CTA of the cluster has started)
  const auto count = [&](const bool* v, int, const float* value, bool) {
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      if (v[c]) atomicAdd(&coarse[coarse_bin_of<C>(value[c])], 1);
    }
  };
  // block-uniform: the pass that keeps the slice is its own loop, so that the one that does not pays nothing for it
  if (held != nullptr) {
    for_each_value<T, kUnroll>(slice, n, [&](const bool* v, int first, const float* value, bool contiguous) {
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        if (v[c]) held[contiguous ? first + c : first] = value[c];
      }
      count(v, first, value, contiguous);
    });
  } else {
    for_each_value<T, kUnroll>(slice, n, count);
  }
  cluster::wait();  // rank 0's histogram and counters are zero
  __syncthreads();  // this rank's histogram is complete
  int* const row_hist = cluster::map(merged, 0u);
  for (int b = t; b < (1 << kCoarse); b += T) {
    const int c = coarse[b];
    if (c != 0) atomicAdd(row_hist + b, c);  // result unused: waited for by the release
  }
  cluster::arrive();  // this rank's bins are in rank 0's histogram
  // meanwhile: this rank's own count above each bin, its share of the row's output when that bin is the threshold
  suffix_sums<T, 1 << kCoarse>(coarse, suffix, sh);
  cluster::wait();  // rank 0's histogram is the row's
  if (rank == 0) find_threshold_of<T, 1 << kCoarse>(merged, k, sh);
  cluster::sync(rank == 0);  // rank 0's state holds the row's threshold bin
  const Shared& row = *cluster::map(&sh, 0u);
  const Threshold th{row.digit, row.above, row.equal};
  if (th.equal <= kCap) {  // the row's threshold bin fits rank 0's candidates: one emitting read, rank 0 refines
    const uint32_t bin = static_cast<uint32_t>(th.digit);
    const int above = th.above, eq = th.equal;
    if (t == 0) {
      const int mine = bin + 1 < (1u << kCoarse) ? suffix[bin + 1] : 0;
      sh.base_out = atomicAdd(cluster::map(&sh.emitted, 0u), mine);
      sh.base_in = atomicAdd(cluster::map(&sh.collected, 0u), coarse[bin]);
    }
    __syncthreads();
    uint32_t* const to_key = cluster::map(ckey, 0u) + sh.base_in;  // this rank's share of rank 0's candidates
    int* const to_idx = cluster::map(cidx, 0u) + sh.base_in;
    for_each_slice_value<T, kUnroll>(
        held, slice, n,
        coarse_sweep(coarse_values<C>(bin), lo, &sh.mine_out, out + sh.base_out, &sh.mine_in, to_key, to_idx));
    if (rank == 0) {
      __syncthreads();       // rank 0's own candidates, for its threads
      cluster::sync(false);  // the others' candidates are in rank 0's memory; it publishes nothing
      select_candidates<C>(ckey, cidx, eq, k - above, hists, sh, out);
      return true;
    }
    cluster::sync();  // this rank's candidates are in rank 0's memory; no rank reads another's memory after it
    return false;
  }
  // more than kCap keys in the coarse threshold bin (a row of few distinct values): the slice's digits, one at a
  // time, from the top
  uint32_t prefix = 0;
  int shift = 32, need = k, eq = L, digit = 0;
  int* h = hists;
  for (int pass = 0;; ++pass) {
    const int bits = min(kBits, shift), next = shift - bits;
    const uint32_t mask = (1u << bits) - 1u, p = high(prefix, shift);
    // this buffer's remote readers (two passes ago) passed the last cluster barrier after reading it
    h = hists + (pass & 1) * kBins;
    clear<T>(h, 1 << bits);
    __syncthreads();  // every thread has read sh
    // a row's logits crowd into few digits (one exponent): the lanes of a warp with one digit add once
    for_each_slice_key<T, kUnroll>(held, slice, n, [&](const bool* v, int, const uint32_t* key, bool) {
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const bool in = v[c] && high(key[c], shift) == p;
        const uint32_t d = in ? (key[c] >> next) & mask : ~0u;
        const unsigned same = __match_any_sync(kFullMask, d);
        if (in && lane_id() == __ffs(same) - 1) atomicAdd(&h[d], __popc(same));
      }
    });
    cluster::sync();  // every CTA's histogram is complete
    // scratch: the other buffer, whose remote readers (the last pass's merge) have passed two cluster barriers
    const Threshold th = cluster_threshold<C>(h, 1 << bits, need, merged, hists + ((pass + 1) & 1) * kBins, sh);
    digit = th.digit;
    prefix |= static_cast<uint32_t>(digit) << next;
    shift = next;
    need -= th.above;
    eq = th.equal;
    if (need == eq || shift == 0) break;
  }
  // every key above the k-th value's digits is taken, and of those equal to it all (need == eq) or, the lower
  // index first, this rank's share: its first min(eq_r, need - eq below r)
  int mine = 0, take = 0;
  if (need < eq) {
    int below = 0;
    for (int r = 0; r < ranks; ++r) {
      const int e = cluster::map(h, static_cast<unsigned>(r))[digit];
      below += r < rank ? e : 0;
      mine = r == rank ? e : mine;
    }
    take = max(0, min(mine, need - below));
  }
  const bool all = need == eq || take == mine;
  const uint32_t p = high(prefix, shift);
  int* counter = cluster::map(&sh.emitted, 0u);
  for_each_slice_key<T, kUnroll>(held, slice, n, [&](const bool* v, int first, const uint32_t* key, bool contiguous) {
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      const uint32_t hk = high(key[c], shift);
      emit(v[c] && (hk > p || (all && hk == p)), lo + (contiguous ? first + c : first), counter, out);
    }
  });
  if (!all) {  // shift == 0: the ties are the keys equal to prefix; a block-wide count per chunk of T keys
    int taken = 0;
    for (int base = 0; base < n && taken < take; base += T) {
      const int i = base + t;
      const bool tie = i < n && key_at(i) == prefix;
      const unsigned ballot = __ballot_sync(kFullMask, tie);
      __syncthreads();  // the last chunk's readers of warp_sum are done
      if (lane_id() == 0) sh.warp_sum[t >> 5] = __popc(ballot);
      __syncthreads();
      const int before = __popc(ballot & ((1u << lane_id()) - 1u)) + warp_sums<T>(sh, 0, t >> 5);
      const int total = warp_sums<T>(sh, 0, T / 32);
      emit(tie && taken + before < take, lo + i, counter, out);
      taken += total;
    }
  }
  cluster::sync();  // rank 0's counter and every CTA's histograms outlive their last remote reader
  return rank == 0;
}

// What a CTA of select_row wrote of its row's output: nothing; its own threads' slots (a short row: thread t of rank r
// wrote slots r T + t, + C T, ...); or the whole row, complete and visible to it (a row's one CTA, or rank 0 of a
// cluster, which finishes last, after a cluster barrier every other rank's writes came before).
enum class Written { kNone, kOwn, kRow };

// the row of the CTA (of a cluster: all of its CTAs'): its grid is (cluster, rows, 1), or a z dimension of row slabs
__device__ __forceinline__ int row_index() {
  return static_cast<int>(blockIdx.y + gridDim.y * blockIdx.z);
}

// The kernels' body: the row's key indices into `out` ([B * next_n, k], the kernel's output), this CTA's share of them.
template <class C, class Params>
__device__ __forceinline__ Written select_row(const Params& p, int* const out_rows) {
  constexpr int T = static_cast<int>(C::kTopkThreads);
  constexpr int kCap = static_cast<int>(C::kTopkCandidates);
  constexpr int kUnroll = static_cast<int>(C::kTopkUnroll);
  constexpr int kFirst = static_cast<int>(C::kTopkFirstBits);
  static_assert(T % 32 == 0 && T / 32 <= 32, "the block scan keeps one sum per warp, at most 32 warps");
  static_assert((1 << C::kTopkFirstBits) <= C::kTopkBins && (1 << C::kTopkNextBits) <= C::kTopkBins &&
                    (1 << C::kTopkCoarseBits) <= C::kTopkBins && (1 << C::kTopkRefineBits) <= C::kTopkBins,
                "every digit's histogram fits kTopkBins");
  static_assert(C::kTopkClusterBins == (1 << C::kTopkClusterBits), "the cluster path's histogram");
  static_assert(C::kTopkRankCap <= T && 8 * C::kTopkRankCap <= 4 * C::kTopkClusterBins,
                "rank_select: a thread per candidate, their words in a histogram's memory");
  static_assert(sizeof(Shared) <= C::kTopkStateBytes && C::kTopkStateBytes % 16 == 0, "the state's bytes");
  static_assert(coarse_floors_invert<C>(), "coarse_floor is the lowest key of each coarse bin");
  static_assert(coarse_bins_agree<C>(), "value_bin is coarse_bin of the order key");
  static_assert(C::kTopkSharedBytes == C::kTopkStateBytes + 4 * C::kTopkBins + 8 * C::kTopkCandidates,
                "kgen/topk_plan.py's bytes");
  KGEN_DYNAMIC_SMEM(topk_smem);
  Shared& sh = *reinterpret_cast<Shared*>(topk_smem);
  int* hist = reinterpret_cast<int*>(topk_smem + C::kTopkStateBytes);
  uint32_t* ckey = reinterpret_cast<uint32_t*>(hist + C::kTopkBins);
  int* cidx = reinterpret_cast<int*>(ckey + C::kTopkCandidates);

  if constexpr (C::kPdl != 0) {  // the reader writing these logits may still run (kgen.layout.uses_pdl)
    mem::pdl_wait();
    mem::pdl_launch_dependents();
  }
  const int row = row_index();
  if (row >= p.batch * p.next_n) return Written::kNone;  // the z dimension's last slab
  // the row's sequence and token (next_n is a power of two in the engines' MTP: 1, 2, 4)
  const int n = p.next_n;
  const int b = quotient(row, n), j = row - b * n;
  // the keys token j sees, seq_lens[b] - (next_n - 1 - j), in [0, max_seq_len]: subtracted only where it stays
  // positive (no overflow for any seq_lens)
  const int s = p.seq_lens[b], hidden = n - 1 - j;
  const int L = s <= hidden ? 0 : min(s - hidden, p.max_seq_len), k = p.k;
  int* out = out_rows + static_cast<long long>(row) * k;
  const float* x = p.logits + static_cast<long long>(row) * p.max_seq_len;
  const int t = static_cast<int>(threadIdx.x);
  const int rank = static_cast<int>(blockIdx.x), ranks = static_cast<int>(gridDim.x);
  if (L <= k) {
    for (int i = rank * T + t; i < k; i += ranks * T) out[i] = i < L ? i : -1;
    return Written::kOwn;
  }
  if (ranks > 1) return cluster_select<C>(x, L, k, out, topk_smem, sh) ? Written::kRow : Written::kNone;

  // the coarse pass takes every row whose threshold bin fits the candidates (every row of at most kCap keys)
  if (coarse_select<C>(x, L, k, out, hist, ckey, cidx, sh)) return Written::kRow;

  // the first digit's histogram over the whole row
  clear_of<T, 1 << kFirst>(hist);
  __syncthreads();
  for_each_key<T, kUnroll>(x, L, [&](const bool* v, int, const uint32_t* key, bool) {
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      if (v[c]) atomicAdd(&hist[key[c] >> (32 - kFirst)], 1);
    }
  });
  __syncthreads();
  find_threshold_of<T, 1 << kFirst>(hist, k, sh);
  uint32_t prefix = static_cast<uint32_t>(sh.digit) << (32 - kFirst);
  int before = 32, shift = 32 - kFirst;  // digits above `before` were decided by earlier reads
  int need = k - sh.above, eq = sh.equal;

  // reads of the row: emit the keys above the threshold bin; collect the bin, or histogram its next digit
  while (true) {
    const bool all = need == eq, collect = !all && eq <= kCap;
    if (!all && !collect && shift == 0) break;  // > kCap keys equal to the k-th value: the ordered read
    const int bits = (all || collect) ? 0 : min(static_cast<int>(C::kTopkNextBits), shift), next = shift - bits;
    const uint32_t mask = (1u << bits) - 1u;
    // the digits decided by earlier reads (mb) and with this read's (ms): a key matches the prefix on mb
    // (it is still undecided) and is above, in or below the threshold bin on ms
    const uint32_t mb = above_mask(before), ms = above_mask(shift);
    const uint32_t pb = prefix & mb, ps = prefix & ms;
    __syncthreads();  // every thread has read sh
    if (bits) clear<T>(hist, 1 << bits);
    __syncthreads();
    for_each_key<T, kUnroll>(x, L, [&](const bool* v, int first, const uint32_t* key, bool contiguous) {
      bool take[4], in_bin[4], any = false;
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const bool m = v[c] && (key[c] & mb) == pb;
        const uint32_t cur = key[c] & ms;
        take[c] = m && (all ? cur >= ps : cur > ps);
        in_bin[c] = m && cur == ps;
        any = any || take[c] || in_bin[c];
      }
      // most keys lie below the threshold bin: one vote skips four of them per lane, warp by warp
      if (!__any_sync(kFullMask, any)) return;
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const int i = contiguous ? first + c : first;
        emit(take[c], i, &sh.emitted, out);
        if (collect) {
          push(in_bin[c], key[c], i, &sh.collected, ckey, cidx);
        } else if (bits && in_bin[c]) {
          atomicAdd(&hist[(key[c] >> next) & mask], 1);
        }
      }
    });
    __syncthreads();
    if (all) return Written::kRow;
    if (collect) {
      const int n = eq;
      if (refine<T, C::kTopkRefineBits>(ckey, cidx, n, prefix, shift, need, eq, hist, sh, out)) return Written::kRow;
      break_ties<T, C::kTopkRefineBits>(ckey, cidx, n, prefix, need, eq, hist, sh, out);
      return Written::kRow;
    }
    find_threshold<T>(hist, 1 << bits, need, sh);
    prefix |= static_cast<uint32_t>(sh.digit) << next;
    before = shift;
    shift = next;
    need -= sh.above;
    eq = sh.equal;
  }

  // the ordered read: keys above the k-th value (matching the digits decided before), and the first `need`
  // keys equal to it in index order (a block-wide count per chunk of T keys)
  const uint32_t pb = high(prefix, before);
  int taken = 0;
  for (int base = 0; base < L; base += T) {
    const int i = base + t;
    const bool v = i < L;
    const uint32_t key = v ? order_key(x[i]) : 0u;
    const bool m = v && high(key, before) == pb;
    emit(m && key > prefix, i, &sh.emitted, out);
    const bool tie = m && key == prefix;
    const unsigned ballot = __ballot_sync(kFullMask, tie);
    __syncthreads();  // the last chunk's readers of warp_sum are done
    if (lane_id() == 0) sh.warp_sum[t >> 5] = __popc(ballot);
    __syncthreads();
    const int rank = __popc(ballot & ((1u << lane_id()) - 1u)) + warp_sums<T>(sh, 0, t >> 5);
    const int total = warp_sums<T>(sh, 0, T / 32);
    emit(tie && taken + rank < need, i, &sh.emitted, out);
    taken += total;
  }
  return Written::kRow;
}

// indexer_topk_slots after select_row: the row's key indices `out` (k of them, -1 past its keys) become their cache
// slots, page * 2^Shift + i % 2^Shift with page = table[i >> Shift] (`table`: the row's sequence's block table row of
// `pages` entries; 2^Shift = page_size, a power of two): SGLang's topk_transform_paged, fused. A key with no page (a
// negative entry, or a column past the table, as the reader reads it) gets -1, as a slot past the row's keys.
// Mapped after the selection rather than as each index is written: the sweeps that write are at the kernel's
// register limit, and a slot at each write spilled there.
template <int Shift, int Threads>
__device__ __forceinline__ void map_to_slots(int* out, const int* table, const int pages, const int k,
                                             const Written written) {
  const int t = static_cast<int>(threadIdx.x);
  int first = t, step = Threads;
  if (written == Written::kOwn) {  // a short row's slots, each read back by the thread that wrote it
    first += static_cast<int>(blockIdx.x) * Threads;
    step *= static_cast<int>(gridDim.x);
  } else {
    __syncthreads();  // the CTA's own writes; other ranks' came before the cluster barrier it passed last
  }
  for (int i = first; i < k; i += step) {
    const int key = __ldcg(out + i);  // from the L2: other CTAs of the cluster wrote some
    const int page = key < 0 || (key >> Shift) >= pages ? -1 : table[key >> Shift];
    out[i] = page < 0 ? -1 : static_cast<int>(static_cast<unsigned>(page) << Shift | (key & ((1 << Shift) - 1)));
  }
}

}  // namespace topk

template <class C>
__global__ void __launch_bounds__(C::kTopkThreads) indexer_topk(const __grid_constant__ typename C::Params p) {
  topk::select_row<C>(p, p.indices);
}

// indexer_topk's selection as cache slots through the block table (topk::map_to_slots)
template <class C>
__global__ void __launch_bounds__(C::kTopkThreads) indexer_topk_slots(const __grid_constant__ typename C::Params p) {
  const topk::Written written = topk::select_row<C>(p, p.slots);
  if (written == topk::Written::kNone) return;
  const int row = topk::row_index(), b = topk::quotient(row, p.next_n);
  topk::map_to_slots<static_cast<int>(C::kPageShift), static_cast<int>(C::kTopkThreads)>(
      p.slots + static_cast<long long>(row) * p.k, p.block_table + static_cast<long long>(b) * p.max_pages, p.max_pages,
      p.k, written);
}

}  // namespace kgen
