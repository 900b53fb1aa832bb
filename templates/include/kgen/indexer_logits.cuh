// kgen::indexer_logits: the read side of an indexer-key cache. For query token t of sequence b and
// every key s of b's context, reading the keys in place in their pages through the block table:
//
//     logits[b * next_n + t, s] = sum_h w[b * next_n + t, h] * relu(q[b, t, h] . key(b, s))   (visible s)
//                               = -inf                                                         (otherwise)
//
// key(b, s) is token s % page_size of page block_table[b, s / page_size], dequantized: bf16 as
// stored; fp8 e4m3 codes (widened to f16 in registers, exactly, as is an fp8 q) times the token's scale
// (scale > 0, so it is applied after the relu, once per key); fp4 e2m1 codes times their ue8m0 block
// scale, widened to bf16 in registers (exact). Products are exact, sums fp32 (mma.sync m16n8k16).
// Visibility (MTP, next_n query tokens per sequence, the engines' rule): key s is visible to token t
// iff s < seq_lens[b] - next_n + 1 + t. A visible key whose page index lies outside [0, num_pages)
// or whose table column lies outside [0, max_pages) is not read: its logit is NaN (the op's
// check_bounds option reports such inputs before the launch).
//
// Byte facts: the writer's config struct (kgen_cfg::<variant>, kgen/layout.py's constants) plus the
// reader's constants (layout.reader_constants). Reader::Twins re-derives every fact the reader
// relies on from the raw spec values, so writer and reader cannot disagree about a byte.
//
// Two paths, one launch shape each (kgen.indexer.runs_wgmma decides on the host, KGEN_READER_WGMMA and
// kReaderWgmma in the kernel): on sm_90a, for bf16 and fp8 keys whose rows are whole 128-B chunks, the
// wgmma path (WgLogits below: 64-key tiles staged by cp.async, q . k on wgmma, one wave of CTAs), and for
// fp4 keys (ue8m0 per 32) the same path with each staged tile widened to a bf16 operand in shared memory
// (WgFp4Logits); elsewhere (other archs, other layouts, the CPU emulation unless built with
// KGEN_CPU_SHIM_WGMMA) the mma.sync path described next.
//
// Work split: grid (x: slices of the context, y: sequence b, z: groups of query tokens); a CTA scores
// ceil(max_seq_len / gridDim.x) keys rounded up to whole iterations (kgen.layout.reader_launch).
// A CTA stages its tokens' q (in the mma fragment order, see below) and weights in shared memory,
// then each warp scores tiles of 32 keys (two m16 tiles: M = keys, N = heads, K = head_dim) with
// mma.sync: keys are the A operand, loaded straight from the page into registers as 16-B chunks
// (no shared memory), q the B operand. The sum over heads is per lane (relu, * w), then over the
// 4 lanes of a quad; each lane then stores one logit, so a warp's 32 stores are one 128-B line.
//
// Fragment mapping (layout.py's comment): lane (gid = lane / 4, tig = lane % 4) owns chunk tig of
// every 64-B group of a row; mma k-step j of group g takes the lane's values [j * E, (j + 1) * E)
// of that chunk (E = 4 values, widened to the 16-bit operand) as k = {2tig, 2tig+1, 2tig+8, 2tig+9}
// of mma m16n8k16 -- for A and B alike, so every product pairs the same dimension of q and key.
#pragma once

#include "checks.cuh"
#include "memory.cuh"
#include "numerics.cuh"

#ifndef KGEN_DYNAMIC_SMEM
#define KGEN_DYNAMIC_SMEM(name) extern __shared__ __align__(16) unsigned char name[]
#endif

// The sm_90a path (wgmma + cp.async) is compiled for sm_90a only (the arch-specific feature macro);
// elsewhere, and under the CPU emulation, the mma.sync path. kgen.arch.has_wgmma is the host's twin:
// it picks the launch (grid, shared memory) of the path the loaded cubin runs.
#if (defined(__CUDA_ARCH_FEAT_SM90_ALL) && !defined(KGEN_CPU_SHIM)) || defined(KGEN_CPU_SHIM_WGMMA)
#define KGEN_READER_WGMMA 1
#else
#define KGEN_READER_WGMMA 0
#endif

