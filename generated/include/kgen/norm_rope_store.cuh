// kgen::norm_rope_store: fused norm -> RoPE -> (Hadamard) -> quantize -> paged store.
//
// The arithmetic is docs/numerics.md, step for step; the byte offsets are kgen/layout.py's, handed
// over by the rendered config (kgen_cfg::<variant>). One warp per token: lane l owns the
// V = head_dim / 32 contiguous values [l*V, (l+1)*V). A warp owns `kTokensPerWarp` consecutive
// tokens (`kLargeTokensPerWarp` from `kLargeMinTokens` tokens on) and issues all their global loads
// (slot, position, x row, then the freqs rows) before it computes, for memory-level parallelism; with
// `kStageTokens` it loads the slots and positions of all of them first, then x and freqs rows in groups
// of that many tokens, each group's issued before the previous group computes (a software pipeline). No
// shared memory; every per-lane array is indexed only by compile-time constants (fully unrolled
// loops), so it lives in registers.
//
// ABI: one parameter, the config's `Params` struct (kgen/abi.py's NORM_ROPE_STORE table: the
// fields, their shapes, the launch shape); every pointer 16-B aligned, no dynamic shared memory.
// A token whose out_loc is < 0 or >= num_slots is skipped. With positions.source decode_plan the
// `positions` field points at SGLang's 16-B DecodePlan rows instead, with compress_plan at its
// prefill CompressPlan rows (docs/numerics.md §0).
#pragma once

#include "checks.cuh"
#include "memory.cuh"
#include "numerics.cuh"

namespace kgen {
namespace detail {

// TokensPerWarp: the launch shape's tokens per warp (Cfg::kTokensPerWarp, or kLargeTokensPerWarp on the
// large-N path); every other parameter of the mapping is the config's.
template <class Cfg, int TokensPerWarp>
struct NormRopeStore {
  using In = typename Cfg::In;

  static constexpr int V = static_cast<int>(Cfg::kValuesPerLane);
  static constexpr int T = TokensPerWarp;
  static constexpr int W = static_cast<int>(Cfg::kWarpsPerBlock);
  static constexpr int H = static_cast<int>(Cfg::kHeadDim);

  static constexpr bool kFp32In = Cfg::kInputDtype == Dtype::fp32;
  static constexpr bool kBf16In = Cfg::kInputDtype == Dtype::bf16;
  static constexpr int kInBytes = static_cast<int>(Cfg::kInLaneBytes);
  static_assert(kInBytes == V * static_cast<int>(sizeof(In)), "x lane bytes");

  static constexpr bool kNorm = Cfg::kNormKind != NormKind::none;
  static constexpr bool kLayerNorm = Cfg::kNormKind == NormKind::layernorm;

  static constexpr bool kRope = Cfg::kRopeDim > 0;
  static constexpr bool kDecodePlan = Cfg::kDecodePlan != 0;
  static constexpr bool kCompressPlan = Cfg::kCompressPlan != 0;
  static constexpr uint32_t kPlanInvalid = static_cast<uint32_t>(Cfg::kCompressPlanInvalid);
  static constexpr uint32_t kRatio = static_cast<uint32_t>(Cfg::kCompressRatio);
  static constexpr bool kNeox = Cfg::kRopeStyle == RopeStyle::neox;
  static constexpr int kRopeDim = static_cast<int>(Cfg::kRopeDim);
  static constexpr int kRopeLane0 = static_cast<int>(Cfg::kRopeLane0);
  static constexpr int kRopeLanes = static_cast<int>(Cfg::kRopeLanes);
  static constexpr int kRopeHalf = static_cast<int>(Cfg::kRopeHalfLanes);
  static constexpr int kFreqFloats = kRope ? static_cast<int>(Cfg::kFreqsLaneFloats) : 1;
  static constexpr int kFreqBytes = kFreqFloats * 4;

  static constexpr Dtype kStore = Cfg::kStoreDtype;
  static constexpr bool kHalfStore = kStore == Dtype::bf16 || kStore == Dtype::fp16;
  static constexpr bool kFp8 = kStore == Dtype::fp8_e4m3;
  static constexpr bool kFp4 = kStore == Dtype::fp4_e2m1;
  static constexpr bool kScaled = Cfg::kScaleKind != ScaleKind::none;
  static constexpr bool kFp32Scale = Cfg::kScaleKind == ScaleKind::fp32;
  static constexpr bool kFloatScaleBytes =
      Cfg::kScaleKind == ScaleKind::fp32 || Cfg::kScaleKind == ScaleKind::fp32_pow2;
  static constexpr int kQuantLane0 = static_cast<int>(Cfg::kQuantLane0);
  static constexpr int kQuantLanes = static_cast<int>(Cfg::kQuantLanes);
  static constexpr int kBlockLanes = static_cast<int>(Cfg::kBlockLanes);
  // bytes of quantized values a lane stores; with 4 bits per lane (fp4, V == 1) the even lane of a
  // pair stores the shared byte
  static constexpr bool kNibblePairs = Cfg::kQuantLaneBits < 8;
  static constexpr int kQuantBytes = kNibblePairs ? 1 : static_cast<int>(Cfg::kQuantLaneBits / 8);

