// kgen checks: the static_assert twins of the validator's rules (kgen/rules.py, twin=True).
//
// The rendered config carries the raw spec values (dims, enums, page_align, ...) next to the byte
// math of kgen/layout.py. Each rule is re-checked here on those constants, with a message that
// starts with `[rule-id]`, so `kgen render --no-validate` of a bad spec still fails to compile with
// the validator's id. `Rules<Cfg>::ok` gates the kernel body: a rejected config instantiates no
// kernel code, so the twins are the only errors the compiler prints.
#pragma once

#include "numerics.cuh"

namespace kgen {
namespace rules {

// The thresholds the rules compare against (kPageSizeMax, kHeadDimMin/Max, kMaxWarpsPerBlock, ...) are
// the config's: kgen.rules.twin_limits renders them into every variant, so these twins re-derive the
// rules' logic and never restate a number the Python owns.

KGEN_HD constexpr long long max3(long long a, long long b, long long c) {
  return a > b ? (a > c ? a : c) : (b > c ? b : c);
}

// values_per_lane as a whole number, or 0 (the validator's Fraction with denominator != 1)
template <class C>
KGEN_HD constexpr long long lanes_v() {
  return C::kHeadDim % 32 == 0 && C::kHeadDim > 0 ? C::kHeadDim / 32 : 0;
}

template <class C>
KGEN_HD constexpr bool head_dim() {
  const long long h = C::kHeadDim;
  return C::kHeadDimMin <= h && h <= C::kHeadDimMax && h % 32 == 0 && is_pow2(h / 32);
}

template <class C>
KGEN_HD constexpr bool rope_dim() {
  const long long r = C::kRopeDim, h = C::kHeadDim;
  return !(r < 0 || r % 2 != 0 || r > h);
}

template <class C>
KGEN_HD constexpr bool rope_lanes() {
  const long long r = C::kRopeDim, V = lanes_v<C>();
  // silent when head_dim or rope.dim is already wrong (one problem, not one per derived check)
  if (!C::kLayoutComputed || r <= 0 || !head_dim<C>() || !rope_dim<C>() || V == 0) return true;
  if (r % V != 0) return false;
  if (C::kRopeStyle == RopeStyle::interleaved && V % 2 != 0) return false;
  if (C::kRopeStyle == RopeStyle::neox && (r / 2) % V != 0) return false;
  return true;
}

template <class C>
KGEN_HD constexpr bool hadamard() {
  return !C::kHadamard || is_pow2(C::kHeadDim);
}

template <class C>
KGEN_HD constexpr bool norm_eps() {
  return C::kNormKind == NormKind::none || C::kEps > 0.0f;  // a non-finite eps is rendered as 0
}

template <class C>
KGEN_HD constexpr bool store_scale_kind() {
  switch (C::kStoreDtype) {
    case Dtype::bf16:
    case Dtype::fp16:
      return C::kScaleKind == ScaleKind::none;
    case Dtype::fp4_e2m1:
      return C::kScaleKind == ScaleKind::ue8m0;
    case Dtype::fp8_e4m3:
      return true;
    default:
      return false;
  }
}

template <class C>
KGEN_HD constexpr bool store_scale_fp4_block() {
  if (C::kStoreDtype != Dtype::fp4_e2m1) return true;
  if (C::kBlockSet) return C::kBlockRaw == C::kFp4Block;
  return !C::kLayoutComputed || C::kQuantDim == C::kFp4Block;
}

template <class C>
KGEN_HD constexpr bool store_block() {
  if (C::kBlockSet && C::kBlockRaw <= 0) return false;  // with or without a scale
  if (!C::kLayoutComputed || C::kScaleKind == ScaleKind::none) return true;
  const long long b = C::kBlock, n = C::kQuantDim, V = lanes_v<C>();
  if (b <= 0 || n % b != 0) return false;
  if (!head_dim<C>() || V == 0) return true;
  if (b % V != 0) return false;
  const long long lanes = b / V;
  if (!is_pow2(lanes) || lanes > 32) return false;
  return (C::kQuantStart / V) % lanes == 0;
}

template <class C>
KGEN_HD constexpr bool store_rope_dtype() {
  if (C::kRopeDtype == Dtype::none) return true;
  if (C::kStoreDtype == Dtype::bf16 || C::kStoreDtype == Dtype::fp16) return false;
  return C::kRopeDim != 0 && C::kRopeDim < C::kHeadDim;
}

template <class C>
KGEN_HD constexpr bool store_amax_floor() {
  return C::kScaleKind == ScaleKind::none || C::kAmaxFloor > 0.0f;  // non-finite is rendered as 0
}

template <class C>
KGEN_HD constexpr bool page_size() {
  return is_pow2(C::kPageSize) && C::kPageSize <= C::kPageSizeMax;
}

template <class C>
KGEN_HD constexpr bool page_align() {
  return C::kPageAlign >= 1 && C::kPageAlign < C::kPageBytesLimit;
}

template <class C>
KGEN_HD constexpr bool scale_stride() {
  if (!C::kScaleStrideSet) return true;
  const long long st = C::kScaleStrideRaw;
  if (!C::kLayoutComputed) return st >= 0;
  if (st < C::kScaleBytes) return false;
  return C::kScaleUnit == 0 || st % C::kScaleUnit == 0;
}

template <class C>
KGEN_HD constexpr bool layout_align() {
  if (!C::kLayoutComputed || !head_dim<C>()) return true;
  if (C::kQuantLaneBits % 8 != 0) return false;  // a lane cannot store a fraction of a byte
  const long long vec = C::kStoreVectorBytes, kvec = C::kKeptVectorBytes, unit = C::kScaleUnit;
  if (vec && (C::kRowBytes % vec != 0 || C::kQuantRowOffset % vec != 0)) return false;
  if (kvec && (C::kKeptRowOffset % kvec != 0 || C::kRowBytes % kvec != 0)) return false;
  const long long need = max3(vec, kvec, unit > 1 ? unit : 1);
  if (C::kPageBytes % need != 0) return false;
  return !(unit > 1 && C::kScaleRegionOffset % unit != 0);
}

template <class C>
KGEN_HD constexpr bool page_bytes_limit() {
  // a page_align out of range is the page-align rule's problem (it alone rounds the page past 2^31)
  return !C::kLayoutComputed || C::kPageBytes < C::kPageBytesLimit || !page_align<C>();
}

template <class C>
KGEN_HD constexpr bool launch() {
  return 1 <= C::kWarpsPerBlock && C::kWarpsPerBlock <= C::kMaxWarpsPerBlock && 1 <= C::kTokensPerWarp &&
         C::kTokensPerWarp <= C::kMaxTokensPerWarp && 0 <= C::kStageTokens && C::kStageTokens <= C::kMaxTokensPerWarp &&
         0 <= C::kMinBlocksPerSm && C::kMinBlocksPerSm * C::kWarpsPerBlock <= C::kMaxWarpsPerSm;
}

template <class C>
KGEN_HD constexpr bool launch_large() {
  return 0 <= C::kLargeMinTokens && C::kLargeMinTokens <= C::kMaxNumTokens && 1 <= C::kLargeTokensPerWarp &&
         C::kLargeTokensPerWarp <= C::kMaxTokensPerWarp;
}

template <class C>
KGEN_HD constexpr bool positions() {
  // at most one plan kind (kgen/spec.py's positions.source is one value); either needs RoPE and a ratio
  return !(C::kDecodePlan && C::kCompressPlan) &&
         (!(C::kDecodePlan || C::kCompressPlan) ||
          (C::kRopeDim > 0 && 1 <= C::kCompressRatio && C::kCompressRatio <= C::kCompressRatioMax));
}

template <class C>
KGEN_HD constexpr bool all_rules() {
  return head_dim<C>() && rope_dim<C>() && rope_lanes<C>() && hadamard<C>() && norm_eps<C>() && store_scale_kind<C>() &&
         store_scale_fp4_block<C>() && store_block<C>() && store_rope_dtype<C>() && store_amax_floor<C>() &&
         page_size<C>() && page_align<C>() && scale_stride<C>() && layout_align<C>() && page_bytes_limit<C>() &&
         launch<C>() && launch_large<C>() && positions<C>();
}

// The kernel's own reading of the spec: the spans it assumes (docs/numerics.md, layout.spans), which
// must agree with what kgen/layout.py rendered. Checked only for configs that pass every rule.
template <class C>
KGEN_HD constexpr bool layout_agrees() {
  if (!C::kLayoutComputed) return false;
  const long long h = C::kHeadDim, r = C::kRopeDim;
  const bool first = C::kRopePlacement == RopePlacement::first;
  const bool kept = C::kRopeDtype != Dtype::none && r > 0;
  const long long rope_start = first ? 0 : h - r;
  const long long quant_start = kept && first ? r : 0;
  const long long quant_dim = kept ? h - r : h;
  const long long V = h / 32;
  return C::kValuesPerLane == V && C::kRopeStart == rope_start && C::kQuantStart == quant_start &&
         C::kQuantDim == quant_dim && C::kKeptDim == (kept ? r : 0) && C::kKeptStart == rope_start &&
         C::kRopeLane0 * V == rope_start && C::kRopeLanes * V == r && C::kQuantLane0 * V == quant_start &&
         C::kQuantLanes * V == quant_dim && C::kKeptLanes * V == C::kKeptDim && C::kKeptLane0 * V == C::kKeptStart &&
         (1ll << C::kPageShift) == C::kPageSize &&
         C::kQuantRowOffset + C::kQuantLaneBits * C::kQuantLanes / 8 <= C::kRowBytes &&
         C::kScaleRegionOffset == C::kPageSize * C::kRowBytes &&
         (C::kScaleKind == ScaleKind::none || C::kBlockLanes * V == C::kBlock);
}

template <class C>
struct Twins {
  static_assert(head_dim<C>(),
                "[head-dim] head_dim must be 32 lanes x a power-of-two count of values, "
                "in [32, 1024]");
  static_assert(rope_dim<C>(), "[rope-dim] rope.dim must be even and within [0, head_dim]");
  static_assert(rope_lanes<C>(),
                "[rope-lanes] the rotated span must be whole lanes, with interleaved pairs "
                "inside a lane and neox pairs whole lanes apart");
  static_assert(hadamard<C>(), "[hadamard] Walsh-Hadamard needs a power-of-two head_dim");
  static_assert(norm_eps<C>(), "[norm-eps] norm.eps must be finite and > 0 (as fp32)");
  static_assert(store_scale_kind<C>(),
                "[store-scale] the store dtype does not take this scale kind "
                "(bf16/fp16: none; fp8_e4m3: any; fp4_e2m1: ue8m0)");
  static_assert(store_scale_fp4_block<C>(), "[store-scale] fp4_e2m1 needs scale ue8m0 with block 32");
  static_assert(store_block<C>(),
                "[store-block] the scale block must divide the quantized span, be whole "
                "lanes, span a power of two up to 32 lanes and align with the span");
  static_assert(store_rope_dtype<C>(),
                "[store-rope-dtype] rope_dtype needs a quantized store and "
                "0 < rope.dim < head_dim");
  static_assert(store_amax_floor<C>(),
                "[store-amax-floor] amax_floor must be finite and > 0 (as fp32) "
                "for scaled stores");
  static_assert(page_size<C>(), "[page-size] page_size must be a power of two in [1, 65536]");
  static_assert(page_align<C>(), "[page-align] page_align must be in [1, 2^31)");
  static_assert(scale_stride<C>(),
                "[scale-stride] scale_stride must hold a token's scales and be a "
                "multiple of the scale size");
  static_assert(layout_align<C>(),
                "[layout-align] rows, the RoPE part, pages and the scale region must be "
                "aligned for the lanes' vector stores");
  static_assert(page_bytes_limit<C>(), "[page-bytes-limit] a page must be smaller than 2^31 bytes");
  static_assert(launch<C>(),
                "[launch] warps_per_block must be in [1, 32], tokens_per_warp in [1, 8], stage_tokens in [0, 8] and "
                "min_blocks_per_sm x warps_per_block at most 64 resident warps");
  static_assert(launch_large<C>(),
                "[launch-large] large_min_tokens must be in [0, 2^31) and large_tokens_per_warp in [1, 8]");
  static_assert(positions<C>(), "[positions] an engine plan needs rope.dim > 0 and compress_ratio in [1, 65536]");
  static constexpr bool ok = all_rules<C>();
  static_assert(!ok || layout_agrees<C>(),
                "[layout] the rendered byte math disagrees with the kernel's "
                "reading of the spec (re-render with this kgen)");
  static constexpr bool run = ok && layout_agrees<C>();
};

// __launch_bounds__ of any config, valid or not (a rejected one must not add its own error).
template <class C>
KGEN_HD constexpr int launch_threads() {
  return launch<C>() ? static_cast<int>(C::kWarpsPerBlock) * 32 : 32;
}
// its minimum resident blocks per SM (1 = no register cap beyond what one block needs)
template <class C>
KGEN_HD constexpr int launch_min_blocks() {
  return launch<C>() && C::kMinBlocksPerSm > 0 ? static_cast<int>(C::kMinBlocksPerSm) : 1;
}

}  // namespace rules
}  // namespace kgen