namespace kgen {

namespace reader {

constexpr long long kChunkBytes = 16, kGroupBytes = 64, kSmemBytes = 48 * 1024;
constexpr long long kMaxGroupsInFlight = 4;

KGEN_HD constexpr long long bits_of(Dtype d) {
  return d == Dtype::bf16 || d == Dtype::fp16 ? 16 : d == Dtype::fp8_e4m3 ? 8 : d == Dtype::fp4_e2m1 ? 4 : 0;
}
// the q the caller passes (fp4 keys: bf16); q and keys are widened to a 16-bit tensor-core operand
// (fp8: f16, else bf16)
KGEN_HD constexpr Dtype q_dtype(Dtype key) {
  return key == Dtype::fp4_e2m1 ? Dtype::bf16 : key;
}
KGEN_HD constexpr long long q_bytes(Dtype key) {
  return bits_of(q_dtype(key)) / 8;
}
constexpr long long kStepElems = 4, kOperandBytes = 2;
KGEN_HD constexpr long long min2(long long a, long long b) {
  return a < b ? a : b;
}

// What the reader can score (kgen/indexer.py's support check, twinned).
template <class C>
KGEN_HD constexpr bool supported() {
  return C::kLayoutComputed && C::kKeptDim == 0 && C::kQuantDim == C::kHeadDim &&
         (C::kStoreDtype == Dtype::bf16 || C::kStoreDtype == Dtype::fp8_e4m3 || C::kStoreDtype == Dtype::fp4_e2m1) &&
         (C::kStoreDtype != Dtype::fp8_e4m3 || C::kBlocksPerToken <= 1) &&
         (C::kStoreDtype != Dtype::fp4_e2m1 || C::kBlock == 32) && C::kRowBytes % kGroupBytes == 0 &&
         C::kReaderKeyVectorBytes >= 4 && C::kReaderTokensPerCta >= 1;
}

// The byte facts the reader relies on, re-derived from the raw spec values.
template <class C>
KGEN_HD constexpr bool layout_agrees() {
  const long long row = C::kHeadDim * bits_of(C::kStoreDtype) / 8;
  const long long stride = C::kScaleStrideSet ? C::kScaleStrideRaw : C::kScaleBytes;
  const long long raw_page = C::kPageSize * (row + stride);
  const long long page = (raw_page + C::kPageAlign - 1) / C::kPageAlign * C::kPageAlign;
  return C::kRowBytes == row && C::kQuantRowOffset == 0 && C::kScaleRegionOffset == C::kPageSize * row &&
         C::kScaleStride == stride && C::kPageBytes == page && C::kScaleBytes == C::kBlocksPerToken * C::kScaleUnit &&
         (C::kScaleKind == ScaleKind::none ? C::kScaleUnit == 0 && C::kBlocksPerToken == 0
                                           : C::kBlocksPerToken == C::kHeadDim / C::kBlock &&
                                                 C::kScaleUnit == (C::kScaleKind == ScaleKind::ue8m0 ? 1 : 4)) &&
         (1ll << C::kPageShift) == C::kPageSize;
}

// The sm_90a (wgmma) path's facts (kgen/layout.py's reader_wg_* functions), re-derived.
constexpr long long kWgTileKeys = 64, kWgChunkBytes = 128, kWgAlign = 1024, kWgRowInfoBytes = 4, kWgMaxTokens = 4;
constexpr long long kMaxSmemBytes = 227 * 1024, kSmSharedBytes = 228 * 1024, kCtaReservedBytes = 1024;
constexpr long long kWgMaxCtas = 16;
// fp4 values per ue8m0 scale the path converts (a function, not a namespace-scope constant: those are
// emitted into every cubin's global data, and the bf16 and fp8 cubins stay as they were)
KGEN_HD constexpr long long wg_fp4_block() {
  return 32;
}
// a key row as the A operand: as stored (bf16, fp8), widened to bf16 (fp4)
template <class C>
KGEN_HD constexpr long long wg_operand_row() {
  return C::kStoreDtype == Dtype::fp4_e2m1 ? C::kHeadDim * kOperandBytes : C::kRowBytes;
}
template <class C>
KGEN_HD constexpr long long wg_chunks() {
  return wg_operand_row<C>() % kWgChunkBytes == 0 ? wg_operand_row<C>() / kWgChunkBytes : 0;
}
// fp4: a packed row's 16-B pieces split the CTA's threads into passes of whole 8-row swizzle groups
template <class C>
KGEN_HD constexpr bool wg_fp4_passes_fit() {
  const long long threads = C::kReaderWarps * 32, pieces = C::kRowBytes / 16;
  return pieces > 0 && threads % pieces == 0 && (threads / pieces) % 8 == 0 && kWgTileKeys % (threads / pieces) == 0;
}
// fp4: a stage is the tile's packed rows and their scale bytes as stored
template <class C>
KGEN_HD constexpr long long wg_fp4_stage() {
  return kWgTileKeys * (C::kRowBytes + C::kScaleBytes);
}
// the TMA variant's per-stage mbarriers (full, empty) and its producer warp (kgen/layout.py READER_WG_TMA_*)
constexpr long long kWgTmaBarrierBytes = 16, kWgTmaProducerThreads = 32, kWgTmaMaxConsumers = 4;
constexpr long long kSmRegisters = 65536, kWgTmaRegisters = 80, kWgRegisters = 96;
template <class C>
KGEN_HD constexpr long long wg_smem(long long ntok) {
  const long long token = ntok * (wg_chunks<C>() * C::kReaderHeads * kWgChunkBytes + 4 * C::kReaderHeads);
  if (C::kStoreDtype == Dtype::fp4_e2m1) {
    return kWgAlign + wg_chunks<C>() * kWgTileKeys * kWgChunkBytes +
           C::kReaderWgStages * (wg_fp4_stage<C>() + kWgTileKeys * kWgRowInfoBytes) + token;
  }
  const long long stage = wg_chunks<C>() * kWgTileKeys * kWgChunkBytes + kWgTileKeys * kWgRowInfoBytes +
                          (C::kReaderWgTma ? kWgTmaBarrierBytes : 0);
  return kWgAlign + C::kReaderWgStages * stage + token;
}
template <class C>
KGEN_HD constexpr long long wg_tokens() {
  long long t = 0;
  for (long long n = 1; n <= kWgMaxTokens; ++n) {
    if (wg_smem<C>(n) <= kMaxSmemBytes) t = n;
  }
  // the cp.async variant stages a tile of several chunks chunk by chunk: one token's accumulators across them
  const bool whole_tiles = C::kReaderWgTma != 0 || C::kStoreDtype == Dtype::fp4_e2m1;
  return wg_chunks<C>() == 0 ? 0 : wg_chunks<C>() > 1 && !whole_tiles ? min2(t, 1) : t;
}
template <class C>
KGEN_HD constexpr bool wg_readable() {
  const bool scaled = C::kScaleKind != ScaleKind::none;
  const bool fp4 = C::kStoreDtype == Dtype::fp4_e2m1;
  return (C::kStoreDtype == Dtype::bf16 || C::kStoreDtype == Dtype::fp8_e4m3 || fp4) && C::kKeptDim == 0 &&
         C::kQuantRowOffset == 0 && C::kPageBytes % 16 == 0 && C::kRowBytes % 16 == 0 && wg_chunks<C>() > 0 &&
         C::kReaderWgStages >= 2 &&
         (fp4 ? C::kScaleKind == ScaleKind::ue8m0 && C::kBlock == wg_fp4_block() && C::kScaleUnit == 1 &&
                    C::kScaleBytes % 4 == 0 && C::kScaleRegionOffset % 4 == 0 && C::kScaleStride % 4 == 0 &&
                    wg_fp4_passes_fit<C>()
              : !scaled || (C::kStoreDtype == Dtype::fp8_e4m3 && C::kBlocksPerToken == 1 && C::kScaleUnit == 4 &&
                            C::kScaleRegionOffset % 4 == 0 && C::kScaleStride % 4 == 0)) &&
         wg_tokens<C>() >= 1;
}
// The TMA variant's own rules on top of wg_readable's (kgen.layout.reader_wg_tma_layout): bf16 or fp8 rows
// as stored, a tile inside one page (one box), fp8 scales consecutive at a 16-B aligned offset (a tile's 64
// are one 256-B bulk copy).
template <class C>
KGEN_HD constexpr bool wg_tma_readable() {
  return (C::kStoreDtype == Dtype::bf16 || C::kStoreDtype == Dtype::fp8_e4m3) && C::kPageSize % kWgTileKeys == 0 &&
         (C::kScaleKind == ScaleKind::none || (C::kScaleStride == 4 && C::kScaleRegionOffset % 16 == 0));
}
template <class C>
KGEN_HD constexpr long long wg_threads() {
  return C::kReaderWgTma ? C::kReaderWgConsumers * 128 + kWgTmaProducerThreads : C::kReaderWarps * 32;
}
template <class C>
KGEN_HD constexpr long long wg_ctas_per_sm() {
  const long long n = kSmSharedBytes / (wg_smem<C>(1) + kCtaReservedBytes);
  const long long most = C::kReaderWgTma ? kSmRegisters / (wg_threads<C>() * kWgTmaRegisters)
                                         : min2(kWgMaxCtas, kSmRegisters / (wg_threads<C>() * kWgRegisters));
  return n < 1 ? 1 : min2(n, most);
}
// kReaderWgmma 0 on a layout the path reads: the mma.sync path on sm_90a too (the bench compares them)
template <class C>
KGEN_HD constexpr bool wg_constants_agree() {
  const bool wg = C::kReaderWgmma == 1;
  return (C::kReaderWgmma == 0 || (wg && wg_readable<C>())) && C::kReaderWgTileKeys == kWgTileKeys &&
         C::kReaderWgChunkBytes == kWgChunkBytes && C::kReaderWgAlign == kWgAlign && C::kReaderWgStages >= 2 &&
         C::kReaderWgChunks == (wg ? wg_chunks<C>() : 0) && C::kReaderWgTokensPerCta == (wg ? wg_tokens<C>() : 0) &&
         C::kReaderWgMinBlocks == (wg ? wg_ctas_per_sm<C>() : 0) &&
         (C::kReaderWgL2Prefetch == 0 || C::kReaderWgL2Prefetch == 128 || C::kReaderWgL2Prefetch == 256) &&
         (C::kReaderWgTma == 0 || (wg && wg_tma_readable<C>() && C::kReaderWgStages % C::kReaderWgConsumers == 0 &&
                                   C::kReaderWgStages <= 32)) &&
         C::kReaderWgConsumers >= 1 && C::kReaderWgConsumers <= kWgTmaMaxConsumers &&
         (C::kReaderWgEvictFirst == 0 || C::kReaderWgEvictFirst == 1) &&
         C::kReaderWgTmaBarrierBytes == kWgTmaBarrierBytes && C::kReaderWgTmaProducerThreads == kWgTmaProducerThreads;
}

// The reader's own constants, re-derived.
template <class C>
KGEN_HD constexpr bool constants_agree() {
  const long long chunk_elems = kChunkBytes * 8 / bits_of(C::kStoreDtype);
  const long long step_elems = kStepElems;
  const long long groups = C::kRowBytes / kGroupBytes;
  const long long token_bytes = C::kReaderHeads * C::kHeadDim * kOperandBytes + 4 * C::kReaderHeads;
  long long vec = 0;
  for (long long v = 4; v <= 16; v *= 2) {
    if (C::kPageBytes % v == 0 && C::kRowBytes % v == 0) vec = v;
  }
  return C::kReaderHeads == 64 && C::kReaderMmaK == 16 && C::kReaderChunkElems == chunk_elems &&
         C::kReaderStepElems == step_elems && C::kReaderStepsPerChunk == chunk_elems / step_elems &&
         C::kReaderGroups == groups && C::kReaderSteps * C::kReaderMmaK == C::kHeadDim &&
         C::kReaderSteps == groups * (chunk_elems / step_elems) &&
         C::kReaderGroupsInFlight == min2(groups, kMaxGroupsInFlight) && C::kReaderKeyVectorBytes == vec &&
         C::kReaderQTokenBytes == token_bytes && C::kReaderTokensPerCta == min2(8, kSmemBytes / token_bytes) &&
         C::kReaderWarps >= 1 && C::kReaderWarps <= 32 && C::kReaderWarpKeys == 32 &&
         (C::kReaderPrefetch == 0 || C::kReaderPrefetch == 1) && C::kReaderMinBlocks >= 0 &&
         C::kReaderHeadPasses >= 1 && (C::kReaderHeads / 8) % C::kReaderHeadPasses == 0 &&
         C::kReaderMinBlocks * C::kReaderWarps <= 64 &&
         (C::kScaleKind == ScaleKind::none || C::kScaleRegionOffset % C::kScaleUnit == 0) && wg_constants_agree<C>();
}

template <class C>
struct Twins {
  static_assert(supported<C>(),
                "[reader-support] indexer_logits reads bf16, fp8 e4m3 (one scale per "
                "token) and fp4 e2m1 (ue8m0 per 32) keys with no kept RoPE span, rows a "
                "multiple of 64 B and pages 4-B aligned (kgen.indexer.reader_problems)");
  static_assert(!supported<C>() || layout_agrees<C>(),
                "[reader-layout] the rendered byte math disagrees with "
                "the reader's reading of the spec (re-render)");
  static_assert(!supported<C>() || constants_agree<C>(),
                "[reader-constants] the rendered reader constants "
                "disagree with the header (re-render)");
  static constexpr bool run = supported<C>() && layout_agrees<C>() && constants_agree<C>();
};

// The reader's twins only for a spec every rule accepts: one error list, the validator's ids first.
struct NoTwins {
  static constexpr bool run = false;
};
template <bool RulesOk, class C>
struct TwinsIf {
  using type = Twins<C>;
};
template <class C>
struct TwinsIf<false, C> {
  using type = NoTwins;
};

// Programmatic dependent launch: where the spec asks for it (C::kPdl), the launch sets the programmatic
// stream serialization attribute (kgen.layout.uses_pdl, as for the writer), so this grid may start while
// the kernel before it (the writer storing the keys this one reads, or a top-k still reading the last
// logits) runs on. Nothing before this call reads an input or writes an output; after it, the grids
// before this one are complete and their memory visible. The next grid may start its own prologue now.
template <class C>
__device__ __forceinline__ void wait_for_predecessor() {
  if constexpr (C::kPdl != 0) {
    mem::pdl_wait();
    mem::pdl_launch_dependents();
  }
}

// __launch_bounds__' minimum CTAs per SM of the path this compilation runs (wgmma: the CTAs the
// launch plans per SM, so that registers never bind before shared memory does)
template <class C>
KGEN_HD constexpr int min_blocks() {
#if KGEN_READER_WGMMA
  return static_cast<int>(C::kReaderWgmma ? C::kReaderWgMinBlocks : C::kReaderMinBlocks);
#else
  return static_cast<int>(C::kReaderMinBlocks);
#endif
}
// and its threads per CTA (the TMA variant: its consumer warpgroups and the producer warp)
template <class C>
KGEN_HD constexpr int threads() {
#if KGEN_READER_WGMMA && !defined(KGEN_CPU_SHIM)
  return static_cast<int>(C::kReaderWgmma ? wg_threads<C>() : C::kReaderWarps * 32);
#else
  return static_cast<int>(C::kReaderWarps * 32);
#endif
}

}  // namespace reader

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

// Two e4m3 codes (the low byte is the first) as an f16x2 word, exactly (cvt.rn.f16x2.e4m3x2).
__device__ __forceinline__ uint32_t e4m3x2_f16(uint32_t two) {
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(two & 0xffffu), __NV_E4M3);
  return static_cast<uint32_t>(h.x) | (static_cast<uint32_t>(h.y) << 16);
}