  static constexpr bool kKept = Cfg::kKeptLanes > 0;

  // numerics: fast (docs/numerics.md, "Fast mode"): fused multiply-adds where exact mode rounds the product
  // and the sum apart, the norm's 1 / sqrt as one approximate rsqrt, and the Hadamard's scale folded into
  // the fp32 scale's multiplier (amax of the scaled values is the scaled amax: rounding is monotone)
  static constexpr bool kFast = Cfg::kFastMath != 0;
  static constexpr bool kFoldHadamard =
      kFast && Cfg::kHadamard && Cfg::kScaleKind == ScaleKind::fp32 && !Cfg::kBf16Roundtrip && !(Cfg::kKeptLanes > 0);
  static constexpr int kKeptLane0 = static_cast<int>(Cfg::kKeptLane0);
  static constexpr int kKeptLanes = static_cast<int>(Cfg::kKeptLanes);
  static constexpr int kKeptBytes = kKept ? static_cast<int>(Cfg::kKeptLaneBytes) : 2;

  // Quantizer scale math shortcuts, exact under compile-time conditions (numerics.cuh):
  // t = a / QMAX with a >= amax_floor is a normal fp32, so ceil_log2/exp2i need no subnormal path
  static constexpr bool kScaleNormal =
      kScaled && (Cfg::kScaleMath == ScaleMath::divide ? Cfg::kAmaxFloor / Cfg::kQuantMax
                                                       : Cfg::kAmaxFloor * Cfg::kInvQuantMax) >= 0x1p-126f;
  __host__ __device__ static constexpr long long odd_part(long long q) { return q % 2 == 0 ? odd_part(q / 2) : q; }
  // a / QMAX as one double multiply (num::div_via_double): QMAX an integer whose odd part is < 2^26,
  // and the exact quotient normal (floor / QMAX >= 2^-125 leaves a margin for the rounding of this test)
  static constexpr bool kDivViaDouble =
      kScaled && Cfg::kScaleMath == ScaleMath::divide && Cfg::kQuantMax >= 1.0f && Cfg::kQuantMax < 0x1p24f &&
      static_cast<float>(static_cast<long long>(Cfg::kQuantMax)) == Cfg::kQuantMax &&
      odd_part(static_cast<long long>(Cfg::kQuantMax)) < (1LL << 26) && Cfg::kAmaxFloor / Cfg::kQuantMax >= 0x1p-125f;
  static constexpr double kInvQuantMaxD = 1.0 / static_cast<double>(Cfg::kQuantMax);

  using XWords = mem::Words<kInBytes>;
  using FWords = mem::Words<kFreqBytes>;

  static_assert(V >= 1 && V <= 32 && (V & (V - 1)) == 0, "values per lane");
  static_assert(!kRope || kFreqFloats * 4 == kFreqBytes, "freqs lane bytes");
  static_assert(!kScaled || (kBlockLanes >= 1 && kBlockLanes <= 32), "block lanes");
  static_assert(!kNibblePairs || (kFp4 && V == 1), "nibble pairs only for fp4 with one value per lane");

  // ---- helpers --------------------------------------------------------------------------------
  __device__ static __forceinline__ void widen(const XWords& r, float (&v)[V]) {
#pragma unroll
    for (int k = 0; k < V; ++k) {
      if constexpr (kFp32In) {
        v[k] = __uint_as_float(r.w[k]);
      } else {
        const uint32_t h = (r.w[k / 2] >> (16 * (k & 1))) & 0xffffu;
        v[k] = kBf16In ? num::widen_bf16(h) : num::widen_fp16(h);
      }
    }
  }

  // docs/numerics.md §1: left to right in the lane (the terms formed as they are added, so no
  // array of them is kept), then butterflies 16, 8, 4, 2, 1.
  __device__ static __forceinline__ float butterfly_sum(float s) {
#pragma unroll
    for (int off = 16; off >= 1; off >>= 1) s = num::add(s, __shfl_xor_sync(num::kFullMask, s, off));
    return s;
  }
  __device__ static __forceinline__ float warp_sum(const float (&v)[V]) {
    float s = v[0];
#pragma unroll
    for (int k = 1; k < V; ++k) s = num::add(s, v[k]);
    return butterfly_sum(s);
  }
  __device__ static __forceinline__ float warp_sum_squares(const float (&v)[V]) {
    float s = num::mul(v[0], v[0]);
#pragma unroll
    for (int k = 1; k < V; ++k) s = kFast ? __fmaf_rn(v[k], v[k], s) : num::add(s, num::mul(v[k], v[k]));
    return butterfly_sum(s);
  }

