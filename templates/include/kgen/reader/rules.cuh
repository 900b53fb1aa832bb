// kgen::indexer_logits, the reader's rules: its own constants and the static_assert twins that re-derive,
// from the raw spec values of the rendered config, every byte fact and every rendered reader constant the
// kernel relies on (kgen/reader_layout.py's rules and constants), so the writer's layout, the host's
// launch and this kernel cannot disagree. Compile-time only: nothing here reaches the machine code but
// through the constants the kernel paths read.
#pragma once

#include "../checks.cuh"

namespace kgen {

namespace reader {

// The shapes the paths are written for, each compared with its rendered twin (C::kReader...). The
// capacities and limits the rules compare against (shared memory, registers, CTAs per SM, tokens per CTA,
// ...) are kgen/reader_layout.py's and arrive rendered (C::kReaderSmemBytes, C::kReaderMaxSmemBytes, ...):
// no number the Python owns is typed here (tests/test_header_numbers.py).
constexpr long long kChunkBytes = 16, kGroupBytes = 64;

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

// What the reader can score (kgen.reader_layout.reader_problems, twinned).
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

// The sm_90a (wgmma) path's facts (kgen/reader_layout.py's reader_wg_* functions), re-derived.
constexpr long long kWgTileKeys = 64, kWgChunkBytes = 128, kWgAlign = 1024, kWgRowInfoBytes = 4;
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
// the TMA variant's per-stage mbarriers (full, empty), its producer warp, and the share the producer publishes
// with its mbarrier (kgen/reader_layout.py READER_WG_TMA_*)
constexpr long long kWgTmaBarrierBytes = 16, kWgTmaProducerThreads = 32, kWgTmaShareBytes = 40;
// the register split's producer warpgroup (kReaderWgSplit, kgen/reader_layout.py READER_WG_SPLIT_PRODUCER_THREADS)
constexpr long long kWgSplitProducerThreads = 128;
template <class C>
KGEN_HD constexpr long long wg_smem(long long ntok) {
  const long long token = ntok * (wg_chunks<C>() * C::kReaderHeads * kWgChunkBytes + 4 * C::kReaderHeads);
  if (C::kStoreDtype == Dtype::fp4_e2m1) {
    return kWgAlign + C::kReaderWgStages * (wg_fp4_stage<C>() + kWgTileKeys * kWgRowInfoBytes) + token;
  }
  const long long stage = wg_chunks<C>() * kWgTileKeys * kWgChunkBytes + kWgTileKeys * kWgRowInfoBytes +
                          (C::kReaderWgTma ? kWgTmaBarrierBytes : 0);
  return kWgAlign + C::kReaderWgStages * stage + token + (C::kReaderWgTma ? kWgTmaShareBytes : 0);
}
template <class C>
KGEN_HD constexpr long long wg_tokens() {
  long long t = 0;
  for (long long n = 1; n <= C::kReaderWgMaxTokens; ++n) {
    if (wg_smem<C>(n) <= C::kReaderMaxSmemBytes) t = n;
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
// The TMA variant's own rules on top of wg_readable's (kgen.reader_layout.reader_wg_tma_layout): bf16 or fp8 rows
// as stored, a tile inside one page (one box), fp8 scales consecutive at a 16-B aligned offset (a tile's 64
// are one 256-B bulk copy).
template <class C>
KGEN_HD constexpr bool wg_tma_readable() {
  return (C::kStoreDtype == Dtype::bf16 || C::kStoreDtype == Dtype::fp8_e4m3) && C::kPageSize % kWgTileKeys == 0 &&
         (C::kScaleKind == ScaleKind::none || (C::kScaleStride == 4 && C::kScaleRegionOffset % 16 == 0));
}
template <class C>
KGEN_HD constexpr long long wg_threads() {
  return C::kReaderWgTma
             ? C::kReaderWgConsumers * 128 + (C::kReaderWgSplit ? kWgSplitProducerThreads : kWgTmaProducerThreads)
             : C::kReaderWarps * 32;
}
template <class C>
KGEN_HD constexpr long long wg_ctas_per_sm() {
  const long long n = C::kReaderSmSharedBytes / (wg_smem<C>(1) + C::kReaderCtaReservedBytes);
  // at the cubin's planned registers per thread (kgen.reader_layout.reader_wg_plan_registers)
  const long long regs = C::kReaderWgPlanRegisters;
  const long long most = C::kReaderWgTma ? C::kReaderSmRegisters / (wg_threads<C>() * regs)
                                         : min2(C::kReaderWgMaxCtas, C::kReaderSmRegisters / (wg_threads<C>() * regs));
  return n < 1 || most < 1 ? 1 : min2(n, most);
}
// the planned registers are at least the variant's floor
template <class C>
KGEN_HD constexpr bool wg_plan_registers_agree() {
  const bool pairs = C::kReaderWgPairs != 0;
  const long long floor = C::kReaderWgTma ? (pairs ? C::kReaderWgTmaPairRegisters : C::kReaderWgTmaRegisters)
                                          : (pairs ? C::kReaderWgPairRegisters : C::kReaderWgRegisters);
  return C::kReaderWgSplit ? C::kReaderWgPlanRegisters == C::kReaderWgSplitConsumerRegisters
                           : C::kReaderWgPlanRegisters >= floor;
}
// the register split's warpgroups trade within the registers the CTA was launched with (its threads at what
// ptxas compiles the kernel at for one CTA per SM: kReaderWgSplitLaunchRegisters), the consumers raised, the
// producer lowered (setmaxnreg takes multiples of 8 in [24, 256]; a raise the pool cannot give never returns)
template <class C>
KGEN_HD constexpr bool wg_split_fits() {
  const long long lo = C::kReaderWgSplitProducerRegisters, hi = C::kReaderWgSplitConsumerRegisters;
  const long long launch = C::kReaderWgSplitLaunchRegisters,
                  threads = C::kReaderWgConsumers * 128 + kWgSplitProducerThreads;
  return lo % 8 == 0 && hi % 8 == 0 && lo >= 24 && hi <= 256 && lo < hi && launch % 8 == 0 &&
         launch <= C::kReaderSmRegisters / threads &&
         C::kReaderWgConsumers * 128 * hi + kWgSplitProducerThreads * lo <= threads * launch;
}
// kReaderWgmma 0 on a layout the path reads: the mma.sync path on sm_90a too (the bench compares them)
template <class C>
KGEN_HD constexpr bool wg_constants_agree() {
  const bool wg = C::kReaderWgmma == 1;
  return (C::kReaderWgmma == 0 || (wg && wg_readable<C>())) && C::kReaderWgTileKeys == kWgTileKeys &&
         C::kReaderWgChunkBytes == kWgChunkBytes && C::kReaderWgAlign == kWgAlign && C::kReaderWgStages >= 2 &&
         C::kReaderWgChunks == (wg ? wg_chunks<C>() : 0) && C::kReaderWgTokensPerCta == (wg ? wg_tokens<C>() : 0) &&
         C::kReaderWgMinBlocks == (wg ? wg_ctas_per_sm<C>() : 0) && (!wg || wg_plan_registers_agree<C>()) &&
         (C::kReaderWgL2Prefetch == 0 || C::kReaderWgL2Prefetch == 128 || C::kReaderWgL2Prefetch == 256) &&
         (C::kReaderWgTma == 0 || (wg && wg_tma_readable<C>() && C::kReaderWgStages % C::kReaderWgConsumers == 0 &&
                                   C::kReaderWgStages <= 32)) &&
         C::kReaderWgConsumers >= 1 && C::kReaderWgConsumers <= C::kReaderWgTmaMaxConsumers &&
         (C::kReaderWgEvictFirst == 0 || C::kReaderWgEvictFirst == 1) &&
         (C::kReaderWgPairs == 0 ||
          (C::kReaderWgPairs == 1 && wg && wg_tokens<C>() >= 2 &&
           (C::kReaderWgSplit
                ? wg_split_fits<C>()
                : wg_threads<C>() * (C::kReaderWgTma ? C::kReaderWgTmaPairRegisters : C::kReaderWgPairRegisters) <=
                      C::kReaderSmRegisters))) &&
         (C::kReaderWgSplit == 0 || (C::kReaderWgSplit == 1 && C::kReaderWgTma == 1 && C::kReaderWgPairs == 1)) &&
         (C::kReaderWgKeyRegisters == 0 ||
          (C::kReaderWgKeyRegisters == 1 && C::kReaderWgPairs == 0 &&
           ((C::kReaderWgTma == 1 && C::kStoreDtype == Dtype::fp8_e4m3 && C::kReaderWgChunks == 1) ||
            (C::kReaderWgTma == 0 && C::kStoreDtype == Dtype::fp4_e2m1 && C::kHeadDim == 4 * C::kBlock)))) &&
         C::kReaderWgTmaBarrierBytes == kWgTmaBarrierBytes && C::kReaderWgTmaProducerThreads == kWgTmaProducerThreads &&
         C::kReaderWgTmaShareBytes == kWgTmaShareBytes;
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
         C::kReaderGroupsInFlight == min2(groups, C::kReaderMaxGroupsInFlight) && C::kReaderKeyVectorBytes == vec &&
         C::kReaderQTokenBytes == token_bytes && C::kReaderTokensPerCta == min2(8, C::kReaderSmemBytes / token_bytes) &&
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
                "multiple of 64 B and pages 4-B aligned (kgen.reader_layout.reader_problems)");
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

}  // namespace reader

}  // namespace kgen