// Two e2m1 codes (the low nibble is the even element) times 2^(e - 127) (`scale`), as a bf16x2 word: the
// product of a code value (at most 3 significant bits) and a power of two is exact in bf16 (ue8m0 and
// bf16 share fp32's exponent range; byte 255, not a number, gives NaN). Twice the code magnitudes
// {0, 1, 2, 3, 4, 6, 8, 12} are the nibbles of 0xC8643210: no table in memory.
__device__ __forceinline__ float e2m1_value(uint32_t code, float half_scale) {
  const float twice = static_cast<float>((0xC8643210u >> ((code & 7u) * 4u)) & 15u);
  return (code & 8u ? -twice : twice) * half_scale;
}
__device__ __forceinline__ uint32_t e2m1x2_bf16(uint32_t byte, float scale) {
  const float half_scale = scale * 0.5f;
  return num::bf16_bits(e2m1_value(byte, half_scale)) | (num::bf16_bits(e2m1_value(byte >> 4, half_scale)) << 16);
}

// A ue8m0 scale byte e as a bf16x2 word holding 2^(e - 127) twice: bf16 shares fp32's exponent field, so
// e << 7 for e in [1, 254]; e = 0 is the subnormal 2^-127 (0x0040); e = 255, not a number, NaN.
__device__ __forceinline__ uint32_t ue8m0_bf16x2(uint32_t e) {
  const uint32_t h = e == 0u ? 0x0040u : e == 255u ? 0x7fc0u : e << 7;
  return h | (h << 16);
}
// Eight e2m1 codes (a 32-bit word; value i is nibble i: the low nibble of a byte is the even element) as
// four bf16x2 words (value 2i in the low half of word i) times `scale2` (ue8m0_bf16x2). The magnitudes
// {0, 0.5, 1, 1.5, 2, 3, 4, 6} are looked up by byte permutes in tables of their bf16 bytes (the code's
// low 3 bits select a byte of two table words), the sign bits moved to bits 15 and 31; the products
// with a power of two are exact in bf16 (at most 3 significant bits; the smallest, 2^-128, is a bf16
// subnormal), as in e2m1x2_bf16.
__device__ __forceinline__ uint32_t bf16x2_mul(uint32_t a, uint32_t b) {
#if defined(KGEN_CPU_SHIM)
  const uint32_t lo = num::bf16_bits(kgen_cpu::bf16_value(a) * kgen_cpu::bf16_value(b));
  const uint32_t hi = num::bf16_bits(kgen_cpu::bf16_value(a >> 16) * kgen_cpu::bf16_value(b >> 16));
  return lo | (hi << 16);
#else
  uint32_t d;  // fma with -0: the product alone, rounded once (exactly here), signed zeros kept
  asm("fma.rn.bf16x2 %0, %1, %2, %3;\n" : "=r"(d) : "r"(a), "r"(b), "r"(0x80008000u));
  return d;
#endif
}
__device__ __forceinline__ uint4 e2m1x8_bf16(uint32_t codes, uint32_t scale2) {
  constexpr uint32_t kLo0 = 0xC0800000u, kLo1 = 0xC0804000u;  // low bytes of codes 0-3, 4-7
  constexpr uint32_t kHi0 = 0x3F3F3F00u, kHi1 = 0x40404040u;  // high bytes
  const uint32_t mags = codes & 0x77777777u, mags_hi = mags >> 16, shifted = codes << 4;
  const uint32_t lo_a = __byte_perm(kLo0, kLo1, mags), hi_a = __byte_perm(kHi0, kHi1, mags);
  const uint32_t lo_b = __byte_perm(kLo0, kLo1, mags_hi), hi_b = __byte_perm(kHi0, kHi1, mags_hi);
  // word i: the sign of value 2i (bit 8i + 3: bit 7 of byte i of `shifted`) to bit 15, of value 2i + 1
  // (bit 8i + 7) to bit 31
  const uint32_t w0 = __byte_perm(lo_a, hi_a, 0x5140) | (__byte_perm(shifted, codes, 0x4000) & 0x80008000u);
  const uint32_t w1 = __byte_perm(lo_a, hi_a, 0x7362) | (__byte_perm(shifted, codes, 0x5010) & 0x80008000u);
  const uint32_t w2 = __byte_perm(lo_b, hi_b, 0x5140) | (__byte_perm(shifted, codes, 0x6020) & 0x80008000u);
  const uint32_t w3 = __byte_perm(lo_b, hi_b, 0x7362) | (__byte_perm(shifted, codes, 0x7030) & 0x80008000u);
  return make_uint4(bf16x2_mul(w0, scale2), bf16x2_mul(w1, scale2), bf16x2_mul(w2, scale2), bf16x2_mul(w3, scale2));
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
  static constexpr int H = static_cast<int>(C::kReaderHeads);
  static constexpr int kNT = H / 8;  // n8 tiles over the heads
  static constexpr int kWarps = static_cast<int>(C::kReaderWarps);
  static constexpr int kWarpKeys = static_cast<int>(C::kReaderWarpKeys);
  static constexpr int kMT = kWarpKeys / 16;  // m16 tiles per warp tile
  static constexpr int kRows = 2 * kMT;       // key rows a lane loads per tile: key r * 8 + gid
  static constexpr Dtype kKey = C::kStoreDtype;
  static constexpr bool kFp8 = kKey == Dtype::fp8_e4m3;
  static constexpr bool kFp4 = kKey == Dtype::fp4_e2m1;
  static constexpr int kGroups = static_cast<int>(C::kReaderGroups);
  static constexpr int kInFlight = static_cast<int>(C::kReaderGroupsInFlight);
  static constexpr int kBatches = (kGroups + kInFlight - 1) / kInFlight;
  static constexpr int kStepsPerChunk = static_cast<int>(C::kReaderStepsPerChunk);
  static constexpr int kSteps = static_cast<int>(C::kReaderSteps);
  static constexpr int kStepElems = static_cast<int>(C::kReaderStepElems);
  static constexpr int kChunkElems = static_cast<int>(C::kReaderChunkElems);
  static constexpr int kQBytes = static_cast<int>(reader::q_bytes(kKey));
  static constexpr int kVec = static_cast<int>(C::kReaderKeyVectorBytes);
  static constexpr int kTokensPerCta = static_cast<int>(C::kReaderTokensPerCta);
  static constexpr bool kScaled = C::kScaleKind != ScaleKind::none;
  static constexpr int kQSlots = kSteps * kNT * 32;  // uint2 slots of one token's q in shared memory
  static constexpr long long kRowBytes = C::kRowBytes;
  static constexpr long long kPageBytes = C::kPageBytes;
  static constexpr int kPageShift = static_cast<int>(C::kPageShift);
  static constexpr bool kPrefetch = C::kReaderPrefetch != 0;  // the next tile's rows during this one's mma
  // the heads in passes of kNTP n8 tiles: fewer accumulator registers, the key rows reused
  static constexpr int kNTP = kNT / static_cast<int>(C::kReaderHeadPasses);

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
      return exp2_biased(static_cast<uint32_t>(__ldg(p)));
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
      t.slot[r] = key & static_cast<int>(C::kPageSize - 1);
      t.bad[r] = false;
      if (key < visible_end && key < key_end) {
        const int col = key >> kPageShift;
        const int page = col < p.max_pages ? __ldg(table + col) : -1;
        if (page >= 0 && page < p.num_pages) {
          t.pagep[r] = p.cache + static_cast<long long>(page) * kPageBytes;
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
    const int* table = p.block_table + static_cast<long long>(b) * p.max_pages;
    // the last key any of this CTA's tokens can see
    const int visible_end = seq_len - p.next_n + t0 + ntok;
    int k0 = static_cast<int>(key0) + warp * kWarpKeys;

    // the first tile's rows are requested before q is staged: the two latencies overlap
    Tile tile = locate(p, table, k0, visible_end, key_end, gid, tig);
    Rows rows;
    if constexpr (kBatches == 1) fetch(tile, 0, tig, rows);

    // stage q (fragment order, as the 16-bit operand) and weights of this CTA's tokens: each thread
    // issues a round of loads before it stores any (one latency per round, not per load)
    const long long q_token0 = static_cast<long long>(b) * p.next_n + t0;
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
          const int passes = k0 < seq_len - p.next_n + 1 + t0 + t ? kNT : 0;
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
          const int passes = k0 < seq_len - p.next_n + 1 + t0 + t ? kNT : 0;
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
            fp4s[gg][r] = exp2_biased(static_cast<uint32_t>(
                __ldg(pagep[r] + C::kScaleRegionOffset + slot[r] * C::kScaleStride + (4 * g + tig) * C::kScaleUnit)));
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
      const bool visible = my_key < seq_len - p.next_n + 1 + t;
      const float out = !visible ? -__int_as_float(0x7f800000) : my_bad ? __int_as_float(0x7fc00000) : mine * my_scale;
      p.logits[(static_cast<long long>(b) * p.next_n + t) * p.max_seq_len + my_key] = out;
    }
  }
};