  // x / head_dim. head_dim is a power of two (rule head-dim), so this is the exact multiplication
  // by 2^-k: the same correctly rounded result as the IEEE division, without its ~10 instructions.
  __device__ static __forceinline__ float per_dim(float x) {
    if constexpr (is_pow2(H)) {
      return num::mul(x, 1.0f / static_cast<float>(H));
    } else {
      return num::div(x, static_cast<float>(H));
    }
  }

  // max |v| over the lanes of one scale block (order-independent). Non-negative floats order like
  // their bit patterns, so a whole-warp block is one redux.sync on the bits (sm_80+).
  __device__ static __forceinline__ float block_amax(const float (&v)[V]) {
    uint32_t am = 0u;
#pragma unroll
    for (int k = 0; k < V; ++k) am = num::umax(am, __float_as_uint(fabsf(v[k])));
    if constexpr (kBlockLanes == 32) {
      am = __reduce_max_sync(num::kFullMask, am);
    } else {
#pragma unroll
      for (int m = 1; m < kBlockLanes; m <<= 1) am = num::umax(am, __shfl_xor_sync(num::kFullMask, am, m));
    }
    return __uint_as_float(am);
  }

  template <Dtype D>
  __device__ static __forceinline__ uint32_t half_bits(float x) {
    if constexpr (D == Dtype::bf16) {
      return num::bf16_bits(x);
    } else {
      static_assert(D == Dtype::fp16, "16-bit store dtype");
      return num::fp16_bits(x);
    }
  }

  template <Dtype D, int Bytes>
  __device__ static __forceinline__ void pack_halves(const float (&v)[V], mem::Words<Bytes>& o) {
    static_assert(Bytes == 2 * V, "16-bit lane bytes");
    mem::zero(o);
#pragma unroll
    for (int k = 0; k < V; ++k) o.w[k / 2] |= half_bits<D>(v[k]) << (16 * (k & 1));
  }

  // This lane's store addresses in page 0, row 0 (computed once per warp); a token adds
  // page * page_bytes (64-bit) and its slot's row/scale offset (32-bit: a page is < 2^31 bytes).
  struct Dst {
    uint8_t* q;  // quantized (or 16-bit) values
    uint8_t* s;  // scale of this lane's block
    uint8_t* k;  // kept RoPE dims
  };
  __device__ static __forceinline__ Dst lane_dst(uint8_t* cache, int lane) {
    // lanes outside a span never store through its pointer: they get the span's lane 0 (no
    // out-of-object pointer arithmetic)
    const int ql =
        static_cast<unsigned>(lane - kQuantLane0) < static_cast<unsigned>(kQuantLanes) ? lane - kQuantLane0 : 0;
    const int kl = static_cast<unsigned>(lane - kKeptLane0) < static_cast<unsigned>(kKeptLanes) ? lane - kKeptLane0 : 0;
    Dst d;
    d.q = cache + Cfg::kQuantRowOffset + (kNibblePairs ? (ql >> 1) : ql * kQuantBytes);
    d.s = cache + Cfg::kScaleRegionOffset + (kScaled ? (ql / kBlockLanes) * Cfg::kScaleUnit : 0);
    d.k = cache + Cfg::kKeptRowOffset + kl * kKeptBytes;
    return d;
  }

  // §2 norm, first half: the warp sums; returns mean + eps (rmsnorm) or var + eps (layernorm, which
  // also turns v into d = v - mu in place), the operand of r = 1 / sqrt(.)
  __device__ static __forceinline__ float norm_operand(float (&v)[V]) {
    if constexpr (Cfg::kNormKind == NormKind::rmsnorm) {
      return num::add(per_dim(warp_sum_squares(v)), Cfg::kEps);
    } else if constexpr (Cfg::kNormKind == NormKind::layernorm) {
      const float mu = per_dim(warp_sum(v));
#pragma unroll
      for (int k = 0; k < V; ++k) v[k] = num::sub(v[k], mu);  // d = v - mu, in place
      return num::add(per_dim(warp_sum_squares(v)), Cfg::kEps);
    } else {
      return 1.0f;
    }
  }
  __device__ static __forceinline__ float norm_r(float op) {
    if constexpr (kFast) {
      return rsqrtf(op);  // approximate (a few ulps); no IEEE sqrt and reciprocal with their slow paths
    } else {
      return num::rcp(num::sqrt(op));
    }
  }

  // ---- one token (warp-uniform: every lane runs it, so the shuffles are full-warp) -----------
  // §2 (second half) to §5: v is the widened x after norm_operand, r its 1 / sqrt(mean + eps)
  __device__ static __forceinline__ void transform(float (&v)[V], float r, const FWords& fr, const float (&w)[V],
                                                   const float (&b)[V], int lane) {
    // §2 norm, second half
    if constexpr (Cfg::kNormKind == NormKind::rmsnorm) {
#pragma unroll
      for (int k = 0; k < V; ++k) v[k] = num::mul(num::mul(v[k], r), w[k]);
    } else if constexpr (Cfg::kNormKind == NormKind::layernorm) {
#pragma unroll
      for (int k = 0; k < V; ++k) {
        v[k] = kFast ? __fmaf_rn(num::mul(v[k], r), w[k], b[k]) : num::add(num::mul(num::mul(v[k], r), w[k]), b[k]);
      }
    }

    // §3 RoPE
    if constexpr (kRope) {
      const int rl = lane - kRopeLane0;
      const bool in_rope = static_cast<unsigned>(rl) < static_cast<unsigned>(kRopeLanes);
      if constexpr (!kNeox) {
        if (in_rope) {
#pragma unroll
          for (int k = 0; k < V; k += 2) {
            const float re = v[k], im = v[k + 1];
            const float c = __uint_as_float(fr.w[k]), s = __uint_as_float(fr.w[k + 1]);
            if constexpr (kFast) {
              v[k] = __fmaf_rn(re, c, -num::mul(im, s));
              v[k + 1] = __fmaf_rn(re, s, num::mul(im, c));
            } else {
              v[k] = num::sub(num::mul(re, c), num::mul(im, s));
              v[k + 1] = num::add(num::mul(re, s), num::mul(im, c));
            }
          }
        }
      } else {
        const bool lower = rl < kRopeHalf;
        const int partner = in_rope ? (lower ? lane + kRopeHalf : lane - kRopeHalf) : lane;
        // Branch-free: every lane computes (lanes outside the span on zero freqs) and keeps the result
        // only in the span, which saves a divergent branch per element. The lower partner (re) writes
        // re*c - im*s = v*c + (-1)*(p*s), the upper (im) re*s + im*c = v*c + (+1)*(p*s) (IEEE addition
        // commutes): one fma by +-1 on the two rounded products, bit-identical to the sub / add.
        const float sign = lower ? -1.0f : 1.0f;
#pragma unroll
        for (int k = 0; k < V; ++k) {  // both partners read element k before either rewrites it
          const float p = __shfl_sync(num::kFullMask, v[k], partner);
          const float c = __uint_as_float(fr.w[2 * k]), s = __uint_as_float(fr.w[2 * k + 1]);
          float rot;
          if constexpr (kFast) {
            rot = lower ? __fmaf_rn(v[k], c, -num::mul(p, s)) : __fmaf_rn(p, s, num::mul(v[k], c));
          } else {
            rot = num::add_signed(num::mul(v[k], c), sign, num::mul(p, s));
          }
          v[k] = in_rope ? rot : v[k];
        }
      }
    }

    // §4 Hadamard: in-lane stages h < V, then lane stages h = V, 2V, ..., n/2 (partner l ^ h/V)
    if constexpr (Cfg::kHadamard) {
#pragma unroll
      for (int h = 1; h < V; h <<= 1) {
#pragma unroll
        for (int i = 0; i < V; ++i) {
          if ((i & h) == 0) {
            const float a = v[i], c = v[i + h];
            v[i] = num::add(a, c);
            v[i + h] = num::sub(a, c);
          }
        }
      }
#pragma unroll
      for (int m = 1; m < 32; m <<= 1) {
        // lower lane: a + b = p + v; upper lane: a - b = p - v. Both are fma(sign, v, p): the
        // product by +-1 is exact, so the fma rounds once, exactly like the IEEE add/sub it replaces,
        // in one instruction instead of a sign flip and an add.
        const float sign = (lane & m) != 0 ? -1.0f : 1.0f;
#pragma unroll
        for (int k = 0; k < V; ++k) {
          const float p = __shfl_xor_sync(num::kFullMask, v[k], m);
          v[k] = num::add_signed(p, sign, v[k]);
        }
      }
#pragma unroll
      for (int k = 0; k < V; ++k) v[k] = kFoldHadamard ? v[k] : num::mul(v[k], Cfg::kHadamardScale);
    }

    // §5 bf16 round trip, before any amax
    if constexpr (Cfg::kBf16Roundtrip) {
#pragma unroll
      for (int k = 0; k < V; ++k) v[k] = num::bf16_round(v[k]);
    }
  }

  // §6 first half: t = max(amax, floor) / QMAX of this lane's scale block (uniform over the block)
  __device__ static __forceinline__ float scale_operand(const float (&v)[V]) {
    const float am = block_amax(v);  // with kFoldHadamard: of the unscaled values, scaled here (exactly)
    const float a = fmaxf(kFoldHadamard ? num::mul(am, Cfg::kHadamardScale) : am, Cfg::kAmaxFloor);
    if constexpr (Cfg::kScaleMath != ScaleMath::divide) {
      return num::mul(a, Cfg::kInvQuantMax);
    } else if constexpr (kDivViaDouble) {
      return num::div_via_double(a, kInvQuantMaxD);
    } else {
      return num::div(a, Cfg::kQuantMax);
    }
  }