#if KGEN_READER_WGMMA
// ---------------------------------------------------------------------------------------------------
// The sm_90a path. A CTA is one warpgroup. Per tile of 64 consecutive keys (wgmma M = 64: the key rows,
// K-major, the A operand) and query token (N = 64 heads: q, K-major, the B operand, staged once), the
// q.k products of one 128-B chunk of the rows are 4 wgmma k-steps of 32 B (m64n64k32 e4m3 for fp8,
// m64n64k16 bf16 for bf16) into 32 fp32 accumulators per thread. The rows' chunks are staged by
// cp.async (16 B per thread and row, zero-filled for keys not read) into a ring of kReaderWgStages
// shared-memory stages; one pipeline step (one barrier pair, one cp.async group) covers kStepLoads of
// them: two tiles of 128-B rows, or a whole tile of longer rows, when the ring holds two such steps
// (an even ring of 4 or more), else one chunk. Several CTAs per SM hide each other's epilogues. Keys
// are read in place: every row's page comes from the block table (any page size).
//
// Accumulator layout (PTX wgmma, f32 D of m64nN): thread (warp w, gid = lane / 4, tig = lane % 4) holds
// d[4j + 2i + c] = row 16w + gid + 8i, column (head) 8j + 2tig + c. The sum over heads is per thread
// (relu, * w), then over the quad's 4 lanes; lanes tig 0 and 1 store rows gid and gid + 8.
namespace wg {

#if defined(KGEN_CPU_SHIM)
// The CPU emulation of this path (tests/reader_shim, built with KGEN_CPU_SHIM_WGMMA): the same primitives
// in software (shared addresses as offsets into the CTA's buffer, copies done at once, wgmma computed by
// each thread from the descriptors' swizzled layout).
using namespace kgen_cpu::wg_emulation;
#else
__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
// 16 B global -> shared, bypassing L1; `bytes` 0 reads nothing and writes zeros. Prefetch: the L2 fetches
// the aligned 128 or 256 B around the address (the key rows of a tile are consecutive in their page)
template <int Prefetch = 0>
__device__ __forceinline__ void cp16(uint32_t dst, const void* src, uint32_t bytes) {
  if constexpr (Prefetch == 256) {
    asm volatile("cp.async.cg.shared.global.L2::256B [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(bytes)
                 : "memory");
  } else if constexpr (Prefetch == 128) {
    asm volatile("cp.async.cg.shared.global.L2::128B [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(bytes)
                 : "memory");
  } else {
    static_assert(Prefetch == 0, "L2 prefetch of 0, 128 or 256 B");
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(bytes) : "memory");
  }
}
__device__ __forceinline__ void cp4(uint32_t dst, const void* src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(dst), "l"(src) : "memory");
}
// 4 B global -> shared; `bytes` 0 reads nothing and writes zeros
__device__ __forceinline__ void cp4z(uint32_t dst, const void* src, uint32_t bytes) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src), "r"(bytes) : "memory");
}
__device__ __forceinline__ void commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
template <int N>
__device__ __forceinline__ void wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}
// shared memory written by the generic proxy (cp.async, st.shared) before wgmma (the async proxy) reads it
__device__ __forceinline__ void fence_async_proxy() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
__device__ __forceinline__ void mma_fence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void mma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void mma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
}
// the launch's dynamic shared memory
__device__ __forceinline__ uint32_t dynamic_smem_size() {
  uint32_t bytes;
  asm("mov.u32 %0, %%dynamic_smem_size;\n" : "=r"(bytes));
  return bytes;
}

// The TMA variant's primitives: mbarriers in shared memory (8 B each, addressed as shared offsets), the
// tensor copy of one box through the cache's tensor map (in the kernel's parameter space), a bulk copy.
__device__ __forceinline__ void bar_init(uint32_t bar, uint32_t arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(arrivals) : "memory");
}
// the initialized barriers visible to the other threads and to the async proxy (the copies complete on them)
__device__ __forceinline__ void bar_init_fence() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
__device__ __forceinline__ void bar_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
// arrive, and expect `bytes` more of copies completing on this phase
__device__ __forceinline__ void bar_arrive_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
// until the phase of parity `parity` has completed
__device__ __forceinline__ void bar_wait(uint32_t bar, uint32_t parity) {
  asm volatile(
      "{\n.reg .pred done;\nWAIT:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT;\n}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}
// an L2 policy for data read once: its lines are the first the L2 evicts
__device__ __forceinline__ unsigned long long evict_first_policy() {
  unsigned long long policy;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(policy));
  return policy;
}
// box (c0, c1, c2, c3) of the tensor map at `map` into shared memory at `dst`, completing on `bar`; with
// `Hint`, under the L2 policy `policy`
template <bool Hint = false>
__device__ __forceinline__ void tma_load_4d(uint32_t dst, const void* map, uint32_t bar, int c0, int c1, int c2, int c3,
                                            unsigned long long policy = 0) {
  if constexpr (Hint) {
    asm volatile(
        "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1, "
        "{%3, %4, %5, %6}], [%2], %7;\n" ::"r"(dst),
        "l"(map), "r"(bar), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "l"(policy)
        : "memory");
  } else {
    asm volatile(
        "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5, "
        "%6}], [%2];\n" ::"r"(dst),
        "l"(map), "r"(bar), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
        : "memory");
  }
}
// the tensor map's 128 B fetched ahead of the first copy that reads it
__device__ __forceinline__ void prefetch_map(const void* map) {
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(map) : "memory");
}
// `bytes` (a multiple of 16, both addresses 16-B aligned) global -> shared, completing on `bar`
template <bool Hint = false>
__device__ __forceinline__ void bulk_load(uint32_t dst, const void* src, uint32_t bytes, uint32_t bar,
                                          unsigned long long policy = 0) {
  if constexpr (Hint) {
    asm volatile(
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], %2, [%3], %4;\n" ::
            "r"(dst),
        "l"(src), "r"(bytes), "r"(bar), "l"(policy)
        : "memory");
  } else {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(dst),
                 "l"(src), "r"(bytes), "r"(bar)
                 : "memory");
  }
}
// a barrier of `threads` threads (a multiple of 32) with id `id` (0 is __syncthreads')
__device__ __forceinline__ void named_sync(uint32_t id, uint32_t threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
#endif

// Shared-memory matrix descriptor of a K-major operand in the 128-B swizzle: start address, leading
// byte offset 16 (unused by a K-major swizzled operand), stride 1024 B between 8-row groups, mode 1.
// Kept as its two words: the low one (the address field, addr / 16 in 14 bits, and the leading byte
// offset) and the constant high one (stride, mode). An operand `bytes` further on is the low word plus
// bytes / 16: a shared address stays below 256 KB, so the field never carries; the main loop adds a
// stage's and a k-step's offsets to one low word instead of re-deriving each descriptor.
__device__ __forceinline__ uint32_t desc_sw128_lo(uint32_t addr) {
  return ((addr & 0x3FFFFu) >> 4) | (1u << 16);
}
__device__ __forceinline__ unsigned long long desc_sw128_of(uint32_t lo) {
  return (static_cast<unsigned long long>((1024 >> 4) | (1u << 30)) << 32) | lo;
}

#if !defined(KGEN_CPU_SHIM)
// The operands of one m64n64 wgmma with fp32 accumulators d[32] (%0-%31), descriptors a, b (%32, %33) and
// the accumulate flag (%34): both instructions below take the same list.
#define KGEN_WGMMA_M64N64_OPERANDS                                                                              \
  : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]),  \
    "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]),        \
    "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]),       \
    "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])                      \
  : "l"(a), "l"(b), "r"(accumulate)
#define KGEN_WGMMA_ACCUMULATORS                                                                                     \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, " \
  "%24, %25, %26, %27, %28, %29, %30, %31}"

// d (+)= A * B for one 32-B k-step: accumulate = 0 overwrites d
__device__ __forceinline__ void mma_e4m3(float (&d)[32], unsigned long long a, unsigned long long b,
                                         uint32_t accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3 " KGEN_WGMMA_ACCUMULATORS
      ", %32, %33, p, 1, 1;\n}\n" KGEN_WGMMA_M64N64_OPERANDS);
}
__device__ __forceinline__ void mma_bf16(float (&d)[32], unsigned long long a, unsigned long long b,
                                         uint32_t accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " KGEN_WGMMA_ACCUMULATORS
      ", %32, %33, p, 1, 1, 0, 0;\n}\n" KGEN_WGMMA_M64N64_OPERANDS);
}
#undef KGEN_WGMMA_M64N64_OPERANDS
#undef KGEN_WGMMA_ACCUMULATORS
#endif

// The epilogue of a 64-key tile (the accumulators of m64n64, 64 heads; WgLogits and WgFp4Logits): token
// t's logits row is `out` (logits + (b * next_n + t) * max_seq_len)
// the tile row whose logit this thread stores (tig < 2: rows gid and gid + 8 of the warp's 16)
__device__ __forceinline__ int finish_row(int warp, int gid, int tig) {
  return 16 * warp + gid + 8 * tig;
}
// `factor`: this thread's row's (finish_row; its scale, 1, or NaN for a bad page)
__device__ __forceinline__ void finish_with(const float (&acc)[32], bool any, const float* wt, float factor, float* out,
                                            int k0, int key_end, int visible_t, int warp, int gid, int tig) {
  float v0 = 0.0f, v1 = 0.0f;  // rows gid and gid + 8 of the warp's 16
  if (any) {
    float u0 = 0.0f, u1 = 0.0f;  // the odd heads' sums: two chains per row, half as deep
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const float2 w = *reinterpret_cast<const float2*>(wt + 8 * j + 2 * tig);
      v0 = fmaf(w.x, fmaxf(acc[4 * j], 0.0f), v0);
      u0 = fmaf(w.y, fmaxf(acc[4 * j + 1], 0.0f), u0);
      v1 = fmaf(w.x, fmaxf(acc[4 * j + 2], 0.0f), v1);
      u1 = fmaf(w.y, fmaxf(acc[4 * j + 3], 0.0f), u1);
    }
    v0 += u0;
    v1 += u1;
    v0 += __shfl_xor_sync(num::kFullMask, v0, 1);
    v0 += __shfl_xor_sync(num::kFullMask, v0, 2);
    v1 += __shfl_xor_sync(num::kFullMask, v1, 1);
    v1 += __shfl_xor_sync(num::kFullMask, v1, 2);
  }
  if (tig < 2) {
    const int key = k0 + finish_row(warp, gid, tig);
    if (key < key_end) {
      const float logit = key < visible_t ? (tig ? v1 : v0) * factor : -__int_as_float(0x7f800000);
      out[key] = logit;
    }
  }
}
__device__ __forceinline__ void finish(const float (&acc)[32], bool any, const float* wt, const float* info, float* out,
                                       int k0, int key_end, int visible_t, int warp, int gid, int tig) {
  const float factor = tig < 2 ? info[finish_row(warp, gid, tig)] : 0.0f;
  finish_with(acc, any, wt, factor, out, k0, key_end, visible_t, warp, gid, tig);
}