  // What a token's block is stored with: `mult` multiplies the values before they are encoded,
  // `scale_f` / `scale_byte` are the stored scale.
  struct Scale {
    float mult = 1.0f;
    float scale_f = 1.0f;
    uint32_t scale_byte = 0u;
  };
  // ts -> Scale, except the fp32 kind's 1 / ts (`mult`), which the caller computes (shared, see run)
  __device__ static __forceinline__ Scale scale_of(float ts) {
    Scale sc;
    if constexpr (kFp32Scale) {
      sc.scale_f = ts;
    } else if constexpr (kScaleNormal) {
      // ts normal (or +inf): sb = bits of 2^e, e = ceil_log2(ts) in [-126, 128], e + 127 = sb >> 23:
      // exactly exp2i(e), exp2i(-e) and e + 127 of the general path below (tests/exact/pow2.cc
      // checks every such ts)
      const uint32_t sb = num::pow2_ceil_bits(ts);
      sc.scale_f = __uint_as_float(sb);
      sc.mult = __uint_as_float(num::pow2_inv_bits(sb));
      sc.scale_byte = sb >> 23;
    } else {
      const int e = num::ceil_log2(ts);
      sc.scale_f = num::exp2i(e);
      sc.mult = num::exp2i(-e);
      sc.scale_byte = static_cast<uint32_t>(e + 127);
    }
    return sc;
  }

  // §6 second half and §7: encode and store. `page_off` is the token's page address (64-bit), `t` its
  // slot in the page; only used when `keep` (0 <= out_loc < num_slots).
  __device__ static __forceinline__ void store(const float (&v)[V], const Scale& sc, unsigned long long page_off,
                                               uint32_t t, bool keep, int lane, const Dst& dst) {
    const uint32_t row = t * static_cast<uint32_t>(Cfg::kRowBytes);  // row offset in the page (< 2^31)
    const int ql = lane - kQuantLane0;
    const bool in_quant = static_cast<unsigned>(ql) < static_cast<unsigned>(kQuantLanes);
    if constexpr (kHalfStore) {
      mem::Words<kQuantBytes> o;
      pack_halves<kStore>(v, o);
      if (keep && in_quant) mem::store_cs(dst.q + page_off + row, o);
    } else {
      const float mult = sc.mult;
      mem::Words<kQuantBytes> o;
      mem::zero(o);
      if constexpr (kFp8) {
        if constexpr (V == 1) {
          o.w[0] = num::e4m3(kScaled ? num::mul(v[0], mult) : v[0]);
        } else {
#pragma unroll
          for (int k = 0; k < V; k += 2) {
            const float lo = kScaled ? num::mul(v[k], mult) : v[k];
            const float hi = kScaled ? num::mul(v[k + 1], mult) : v[k + 1];
            o.w[k / 4] |= num::e4m3x2(lo, hi) << (16 * ((k / 2) & 1));
          }
        }
        if (keep && in_quant) mem::store_cs(dst.q + page_off + row, o);
      } else {
        static_assert(kFp4, "store dtype");
#pragma unroll
        for (int k = 0; k < V; ++k) o.w[k / 8] |= num::e2m1(num::mul(v[k], mult)) << (4 * (k & 7));
        if constexpr (kNibblePairs) {  // element 2k in the low nibble, 2k+1 in the high one
          const uint32_t hi = __shfl_xor_sync(num::kFullMask, o.w[0], 1);
          o.w[0] |= hi << 4;
          if (keep && in_quant && (ql & 1) == 0) {
            mem::store_cs(dst.q + page_off + row, o);
          }
        } else {
          if (keep && in_quant) mem::store_cs(dst.q + page_off + row, o);
        }
      }
      if constexpr (kScaled) {
        if (keep && in_quant && ql % kBlockLanes == 0) {
          uint8_t* const sp = dst.s + page_off + t * static_cast<uint32_t>(Cfg::kScaleStride);
          if constexpr (kFloatScaleBytes) {
            mem::store_cs_f32(sp, sc.scale_f);
          } else {
            mem::store_cs_u8(sp, sc.scale_byte);
          }
        }
      }
    }

    // kept RoPE dims: a round-to-nearest-even cast, no scale
    if constexpr (kKept) {
      const int kl = lane - kKeptLane0;
      if (keep && static_cast<unsigned>(kl) < static_cast<unsigned>(kKeptLanes)) {
        mem::Words<kKeptBytes> o;
        pack_halves<Cfg::kRopeDtype>(v, o);
        mem::store_cs(dst.k + page_off + row, o);
      }
    }
  }

  __device__ static __forceinline__ void load_lane_floats(const In* __restrict__ p, int lane, float (&out)[V]) {
    XWords r;
    mem::load_nc<kInBytes>(p + lane * V, r);
    widen(r, out);
  }

  // Register budget. The warp's tokens are loaded in groups of kGroup (all loads of a group before
  // any of its math): kGroup == T (launch.stage_tokens, if set) unless the words in flight would not fit the registers
  // __launch_bounds__ leaves (head_dim 1024, or 1024-thread blocks); the norm weights stay in
  // registers across tokens when they fit too, else each token re-reads them (L1 hits).
  static constexpr int kRegs =
      Cfg::kSmRegisters / (W * 32) < 255 ? static_cast<int>(Cfg::kSmRegisters / (W * 32)) : 255;
  static constexpr int kAvail = kRegs - 40;  // addresses, indices, loop state, scale math
  static constexpr int kWeightRegs = (kNorm ? V : 0) + (kLayerNorm ? V : 0);
  static constexpr int kWorkRegs = V + 8;
  static constexpr int kTokenRegs = XWords::kCount + (kRope ? FWords::kCount : 0) + 2;
  // launch.stage_tokens (k > 0, fewer than the warp's tokens): groups of k, each group's loads issued
  // one group ahead (two groups' words live at once)
  static constexpr int kStage = static_cast<int>(Cfg::kStageTokens);
  static constexpr bool kStaged = kStage > 0 && kStage < T;
  static constexpr int kLive = kStaged ? 2 : 1;
  static constexpr bool kHoldWeights = kWeightRegs + kWorkRegs + kLive * kTokenRegs <= kAvail;
  static constexpr int kFit = (kAvail - kWorkRegs - (kHoldWeights ? kWeightRegs : 0)) / (kLive * kTokenRegs);
  static constexpr int kWant = kStaged ? kStage : T;
  static constexpr int kGroup = kFit < 1 ? 1 : (kFit > kWant ? kWant : kFit);
  static constexpr int kGroups = (T + kGroup - 1) / kGroup;
  static constexpr int kAhead = kStaged && kGroups > 1 ? 1 : 0;  // groups loaded before the current one computes
  static_assert(T <= 32, "a warp's tokens are handed out one per lane");

  __device__ static __forceinline__ void load_weights(const In* __restrict__ weight, const In* __restrict__ bias,
                                                      int lane, float (&w)[V], float (&b)[V]) {
#pragma unroll
    for (int k = 0; k < V; ++k) w[k] = b[k] = 0.0f;
    if constexpr (kNorm) load_lane_floats(weight, lane, w);
    if constexpr (kLayerNorm) load_lane_floats(bias, lane, b);
  }

  // A warp-uniform value of token j of a group, computed once in lane j (the same operations on the
  // same operand as in every lane, so the same bits) and handed back by a shuffle.
  template <int G, class F>
  __device__ static __forceinline__ void per_token_in_lanes(const float (&in)[G], float (&out)[G], int lane, F f) {
    float sel = in[0];
#pragma unroll
    for (int j = 1; j < G; ++j) sel = lane == j ? in[j] : sel;
    const float mine = f(sel);
#pragma unroll
    for (int j = 0; j < G; ++j) out[j] = __shfl_sync(num::kFullMask, mine, j);
  }
  __device__ static __forceinline__ unsigned long long shfl_u64(unsigned long long x, int src) {
    const uint32_t lo = __shfl_sync(num::kFullMask, static_cast<uint32_t>(x), src);
    const uint32_t hi = __shfl_sync(num::kFullMask, static_cast<uint32_t>(x >> 32), src);
    return (static_cast<unsigned long long>(hi) << 32) | lo;
  }