// byte offset of 16-B column c of row r in a 128-B swizzled chunk (8 rows x 128 B repeat)
__device__ __forceinline__ uint32_t swizzled128(int r, int c) {
  return static_cast<uint32_t>(r * 128 + ((c ^ (r & 7)) << 4));
}

// The launch's work, split by the keys each sequence really has (kgen.layout.reader_wg_launch: a 1-D grid,
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
// lengths): known before seq_lens is read, so the first table entries and q can be loaded meanwhile.
template <class C, int kTokens, int kTile>
struct Work {
  struct Pair {
    int b, t0, ntok, seq_len, ntiles;
  };
  struct Share {
    int pair, tile, count;     // where the CTA's first tile is, and how many it scores
    int fill_pair, fill_tile;  // where its share of the fill tiles starts (fill tile fill_tile of that pair)
    long long fill_count;
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
    const long long vis = static_cast<long long>(seq_len) - p.next_n + t0 + ntok;
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

  // the share where every pair has tiles_max tiles: (pair, tile) of its first tile, pair = pairs(p) if none
  __device__ static __forceinline__ void guess(const typename C::Params& p, int& pair, int& tile) {
    const long long tm = tiles_max(p), T = static_cast<long long>(pairs(p)) * tm;
    const long long t_lo = static_cast<long long>(blockIdx.x) * ceil_div(T, gridDim.x);
    pair = pairs(p);
    tile = 0;
    if (t_lo < T) full_at(t_lo, tm, pair, tile);
  }

  // this CTA's share (every lane of the calling warp gets it); `first`: load_lens(p, 0, lane)
  __device__ static Share share(const typename C::Params& p, int lane) { return share(p, lane, load_lens(p, 0, lane)); }
  __device__ static Share share(const typename C::Params& p, int lane, const Lens& first) {
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
    const long long G = gridDim.x, c = blockIdx.x, kt = ceil_div(T, G), kf = F == 0 ? 0 : ceil_div(F, G);
    const long long t_lo = c * kt < T ? c * kt : T, t_hi = (c + 1) * kt < T ? (c + 1) * kt : T;
    const long long f_lo = c * kf < F ? c * kf : F, f_hi = (c + 1) * kf < F ? (c + 1) * kf : F;
    Share s;
    s.count = static_cast<int>(t_hi - t_lo);
    s.fill_count = f_hi - f_lo;
    s.pair = s.fill_pair = np;
    s.tile = s.fill_tile = 0;
    if (F == 0) {  // every pair has tm tiles (equal lengths): the share is guess's, no scan
      if (s.count > 0) full_at(t_lo, tm, s.pair, s.tile);
      s.fill_count = 0;
      if (s.pair == np) s.count = 0;
      return s;
    }
    long long tb = 0;  // tiles before this chunk of pairs
    for (int base = 0; base < np && ((s.count && s.pair == np) || (s.fill_count && s.fill_pair == np));
         base += 32) {  // pass 2: where the shares start
      const int pair = base + lane;
      const unsigned nt = pair < np ? static_cast<unsigned>(pair_of(p, pair).ntiles) : 0u;
      const unsigned nf = pair < np ? static_cast<unsigned>(tm) - nt : 0u;
      const long long it = tb + scan32(nt, lane), t_ex = it - nt;  // tiles through / before this pair
      const long long f_in = static_cast<long long>(pair + 1) * tm - it, f_ex = f_in - nf;  // fill tiles likewise
      const unsigned at = warp_or((nt && t_ex <= t_lo && t_lo < it ? (lane + 1u) << 8 : 0u) |
                                  (nf && f_ex <= f_lo && f_lo < f_in ? lane + 1u : 0u));
      const int at_t = static_cast<int>(at >> 8), at_f = static_cast<int>(at & 0xffu);
      if (s.pair == np && at_t) {
        s.pair = base + at_t - 1;
        s.tile = static_cast<int>(t_lo - shfl64(t_ex, at_t - 1));
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
  // tiles skipped). Past the last pair, `pair` is pairs(p) and nothing more is read.
  struct Cursor {
    int pair, tile, np;
    Pair at;
    __device__ __forceinline__ Cursor(const typename C::Params& p, const Share& s)
        : pair(s.pair), tile(s.tile), np(pairs(p)) {
      at.ntiles = 0;
      if (pair < np) at = pair_of(p, pair);
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
      return p.logits + (static_cast<long long>(at.b) * p.next_n + at.t0 + t) * p.max_seq_len;
    }
    // keys [0, visible(t)) are the pair's token t's
    __device__ __forceinline__ int visible(const typename C::Params& p, int t) const {
      return at.seq_len - p.next_n + 1 + at.t0 + t;
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
        float* row = p.logits + (static_cast<long long>(q.b) * p.next_n + q.t0 + t) * p.max_seq_len;
        for (int i = c0 + tid; i < c1; i += threads) row[i] = -__int_as_float(0x7f800000);
      }
      left -= n;
    }
  }
};

// The 1024-B aligned base of the carve-up inside the launch's dynamic shared memory, which the host
// sized as reader::wg_smem<C>(ntok): a launch sized for another path would not fit, and stops here.
template <class C>
__device__ __forceinline__ unsigned char* aligned_smem(unsigned char* smem, int ntok) {
  constexpr uint32_t kAlign = static_cast<uint32_t>(C::kReaderWgAlign);
  const uint32_t pad = (kAlign - smem_addr(smem) % kAlign) % kAlign;
  if (static_cast<long long>(dynamic_smem_size()) < reader::wg_smem<C>(ntok) - kAlign + pad) __trap();
  return smem + pad;
}

// q of the CTA's ntok tokens (rows of kQRowBytes per head in global memory) into shared memory as the
// swizzled B operand, chunk by chunk (kQChunkBytes = H x 128 B each), in the caller's open copy group.
template <int H, int kChunks, int kThreads, long long kQRowBytes>
__device__ __forceinline__ void stage_q(const uint8_t* q, unsigned char* sq, long long q_token0, int ntok, int tid) {
  constexpr int kColumns = 128 / 16, kQChunkBytes = H * 128;
  for (int i = tid; i < ntok * kChunks * H * kColumns; i += kThreads) {
    const int col = i % kColumns, h = i / kColumns % H, kc = i / (kColumns * H) % kChunks;
    const int t = i / (kColumns * H * kChunks);
    const uint8_t* src = q + ((q_token0 + t) * H + h) * kQRowBytes + kc * 128 + col * 16;
    cp16(smem_addr(sq + (t * kChunks + kc) * kQChunkBytes) + swizzled128(h, col), src, 16u);
  }
}

// The same by plain loads and shared stores (no copy group: for a CTA whose copy groups count its key
// stages), four in flight per thread.
template <int H, int kChunks, int kThreads, long long kQRowBytes>
__device__ __forceinline__ void load_q(const uint8_t* q, unsigned char* sq, long long q_token0, int ntok, int tid) {
  constexpr int kColumns = 128 / 16, kQChunkBytes = H * 128, kBatch = 4;
  const int n = ntok * kChunks * H * kColumns;
  for (int i0 = tid; i0 < n; i0 += kBatch * kThreads) {
    uint4 v[kBatch];
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const int i = i0 + u * kThreads;
      const int col = i % kColumns, h = i / kColumns % H, kc = i / (kColumns * H) % kChunks;
      const int t = i / (kColumns * H * kChunks);
      if (i < n)
        v[u] = __ldg(reinterpret_cast<const uint4*>(q + ((q_token0 + t) * H + h) * kQRowBytes + kc * 128 + col * 16));
    }
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const int i = i0 + u * kThreads;
      const int col = i % kColumns, h = i / kColumns % H, kc = i / (kColumns * H) % kChunks;
      const int t = i / (kColumns * H * kChunks);
      if (i < n) *reinterpret_cast<uint4*>(sq + (t * kChunks + kc) * kQChunkBytes + swizzled128(h, col)) = v[u];
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
    constexpr int kTile = static_cast<int>(C::kReaderWgTileKeys), kPageShift = static_cast<int>(C::kPageShift);
    whole = -1;
    pair = live ? cur.pair : -1;
    k0 = cur.k0();
#pragma unroll
    for (int j = 0; j < kRowsPerThread; ++j) rows[j] = -1;
    if (!live) return;
    const int* table = p.block_table + static_cast<long long>(cur.at.b) * p.max_pages;
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

// the accumulators are read only after the wait: no instruction may move above it
__device__ __forceinline__ void keep(float (&d)[32]) {
#if !defined(KGEN_CPU_SHIM)
#pragma unroll
  for (int i = 0; i < 32; ++i) asm volatile("" : "+f"(d[i])::"memory");
#endif
}

// acc (+)= a 64-key tile's A operand times q's B operand, over `Chunks` 128-B chunks of their rows (the A
// chunks `a_step`, q's `b_step` descriptor units apart from `a_lo`, `b_lo`), four wgmma k-steps of 32 B each
// (k32 e4m3 for `Fp8`, else k16 bf16); `add` false: the first k-step overwrites acc. Waits for the group.
template <bool Fp8, int Chunks>
__device__ __forceinline__ void tile_mma(float (&acc)[32], uint32_t a_lo, uint32_t a_step, uint32_t b_lo,
                                         uint32_t b_step, bool add) {
  constexpr int kSteps = static_cast<int>(reader::kWgChunkBytes) / 32;
  mma_fence();
#pragma unroll
  for (int kc = 0; kc < Chunks; ++kc) {
#pragma unroll
    for (int k = 0; k < kSteps; ++k) {
      const unsigned long long da = desc_sw128_of(a_lo + kc * a_step + 2 * k);
      const unsigned long long db = desc_sw128_of(b_lo + kc * b_step + 2 * k);
      const uint32_t accumulate = add || kc > 0 || k > 0 ? 1u : 0u;
      if constexpr (Fp8) {
        mma_e4m3(acc, da, db, accumulate);
      } else {
        mma_bf16(acc, da, db, accumulate);
      }
    }
  }
  mma_commit();
  mma_wait();
  keep(acc);
}

}  // namespace wg

template <class C>
struct WgLogits {
  static constexpr int H = static_cast<int>(C::kReaderHeads);
  static constexpr int kTile = static_cast<int>(C::kReaderWgTileKeys);
  static constexpr int kChunkBytes = static_cast<int>(C::kReaderWgChunkBytes);
  static constexpr int kChunks = static_cast<int>(C::kReaderWgChunks);
  static constexpr int kStages = static_cast<int>(C::kReaderWgStages);
  static constexpr int kTokens = static_cast<int>(C::kReaderWgTokensPerCta);
  static constexpr int kAlign = static_cast<int>(C::kReaderWgAlign);
  static constexpr int kThreads = static_cast<int>(C::kReaderWarps) * 32;
  static constexpr bool kFp8 = C::kStoreDtype == Dtype::fp8_e4m3;
  static constexpr bool kScaled = C::kScaleKind != ScaleKind::none;
  static constexpr int kStageBytes = kTile * kChunkBytes;  // one chunk of the tile's rows
  static constexpr int kQChunkBytes = H * kChunkBytes;     // one chunk of a token's q rows
  static constexpr int kColumns = kChunkBytes / 16;        // 16-B columns of a chunk row
  static constexpr int kLoadRows = kThreads / kColumns;    // rows one pass of the CTA's threads stages
  static constexpr int kRowsPerThread = kTile / kLoadRows;
  static constexpr long long kRowBytes = C::kRowBytes;
  static constexpr long long kPageBytes = C::kPageBytes;
  static constexpr int kPageShift = static_cast<int>(C::kPageShift);
  static constexpr int kL2Prefetch = static_cast<int>(C::kReaderWgL2Prefetch);
  // Loads per pipeline step (each step pays one pair of barriers, one commit and one wait, and its
  // loads' tiles share them): two 64-key tiles when a tile is one load (128-B rows) and the ring holds
  // two steps or more; a whole tile when it is several loads and the ring holds two tiles; else one load.
  static constexpr int kStepLoads = kChunks == 1 ? (kStages % 2 == 0 && kStages >= 4 ? 2 : 1)
                                                 : (kStages % kChunks == 0 && kStages >= 2 * kChunks ? kChunks : 1);
  static constexpr int kStepTiles = kChunks == 1 ? kStepLoads : 1;  // tiles whose pages are looked up ahead
  static constexpr int kRingSteps = kStages / kStepLoads;

  static_assert(kThreads == 128, "[wgmma] one warpgroup per CTA");
  static_assert(H == 64 && kTile == 64, "[wgmma] m64n64: 64 keys x 64 heads per instruction");
  static_assert(kChunkBytes == 128 && kRowBytes == kChunks * kChunkBytes, "[wgmma] rows of whole 128-B swizzle atoms");
  static_assert(reader::q_bytes(C::kStoreDtype) * C::kHeadDim == kRowBytes, "q rows are key rows' width");
  static_assert(kStageBytes % kAlign == 0 && kQChunkBytes % kAlign == 0, "[wgmma] operand bases 1024-B aligned");
  static_assert(kChunks == 1 || kTokens == 1, "several chunks per row: one token's accumulators per CTA");
  static_assert(kStages >= 2 && kTile % kLoadRows == 0, "staging shape");
  static_assert(kStages % kStepLoads == 0 && kRingSteps >= 2 && (kStepLoads % kChunks == 0 || kStepLoads == 1),
                "a step's loads are whole tiles (or one load) and the ring holds two steps or more");
  static_assert(reader::wg_smem<C>(kTokens) <= reader::kMaxSmemBytes, "[wgmma] shared memory within 227 KB");

  // byte offset of 16-B column c of row r in a 128-B swizzled chunk (8 rows x 128 B repeat)
  __device__ static __forceinline__ uint32_t swizzled(int r, int c) { return wg::swizzled128(r, c); }

  struct Smem {
    unsigned char* keys;  // kStages x kStageBytes
    unsigned char* q;     // ntok x kChunks x kQChunkBytes
    float* row_info;      // kStages x kTile: scale (or 1), NaN for a row whose page is bad
    float* w;             // ntok x H
  };

  using Pages = wg::TilePages<C, kLoadRows, kRowsPerThread>;
  static constexpr bool kWholePages = C::kPageSize % kTile == 0;

  using Work = wg::Work<C, kTokens, kTile>;

  // Stages chunk kc of the tile `pg` looked up (load u of the CTA) into stage u % kStages: the thread's
  // 16-B column of its rows, and with the last chunk each row's info word.
  __device__ static __forceinline__ void issue(const typename C::Params& p, const Smem& sm, int u, const Pages& pg,
                                               int tid) {
    const int kc = u % kChunks, s = u % kStages;
    const int k0 = pg.k0;
    const int col = tid % kColumns, r0 = tid / kColumns;
    // row r0 + j * kLoadRows lands at dst + j * kDstRowStep (the swizzle repeats every 8 rows)
    const uint32_t dst = wg::smem_addr(sm.keys + s * kStageBytes) + swizzled(r0, col);
    constexpr uint32_t kDstRowStep = kLoadRows * kChunkBytes;
    static_assert(kLoadRows % 8 == 0, "a thread's rows share their swizzle phase");
    const int slot0 = k0 & static_cast<int>(C::kPageSize - 1);
    float* info = sm.row_info + s * kTile;
    if (kWholePages && pg.whole >= 0) {
      const uint8_t* page = p.cache + static_cast<long long>(pg.whole) * kPageBytes;
      const uint8_t* src = page + (slot0 + r0) * kRowBytes + kc * kChunkBytes + col * 16;
#pragma unroll
      for (int j = 0; j < kRowsPerThread; ++j) {
        wg::cp16<kL2Prefetch>(dst + j * kDstRowStep, src + j * kLoadRows * kRowBytes, 16u);
      }
      if (kc == kChunks - 1) {
        if constexpr (kScaled && C::kScaleStride == 4 && C::kScaleRegionOffset % 16 == 0) {
          // the tile's 64 scales are 256 consecutive bytes (slot0 is a multiple of 64): 16 copies of 16 B
          if (tid < kTile / 4) {
            wg::cp16(wg::smem_addr(info + 4 * tid), page + C::kScaleRegionOffset + (slot0 + 4 * tid) * 4, 16u);
          }
        } else if constexpr (kScaled) {
          if (tid < kTile)
            wg::cp4(wg::smem_addr(info + tid), page + C::kScaleRegionOffset + (slot0 + tid) * C::kScaleStride);
        } else {
          if (tid < kTile) info[tid] = 1.0f;
        }
      }
      return;
    }
#pragma unroll
    for (int j = 0; j < kRowsPerThread; ++j) {
      const int r = r0 + j * kLoadRows;
      const int slot = (k0 + r) & static_cast<int>(C::kPageSize - 1);
      const uint8_t* page = pg.rows[j] >= 0 ? p.cache + static_cast<long long>(pg.rows[j]) * kPageBytes : nullptr;
      const uint8_t* src = page ? page + slot * kRowBytes + kc * kChunkBytes + col * 16 : p.cache;
      wg::cp16(dst + j * kDstRowStep, src, page ? 16u : 0u);
      if (kc == kChunks - 1 && col == 0) {
        if (kScaled && page != nullptr) {
          wg::cp4(wg::smem_addr(info + r), page + C::kScaleRegionOffset + slot * C::kScaleStride);
        } else {
          info[r] = pg.rows[j] == -2 ? __int_as_float(0x7fc00000) : 1.0f;
        }
      }
    }
  }

  __device__ static void run(const typename C::Params& p) {
    KGEN_DYNAMIC_SMEM(smem);
    const int tid = static_cast<int>(threadIdx.x), lane = tid % 32, warp = tid / 32;
    const int gid = lane / 4, tig = lane % 4;
    const int ntok_max = min(kTokens, p.next_n);  // the launch's shared memory holds this many tokens' q

    Smem sm;
    sm.keys = wg::aligned_smem<C>(smem, ntok_max);
    sm.q = sm.keys + kStages * kStageBytes;
    sm.row_info = reinterpret_cast<float*>(sm.q + ntok_max * kChunks * kQChunkBytes);
    sm.w = sm.row_info + kStages * kTile;

    reader::wait_for_predecessor<C>();                        // before the first read of an input
    const typename Work::Share share = Work::share(p, lane);  // this CTA's tiles (every warp alike)
    const int nloads = share.count * kChunks;
    const int r0 = tid / kColumns;

    // pages[i]: tile i of the next step to issue (the table is read one step ahead of the copies), looked
    // up in order by `ahead`
    typename Work::Cursor ahead(p, share);
    int looked = 0;
    Pages pages[kStepTiles];
    const auto look = [&](Pages& pg) {
      pg.lookup(p, ahead, looked < share.count, r0);
      if (looked++ < share.count) ahead.advance(p);
    };
#pragma unroll
    for (int i = 0; i < kStepTiles; ++i) look(pages[i]);
    // step v's loads are v * kStepLoads ..; steps 0 .. kRingSteps - 2 now; step v + kRingSteps - 1 is
    // issued in iteration v, before its wait, into the stages step v - 1 used: kRingSteps steps in
    // flight while the CTA waits for the oldest
    const int nsteps = (nloads + kStepLoads - 1) / kStepLoads;
    const auto issue_step = [&](int step) {
#pragma unroll
      for (int g = 0; g < kStepLoads; ++g) {
        const int u = step * kStepLoads + g;
        if (u < nloads) {
          issue(p, sm, u, pages[g / kChunks], tid);
          if (u % kChunks == kChunks - 1) look(pages[g / kChunks]);
        }
      }
    };
#pragma unroll
    for (int v = 0; v < kRingSteps - 1; ++v) {
      if (v < nsteps) issue_step(v);
      wg::commit();
    }

    // the tiles scored, in order; q and the weights are those of `qpair` (staged when the pair changes)
    typename Work::Cursor at(p, share);
    int qpair = -1;
    const uint32_t keys_lo = wg::desc_sw128_lo(wg::smem_addr(sm.keys)), q_lo = wg::desc_sw128_lo(wg::smem_addr(sm.q));
    float acc[32];
#pragma unroll 1
    for (int v = 0; v < nsteps; ++v) {
      const int next = v + kRingSteps - 1;
      if (next < nsteps) {
        if (v > 0) __syncthreads();  // every thread is done with step v - 1's stages (and their row info)
        issue_step(next);
      }
      wg::commit();
      wg::wait<kRingSteps - 1>();  // step v has landed (this thread's part) ...
      wg::fence_async_proxy();
      __syncthreads();  // ... everyone's
#pragma unroll
      for (int g = 0; g < kStepLoads; ++g) {
        const int u = v * kStepLoads + g;
        if (kStepLoads > 1 && u >= nloads) break;
        const int kc = u % kChunks, s = u % kStages;
        if (kc == 0 && at.pair != qpair) {  // a new pair's first tile: its q and weights
          if (qpair >= 0) __syncthreads();  // every warp's wgmma is done with the last pair's q
          const long long q_token0 = static_cast<long long>(at.at.b) * p.next_n + at.at.t0;
          wg::load_q<H, kChunks, kThreads, kRowBytes>(p.q, sm.q, q_token0, at.at.ntok, tid);
          for (int i = tid; i < at.at.ntok * H; i += kThreads) sm.w[i] = __ldg(p.weights + q_token0 * H + i);
          wg::fence_async_proxy();  // q, written by st.shared, is read by wgmma
          __syncthreads();
          qpair = at.pair;
        }
        const int k0 = at.k0();
        const uint32_t a_lo = keys_lo + s * (kStageBytes / 16);
#pragma unroll 1
        for (int t = 0; t < at.at.ntok; ++t) {
          const int visible_t = at.visible(p, t);  // keys [0, visible_t) are token t's
          const bool any = k0 < visible_t;         // a tile none of whose keys the token sees costs no mma
          if (any) {                               // this load's chunk kc (the tile's first: acc overwritten)
            wg::tile_mma<kFp8, 1>(acc, a_lo, 0, q_lo + (t * kChunks + kc) * (kQChunkBytes / 16), 0, kc > 0);
          }
          if (kc == kChunks - 1) {
            wg::finish(acc, any, sm.w + t * H, sm.row_info + s * kTile, at.row(p, t), k0, p.max_seq_len, visible_t,
                       warp, gid, tig);
          }
        }
        if (kc == kChunks - 1) at.advance(p);
      }
    }
    Work::fill(p, share, tid, kThreads);
  }
};

#if !defined(KGEN_CPU_SHIM)
// The TMA variant of the sm_90a path (kReaderWgTma, kgen/layout.py's reader_wg_tma): bf16 and fp8 keys whose
// 64-key tiles lie in one page. Warps [0, 4 x kConsumers) are kConsumers warpgroups that score tiles, the
// last warp the producer that stages them:
// - the producer walks the CTA's tiles in order into a ring of kStages stages. For a tile some token here
//   sees, whose page is inside the table and the cache, one lane copies each 128-B chunk of its 64 rows as
//   one box of the cache's tensor map (p.cache_map: the copy writes the 128-B swizzle wgmma reads) and fp8's
//   64 scales as one 256-B bulk copy, all completing on the stage's `full` barrier; otherwise the warp
//   writes the rows' factors (bf16: 1; NaN for a visible tile whose page is bad) and arrives. The table is
//   read 32 columns at a time, one entry per lane, ahead of the copies that need it.
// - warpgroup g scores tiles g, g + kConsumers, ...: it waits for the stage's `full` phase, multiplies
//   (the same wgmma and epilogue as WgLogits), and its four warps arrive on the stage's `empty` barrier, which
//   the producer waits for before it refills the stage.
// q and the weights are staged once per CTA by the consumers (cp.async, as WgLogits).
template <class C>
struct WgTmaLogits {
  static constexpr int H = static_cast<int>(C::kReaderHeads);
  static constexpr int kTile = static_cast<int>(C::kReaderWgTileKeys);
  static constexpr int kChunkBytes = static_cast<int>(C::kReaderWgChunkBytes);
  static constexpr int kChunks = static_cast<int>(C::kReaderWgChunks);
  static constexpr int kStages = static_cast<int>(C::kReaderWgStages);
  static constexpr int kTokens = static_cast<int>(C::kReaderWgTokensPerCta);
  static constexpr int kConsumers = static_cast<int>(C::kReaderWgConsumers);
  static constexpr int kConsumerThreads = kConsumers * 128;
  static constexpr int kThreads = static_cast<int>(reader::wg_threads<C>());
  static constexpr bool kFp8 = C::kStoreDtype == Dtype::fp8_e4m3;
  static constexpr bool kScaled = C::kScaleKind != ScaleKind::none;
  static constexpr int kBoxBytes = kTile * kChunkBytes;    // one box: a 128-B chunk of the tile's 64 rows
  static constexpr int kStageBytes = kChunks * kBoxBytes;  // a tile's rows
  static constexpr int kQChunkBytes = H * kChunkBytes;     // one chunk of a token's q rows
  static constexpr int kScaleTileBytes = kTile * 4;        // fp8: the tile's scales
  static constexpr uint32_t kTxBytes = kStageBytes + (kScaled ? kScaleTileBytes : 0);
  static constexpr int kPageShift = static_cast<int>(C::kPageShift);

  static_assert(reader::wg_readable<C>() && reader::wg_tma_readable<C>() && C::kReaderWgTma == 1,
                "[wgmma-tma] a layout the variant reads");
  static_assert(kThreads == kConsumerThreads + reader::kWgTmaProducerThreads, "[wgmma-tma] warpgroups + a warp");
  static_assert(H == 64 && kTile == 64, "[wgmma] m64n64: 64 keys x 64 heads per instruction");
  static_assert(kChunkBytes == 128 && C::kRowBytes == kChunks * kChunkBytes, "[wgmma] rows of whole 128-B atoms");
  static_assert(reader::q_bytes(C::kStoreDtype) * C::kHeadDim == C::kRowBytes, "q rows are key rows' width");
  static_assert(kBoxBytes % C::kReaderWgAlign == 0 && kQChunkBytes % C::kReaderWgAlign == 0,
                "[wgmma] operand bases 1024-B aligned");
  static_assert(C::kPageSize % kTile == 0, "[wgmma-tma] a tile lies in one page");
  static_assert(!kScaled || (C::kScaleStride == 4 && C::kScaleRegionOffset % 16 == 0),
                "[wgmma-tma] a tile's scales are one 16-B aligned 256-B copy");
  static_assert(kStages % kConsumers == 0 && kStages >= 2 && kStages <= 32,
                "[wgmma-tma] whole rounds: a warpgroup reads a stage's previous tile before it waits for the next (a "
                "barrier is never two phases behind); a bit per stage in the producer's mask");
  static_assert(reader::wg_smem<C>(kTokens) <= reader::kMaxSmemBytes, "[wgmma] shared memory within 227 KB");

  struct Smem {           // the carve-up (reader::wg_smem): the stages' rows and q first (1024-B aligned)
    unsigned char* keys;  // kStages x kStageBytes
    unsigned char* q;     // ntok x kChunks x kQChunkBytes
    float* row_info;      // kStages x kTile: scale (or 1), NaN for the rows of a bad page
    float* w;             // ntok x H
    uint32_t bars;        // kStages x (full, empty): shared address
    __device__ uint32_t full(int s) const { return bars + 16u * s; }
    __device__ uint32_t empty(int s) const { return bars + 16u * s + 8u; }
  };

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
    const int* table =
        p.block_table + static_cast<long long>(row_pair < 0 ? 0 : row_pair / Work::groups(p)) * p.max_pages;
#pragma unroll 1
    for (int i = 0; i < share.count; ++i, at.advance(p)) {
      const int s = i % kStages;
      const int k0 = at.k0();
      const int col = k0 >> kPageShift;
      if (at.pair != row_pair || col < window || col >= window + 32) {
        if (at.pair != row_pair) table = p.block_table + static_cast<long long>(at.at.b) * p.max_pages;
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
          const int slot0 = k0 & static_cast<int>(C::kPageSize - 1);
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
            const uint8_t* scales = p.cache + static_cast<long long>(page) * C::kPageBytes + C::kScaleRegionOffset +
                                    static_cast<long long>(slot0) * C::kScaleStride;
            wg::bulk_load<kHint>(wg::smem_addr(info), scales, kScaleTileBytes, sm.full(s), policy);
          }
        } else {
          wg::bar_arrive(sm.full(s));
        }
      }
    }
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
    if (tid == kConsumerThreads) {
      for (int s = 0; s < kStages; ++s) {
        wg::bar_init(sm.full(s), 1);   // the producer's lane 0 (its copies add their bytes)
        wg::bar_init(sm.empty(s), 4);  // the consuming warpgroup's four warps
      }
      wg::bar_init_fence();
      wg::prefetch_map(&p.cache_map);  // a parameter, not an input: before the predecessor completes
    }
    __syncthreads();