  // p: the kernel's one parameter (the config's Params, laid out by kgen/abi.py)
  __device__ static __forceinline__ void run(const typename Cfg::Params& p) {
    const In* __restrict__ const x = p.x;
    const In* __restrict__ const weight = p.weight;
    const In* __restrict__ const bias = p.bias;
    const float* __restrict__ const freqs = p.freqs;
    const int64_t* __restrict__ const positions = p.positions;
    const int64_t* __restrict__ const out_loc = p.out_loc;
    uint8_t* __restrict__ const cache = p.cache;
    const int32_t num_tokens = p.num_tokens;
    const int64_t num_slots = p.num_slots;
    const int lane = static_cast<int>(threadIdx.x) & 31;
    const int warp = static_cast<int>(threadIdx.x) >> 5;
    // token indices in 32 bits: a warp that owns no token leaves (whole warp: uniform), so from
    // here on first < num_tokens < 2^31 and first + j < 2^31 + T
    if (num_tokens <= 0 || blockIdx.x > 0x7fffffffu / static_cast<uint32_t>(W * T)) return;
    const uint32_t first =
        (blockIdx.x * static_cast<uint32_t>(W) + static_cast<uint32_t>(warp)) * static_cast<uint32_t>(T);
    const uint32_t ntok = static_cast<uint32_t>(num_tokens);
    if (first >= ntok) return;
    const In* const x_p = x + static_cast<unsigned long long>(first) * H + lane * V;
    const int rl = lane - kRopeLane0;
    const bool in_rope = kRope && static_cast<unsigned>(rl) < static_cast<unsigned>(kRopeLanes);
    const int fidx = kNeox ? (rl < kRopeHalf ? rl : rl - kRopeHalf) : rl;
    // this lane's floats of a freqs row (lanes outside the rope span never load)
    const float* const f_p = in_rope ? freqs + fidx * kFreqFloats : freqs;
    const Dst dst = lane_dst(cache, lane);

    // Everything above is the prologue a dependent launch may overlap with the previous kernel;
    // every read of an input comes after this (docs/numerics.md says nothing about it: PDL does
    // not change a byte).
    if constexpr (Cfg::kPdl != 0) {
      mem::pdl_wait();
      // the next kernel may start its prologue now: it waits for this grid's completion in its own
      // pdl_wait, so nothing it reads can race with these stores; started early, its launch
      // latency hides behind this kernel (a graph of back-to-back calls gains the most)
      mem::pdl_launch_dependents();
    }

    // The warp's per-token scalars, one token per lane (lane j: token first + j), in one coalesced
    // load each: the slot, kept or not, its page address and row, and the position. Each token's
    // values come back by a shuffle where they are used, so no lane holds T copies.
    const uint32_t my_tok = first + static_cast<uint32_t>(lane);
    long long my_loc = -1, my_pos = 0;
    if (lane < T && my_tok < ntok) {
      if constexpr (kRope && kCompressPlan) {
        // SGLang's prefill CompressPlan {uint32 seq_len, uint16 ragged_id, uint16 buffer_len, int32
        // read_page_0, int32 read_page_1} (16 B): row i is compressed key i (x row i), its slot is
        // out_loc[ragged_id] (out_loc holds a slot per query token) and position = seq_len - R.
        // Padding rows (seq_len = invalid) are skipped, and so are rows that would read before freqs
        // or past out_loc (docs/numerics.md §0)
        const uint4 plan = __ldg(reinterpret_cast<const uint4*>(positions) + my_tok);
        const uint32_t ragged = plan.y & 0xFFFFu;  // little-endian: the low half of the second word
        const bool emit = plan.x != kPlanInvalid && plan.x >= kRatio && ragged < ntok;
        my_loc = emit ? __ldg(out_loc + ragged) : -1;
        my_pos = static_cast<long long>(plan.x) - static_cast<long long>(kRatio);
      } else {
        my_loc = __ldg(out_loc + my_tok);
        if constexpr (kRope && kDecodePlan) {
          // SGLang's DecodePlan {uint32 seq_len, int32 write_loc, int32 read_page_0, int32 read_page_1}
          // (16 B, 16-B aligned) in place of the position: position = seq_len - R, and only the tokens
          // where the compressor emits a key are written (docs/numerics.md §0)
          const uint4 plan = __ldg(reinterpret_cast<const uint4*>(positions) + my_tok);
          const bool emit = static_cast<int>(plan.y) >= 0 && static_cast<int>(plan.z) >= 0 && plan.x >= kRatio &&
                            plan.x % kRatio == 0u;
          my_pos = static_cast<long long>(plan.x) - static_cast<long long>(kRatio);
          if (!emit) my_loc = -1;
        } else if constexpr (kRope) {
          my_pos = __ldg(positions + my_tok);  // positions is nullptr without rope
        }
      }
    }
    const bool my_keep = my_loc >= 0 && my_loc < num_slots;
    const unsigned long long my_uloc = static_cast<unsigned long long>(my_loc);
    const unsigned long long my_page = (my_uloc >> Cfg::kPageShift) * static_cast<unsigned long long>(Cfg::kPageBytes);
    // slot in its page, or ~0u for a skipped token (the shuffle carries "kept" for free)
    const uint32_t my_t = my_keep ? static_cast<uint32_t>(my_uloc) & static_cast<uint32_t>(Cfg::kPageSize - 1) : ~0u;
    // freqs row offset in floats; skipped tokens load nothing
    const unsigned long long my_frow = my_keep ? static_cast<unsigned long long>(my_pos) * kRopeDim : ~0ull;

    float w[V], b[V];  // norm weight and bias: once per warp when they fit (kHoldWeights)
    if constexpr (kHoldWeights) load_weights(weight, bias, lane, w, b);

    // phase 1 of a group: the x rows of its tokens (no dependency: issued first), then phase 2: the
    // freqs rows (they wait for the positions); only for tokens that are stored
    auto load_group = [&](int g0, XWords(&xr)[kGroup], FWords(&fr)[kGroup]) {
#pragma unroll
      for (int j = 0; j < kGroup; ++j) {
        mem::zero(xr[j]);
        if (g0 + j < T && first + (g0 + j) < ntok) mem::load_nc<kInBytes>(x_p + (g0 + j) * H, xr[j]);
      }
#pragma unroll
      for (int j = 0; j < kGroup; ++j) {
        mem::zero(fr[j]);
        if constexpr (kRope) {
          const unsigned long long frow = g0 + j < T ? shfl_u64(my_frow, g0 + j) : ~0ull;
          if (in_rope && frow != ~0ull) mem::load_nc<kFreqBytes>(f_p + frow, fr[j]);
        }
      }
    };

    // phase 3 of a group: compute every token, store the kept ones. The math runs unconditionally so
    // that its shuffles sit in code the compiler knows is converged: behind a branch on the loaded
    // slot they become WARPSYNC/collective sequences (measured: ~2x the instructions).
    auto compute_group = [&](int g0, const XWords(&xr)[kGroup], const FWords(&fr)[kGroup]) {
      float v[kGroup][V];
      float op[kGroup];
#pragma unroll
      for (int j = 0; j < kGroup; ++j) {
        widen(xr[j], v[j]);
        op[j] = norm_operand(v[j]);
      }
      // r = 1 / sqrt(op) is warp-uniform per token: one IEEE sqrt + rcp chain for the group
      float r[kGroup];
      if constexpr (kNorm && kGroup > 1) {
        per_token_in_lanes<kGroup>(op, r, lane, [](float o) { return norm_r(o); });
      } else {
#pragma unroll
        for (int j = 0; j < kGroup; ++j) r[j] = kNorm ? norm_r(op[j]) : 1.0f;
      }
#pragma unroll
      for (int j = 0; j < kGroup; ++j) {
        if constexpr (!kHoldWeights) load_weights(weight, bias, lane, w, b);
        transform(v[j], r[j], fr[j], w, b, lane);
      }
      Scale sc[kGroup];
      if constexpr (kScaled) {
        float ts[kGroup];
#pragma unroll
        for (int j = 0; j < kGroup; ++j) {
          ts[j] = scale_operand(v[j]);
          sc[j] = scale_of(ts[j]);
        }
        if constexpr (kFp32Scale) {
          // 1 / ts: warp-uniform when one block spans the warp, so computed once per group as r is
          float inv[kGroup];
          if constexpr (kGroup > 1 && kBlockLanes == 32) {
            per_token_in_lanes<kGroup>(ts, inv, lane, [](float t) { return num::rcp(t); });
          } else {
#pragma unroll
            for (int j = 0; j < kGroup; ++j) inv[j] = num::rcp(ts[j]);
          }
#pragma unroll
          for (int j = 0; j < kGroup; ++j) sc[j].mult = kFoldHadamard ? num::mul(inv[j], Cfg::kHadamardScale) : inv[j];
        }
      }
#pragma unroll
      for (int j = 0; j < kGroup; ++j) {
        const int src = g0 + j < T ? g0 + j : 0;
        const uint32_t t = g0 + j < T ? __shfl_sync(num::kFullMask, my_t, src) : ~0u;
        const unsigned long long page_off = shfl_u64(my_page, src);
        store(v[j], sc[j], page_off, t, t != ~0u, lane, dst);
      }
    };

    // The warp's groups in order. Without staging (kAhead 0) a group's loads are issued right before
    // it computes; with launch.stage_tokens (kAhead 1) group s + 1's loads are issued before group s
    // computes, so their DRAM round trip (the freqs rows' after the positions', which all came in one
    // load above) overlaps group s's math: a software pipeline over two register buffers. Fully
    // unrolled, so every buffer index is a compile-time constant.
    XWords xr[kAhead + 1][kGroup];
    FWords fr[kAhead + 1][kGroup];
#pragma unroll
    for (int s = 0; s < kGroups + kAhead; ++s) {
      if (s < kGroups) load_group(s * kGroup, xr[s % (kAhead + 1)], fr[s % (kAhead + 1)]);
      if (s >= kAhead) {
        const int c = s - kAhead;
        compute_group(c * kGroup, xr[c % (kAhead + 1)], fr[c % (kAhead + 1)]);
      }
    }
  }
};

}  // namespace detail

template <class Cfg>
__global__ void __launch_bounds__(rules::launch_threads<Cfg>(), rules::launch_min_blocks<Cfg>())
    norm_rope_store(const __grid_constant__ typename Cfg::Params p) {
  static_assert(sizeof(rules::Twins<Cfg>) > 0, "instantiates the rule twins");
  if constexpr (rules::Twins<Cfg>::run) {
    // The launch shape by token count (launch.large_min_tokens): num_tokens is the same in every thread,
    // so the branch never diverges, and the host sized the grid by the same rule (kgen.layout.launch_shape).
    // Both paths write the same bytes: the shape decides which warp computes a token, not how.
    constexpr int kSmall = static_cast<int>(Cfg::kTokensPerWarp);
    constexpr int kLarge = static_cast<int>(Cfg::kLargeTokensPerWarp);
    if constexpr (Cfg::kLargeMinTokens > 0 && kLarge != kSmall) {
      if (p.num_tokens >= Cfg::kLargeMinTokens) {
        detail::NormRopeStore<Cfg, kLarge>::run(p);
        return;
      }
    }
    detail::NormRopeStore<Cfg, kSmall>::run(p);
  }
}

}  // namespace kgen