    reader::wait_for_predecessor<C>();                             // before the first read of an input
    const typename Work::Lens lens = Work::load_lens(p, 0, lane);  // first: its trip overlaps what follows
    // the share of equal lengths, while seq_lens is on its way: the producer loads its first table entries,
    // the consumers its q (used where it is the share)
    int guess_pair, guess_tile;
    Work::guess(p, guess_pair, guess_tile);
    const bool guessed = guess_pair < Work::pairs(p);
    if (warp >= kConsumers * 4) {
      const int col = (guess_tile * kTile) >> kPageShift;
      const int entry =
          guessed
              ? table_entry(p, p.block_table + static_cast<long long>(Work::tokens_of(p, guess_pair).b) * p.max_pages,
                            col, lane)
              : -1;
      const typename Work::Share share = Work::share(p, lane, lens);  // this CTA's tiles (every warp alike)
      produce(p, sm, share, lane, guessed ? guess_pair : -1, col, entry);
      Work::fill(p, share, lane, 32);  // the columns past the pairs' tiles, while the consumers score
      return;
    }
    int qpair = -1;                          // the pair whose q and weights are staged (or on their way: q_pending)
    bool q_pending = false;                  // its copy group not yet waited for
    const auto stage_pair = [&](int pair) {  // q and the weights by cp.async: no thread waits for them here
      const typename Work::Pair q = Work::tokens_of(p, pair);
      const long long q_token0 = static_cast<long long>(q.b) * p.next_n + q.t0;
      wg::stage_q<H, kChunks, kConsumerThreads, C::kRowBytes>(p.q, sm.q, q_token0, q.ntok, tid);
      for (int j = tid; j < q.ntok * H; j += kConsumerThreads)
        wg::cp4(wg::smem_addr(sm.w + j), p.weights + q_token0 * H + j);
      wg::commit();
      qpair = pair;
      q_pending = true;
    };
    if (guessed) stage_pair(guess_pair);
    const typename Work::Share share = Work::share(p, lane, lens);  // this CTA's tiles (every warp alike)

    const int group = warp / 4, gwarp = warp % 4;
    const uint32_t keys_lo = wg::desc_sw128_lo(wg::smem_addr(sm.keys)), q_lo = wg::desc_sw128_lo(wg::smem_addr(sm.q));
    const int row = wg::finish_row(gwarp, gid, tig);
    float acc[32];
    // Every warpgroup walks every tile of the share (warpgroup g scores tiles g, g + kConsumers, ...) and
    // takes part in each change of pair alike: all consumers are done with the last pair's q (their tiles
    // before the change), then restage the pair's q and weights together.
    typename Work::Cursor at(p, share);
    bool q_used = false;  // some tile was scored with the staged q
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
      if (i % kConsumers != group) continue;
      const int s = i % kStages;
      const int k0 = at.k0();
      wg::bar_wait(sm.full(s), static_cast<uint32_t>(i / kStages) & 1u);
      const uint32_t a_lo = keys_lo + s * (kStageBytes / 16);
      const float factor = tig < 2 ? sm.row_info[s * kTile + row] : 0.0f;  // the row's scale, 1, or NaN
      const int ntok = at.at.ntok;
#pragma unroll 1
      for (int t = 0; t < ntok; ++t) {
        const int visible_t = at.visible(p, t);  // keys [0, visible_t) are token t's
        const bool any = k0 < visible_t;         // a tile none of whose keys the token sees costs no mma
        if (any) {
          wg::tile_mma<kFp8, kChunks>(acc, a_lo, kBoxBytes / 16, q_lo + t * kChunks * (kQChunkBytes / 16),
                                      kQChunkBytes / 16, false);
        }
        if (t == ntok - 1) {  // the stage's last read (its rows' factors are in registers): back to the producer
          __syncwarp();
          if (lane == 0) wg::bar_arrive(sm.empty(s));
        }
        wg::finish_with(acc, any, sm.w + t * H, factor, at.row(p, t), k0, p.max_seq_len, visible_t, gwarp, gid, tig);
      }
    }
  }
};
#endif  // !KGEN_CPU_SHIM

// fp4 keys on the sm_90a path: the rows are staged as stored (packed e2m1 and their ue8m0 scale bytes, a
// ring of kReaderWgStages tiles by cp.async), each tile converted by the CTA into one bf16 A operand in
// the 128-B swizzled layout the bf16 keys are staged in (e2m1x8_bf16: exact), then the same m64n64k16 bf16
// wgmma against q (bf16, the B operand) and the same epilogue (wg::finish). One pipeline step is one
// tile: its copies land (barrier), it is converted (barrier), multiplied.
template <class C>
struct WgFp4Logits {
  static constexpr int H = static_cast<int>(C::kReaderHeads);
  static constexpr int kTile = static_cast<int>(C::kReaderWgTileKeys);
  static constexpr int kChunkBytes = static_cast<int>(C::kReaderWgChunkBytes);
  static constexpr int kChunks = static_cast<int>(C::kReaderWgChunks);  // 128-B chunks of a bf16 operand row
  static constexpr int kStages = static_cast<int>(C::kReaderWgStages);
  static constexpr int kTokens = static_cast<int>(C::kReaderWgTokensPerCta);
  static constexpr int kAlign = static_cast<int>(C::kReaderWgAlign);
  static constexpr int kThreads = static_cast<int>(C::kReaderWarps) * 32;
  static constexpr int kRowBytes = static_cast<int>(C::kRowBytes);      // packed e2m1 of one key
  static constexpr int kScaleBytes = static_cast<int>(C::kScaleBytes);  // its ue8m0 bytes, one per kBlock values
  static constexpr int kBlock = static_cast<int>(C::kBlock);
  static constexpr long long kPageBytes = C::kPageBytes;
  static constexpr int kL2Prefetch = static_cast<int>(C::kReaderWgL2Prefetch);
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
  static constexpr int kStageBytes = static_cast<int>(reader::wg_fp4_stage<C>());

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
  static_assert(reader::wg_smem<C>(kTokens) <= reader::kMaxSmemBytes, "[wgmma] shared memory within 227 KB");

  struct Smem {
    unsigned char* operand;  // kChunks x kOperandChunkBytes: the converted tile
    unsigned char* q;        // ntok x kChunks x kQChunkBytes
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
    const int slot0 = k0 & static_cast<int>(C::kPageSize - 1);
    float* info = sm.row_info + s * kTile;
    if (kWholePages && pg.whole >= 0) {
      const uint8_t* page = p.cache + static_cast<long long>(pg.whole) * kPageBytes;
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
      const int slot = (k0 + r) & static_cast<int>(C::kPageSize - 1);
      const uint8_t* page = pg.rows[j] >= 0 ? p.cache + static_cast<long long>(pg.rows[j]) * kPageBytes : nullptr;
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
        const long long q_token0 = static_cast<long long>(at.at.b) * p.next_n + at.at.t0;
        wg::load_q<H, kChunks, kThreads, kChunks * kChunkBytes>(p.q, sm.q, q_token0, at.at.ntok, tid);
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
        if (any) {                               // the converted tile (bf16) times q
          wg::tile_mma<false, kChunks>(acc, keys_lo, kOperandChunkBytes / 16, q_lo + t * kChunks * (kQChunkBytes / 16),
                                       kQChunkBytes / 16, false);
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

template <class C>
__global__ void __launch_bounds__(reader::threads<C>(), reader::min_blocks<C>())
    indexer_logits(const __grid_constant__ typename C::Params p) {
  // the writer's rule twins first (a spec no rule accepts has no layout to read), then the reader's
  static_assert(sizeof(rules::Twins<C>) > 0, "instantiates the rule twins");
  static_assert(sizeof(typename reader::TwinsIf<rules::Twins<C>::run, C>::type) > 0, "the reader's twins");
  if constexpr (reader::TwinsIf<rules::Twins<C>::run, C>::type::run) {
#if KGEN_READER_WGMMA
    if constexpr (C::kReaderWgmma != 0 && C::kStoreDtype == Dtype::fp4_e2m1) {
      detail::WgFp4Logits<C>::run(p);
#if !defined(KGEN_CPU_SHIM)
    } else if constexpr (C::kReaderWgmma != 0 && C::kReaderWgTma != 0) {
      detail::WgTmaLogits<C>::run(p);
#endif
    } else if constexpr (C::kReaderWgmma != 0) {
      static_assert(C::kReaderWgTma == 0,
                    "the CPU emulation of the sm_90a path runs the cp.async variant only "
                    "(render it with kReaderWgTma 0)");
      detail::WgLogits<C>::run(p);
    } else {
      detail::IndexerLogits<C>::run(p);
    }
#else
    detail::IndexerLogits<C>::run(p);
#endif
  }
}

}  // namespace kgen
