"""The read side's pure rules: which pages `kgen::indexer_logits` reads, and the byte math of its paths.

kgen::indexer_logits (templates/include/kgen/indexer_logits.cuh) scores q against the keys of a page in
place. Its config is the writer's config struct (kgen.layout's byte constants) plus the constants here;
the header re-derives each of them from the raw spec values in a static_assert. `reader_problems(spec)`
says why the kernel cannot read a spec's cache (empty: it can); the kernel's `[reader-support]`
static_assert is its twin. The launch shapes (grid, ring per shape) are kgen.reader_plan; the Torch path
(the reference) is kgen.score.

Nothing here asks a device: every function is a pure function of the spec, its layout, a target name
and a tuning.
"""

from __future__ import annotations

from dataclasses import dataclass

from .arch import DEFAULT_SHARED_BYTES, SM90, has_wgmma
from .layout import VALUE_BITS, WARP, Layout, compute
from .spec import Spec

READER_DTYPES = ("bf16", "fp8_e4m3", "fp4_e2m1")  # q: bf16, fp8 e4m3, bf16 (kgen.score takes these)

# kgen::indexer_logits (templates/include/kgen/indexer_logits.cuh) scores q against
# the keys of a page in place. Its config is the writer's config struct (the same byte constants)
# plus these; the header re-derives each of them from the raw spec values in a static_assert.
#
# Fragment mapping: a key row's quantized bytes are read as 16-B chunks in groups of 4 (64 B); the 4
# lanes of an mma quad (tig = lane % 4) own chunk tig of every group. One mma m16n8k16 k-step consumes
# 4 values of q per lane and the matching 4 key values of the lane's chunk (both widened to the 16-bit
# operand), so a chunk feeds kReaderStepsPerChunk steps. The dot product does not care which k a value sits at,
# only that q and key agree: q is staged in shared memory under the same mapping.

READER_HEADS = 64  # q heads (DeepSeek's indexer); the kernel keeps 64 x head_dim of q per token in smem
READER_WARPS = 4  # warps per CTA
READER_WARP_KEYS = 32  # keys a warp scores per tile (two m16 tiles)
READER_CHUNK_BYTES = 16  # one lane's key load per group
READER_GROUP_BYTES = 4 * READER_CHUNK_BYTES  # the 4 lanes of a quad
READER_SMEM_BYTES = DEFAULT_SHARED_BYTES  # static + dynamic shared memory without an opt-in (kgen.arch)
READER_MAX_GROUPS_IN_FLIGHT = 4  # 16 registers per group and lane; more would spill
READER_STEP_ELEMS = 4  # values per lane and row of one mma m16n8k16 step (8 B of a 16-bit operand)
READER_MMA_K = 16  # every key dtype is multiplied as a 16-bit operand: mma.sync m16n8k16, fp32 accumulate
READER_OPERAND_BYTES = 2
# dtype of q the caller passes, by key dtype
READER_Q_DTYPE = {"bf16": "bf16", "fp8_e4m3": "fp8_e4m3", "fp4_e2m1": "bf16"}


# Keys and q are widened to a 16-bit tensor-core operand, exactly: fp8 to f16 (every e4m3 value is an
# fp16), fp4 to bf16 (every e2m1 x ue8m0 value is a bf16). fp8 does not use mma.sync e4m3: sm_90 has no
# native one (its compiler widens every fragment per instruction); here each key fragment is widened
# once and used for all heads.
def reader_q_dtype(spec: Spec) -> str:
    """dtype of q the reader multiplies the keys with (fp4 keys are widened to bf16 in registers)."""
    return READER_Q_DTYPE[spec.store.dtype]


def reader_key_vector_bytes(lay: Layout) -> int:
    """Widest load (16, 8, 4 B) every key chunk and scale of every page is aligned to (0: none)."""
    for v in (16, 8, 4):
        if lay.page_bytes % v == 0 and lay.row_bytes % v == 0 and lay.quant_row_offset % v == 0:
            return v
    return 0


def reader_q_token_bytes(spec: Spec) -> int:
    """Shared memory for one query token: its q (READER_HEADS x head_dim, as the 16-bit operand) and its
    fp32 weights."""
    return READER_HEADS * spec.head_dim * READER_OPERAND_BYTES + 4 * READER_HEADS


def reader_tokens_per_cta(spec: Spec) -> int:
    """Query tokens (next_n) one CTA scores together: as many as fit the shared memory, at most 8."""
    return max(0, min(8, READER_SMEM_BYTES // reader_q_token_bytes(spec)))


# Free choices of the reader (no byte depends on them; the bench compares them), by key dtype: prefetch
# the next tile's rows while this one computes (off: a prefetched tile costs registers); __launch_bounds__
# minimum CTAs per SM (0: none); the heads in kReaderHeadPasses passes (fewer accumulator registers).
# kReaderWgStages: the cp.async variant's ring of staged chunks (an even ring: two 64-key fp8 tiles, one
# whole bf16 tile, per pipeline step; fp4's 3: the fewest that still give 4 CTAs per SM, and 2 measured as fast at
# 32 x 64K next_n 1 in bench/results/h100-2026-12-07-s34/);
# kReaderWgL2Prefetch: the L2 prefetch size of its key copies. kReaderWgTma: the TMA variant where it reads
# the layout (reader_wg_tma_layout), its ring of kReaderWgTmaStages tiles shared by kReaderWgConsumers
# warpgroups (one producer warp per CTA: more consumers starve it); kReaderWgKeyRegisters: its fp8 tiles into the
# wgmma's A registers once for every MTP token (reader_wg_key_registers; MTP launches pick it by shape,
# kgen.reader_plan.READER_WG_KEY_REGISTER_TOKENS), and fp4's held tile scored the same way (its MTP launches pick
# it, on a ring of 2: READER_WG_KEY_REGISTER_STAGES). Each value was picked on the H200 from
# the runs whose READMEs hold the figures: bench/results/h200-2026-11-30/reader/run2-f16-widened (prefetch),
# reader2 and reader3 (the cp.async ring and L2 prefetch), tma1 (the TMA variant and its rings); fp8's TMA ring of 4
# from bench/results/h200-2026-12-06-s27/ (call1: 0.94-1.01x the ring of 8's time, one process, every MTP shape).
READER_TUNING_DEFAULTS = {
    "bf16": {"kReaderPrefetch": 0, "kReaderMinBlocks": 0, "kReaderHeadPasses": 2, "kReaderWgmma": 1,
             "kReaderWgStages": 4, "kReaderWgL2Prefetch": 0,
             "kReaderWgTma": 1, "kReaderWgTmaStages": 4, "kReaderWgConsumers": 2, "kReaderWgEvictFirst": 0,
             "kReaderWgPairs": 0, "kReaderWgSplit": 0, "kReaderWgKeyRegisters": 0},
    "fp8_e4m3": {"kReaderPrefetch": 0, "kReaderMinBlocks": 0, "kReaderHeadPasses": 2, "kReaderWgmma": 1,
                 "kReaderWgStages": 4, "kReaderWgL2Prefetch": 0,
                 "kReaderWgTma": 1, "kReaderWgTmaStages": 4, "kReaderWgConsumers": 2, "kReaderWgEvictFirst": 0,
                 "kReaderWgPairs": 0, "kReaderWgSplit": 0, "kReaderWgKeyRegisters": 0},
    "fp4_e2m1": {"kReaderPrefetch": 0, "kReaderMinBlocks": 0, "kReaderHeadPasses": 2, "kReaderWgmma": 1,
                 "kReaderWgStages": 3, "kReaderWgL2Prefetch": 0,
                 "kReaderWgTma": 0, "kReaderWgTmaStages": 4, "kReaderWgConsumers": 2, "kReaderWgEvictFirst": 0,
                 "kReaderWgPairs": 0, "kReaderWgSplit": 0, "kReaderWgKeyRegisters": 0},
}

# The sm_90a path (wgmma, kgen.arch.has_wgmma): a tile of READER_WG_TILE_KEYS consecutive keys is the
# A operand (M = 64 keys, K-major), q of one token the B operand (N = 64 heads, K-major), both in shared
# memory in the 128-B swizzled layout wgmma reads (8 rows x 128 B repeat: every operand base 1024-B
# aligned). A key row's quantized bytes are staged in chunks of READER_WG_CHUNK_BYTES (one swizzle
# atom's width: 4 k-steps of 32 B, k32 for fp8, k16 for bf16) by cp.async, each stage one chunk of the
# tile's 64 rows plus a 4-B word per row (the fp32 scale, or 1; NaN for a row whose page is outside
# the table or cache), kReaderWgStages stages in a ring (a tuning: all of them in flight while the
# CTA waits for the oldest). Shared memory of a CTA scoring `ntok` tokens: the alignment pad, the
# stages, and per token its q (chunks x 8 KB) and fp32 weights; above 48 KB the launch opts in.
# fp4 keys (e2m1, a ue8m0 scale per READER_WG_FP4_BLOCK values): each stage holds a tile's packed rows and
# their scale bytes as stored (plus the row word); each thread widens its quarter of two rows into the
# registers of the bf16 wgmma m64n64k16's A operand, so no converted tile sits in shared memory; q's chunks
# are those of the bf16 row (head_dim x 2 B).
READER_WG_TILE_KEYS = 64  # wgmma m64: keys per tile
READER_WG_CHUNK_BYTES = 128  # one 128-B swizzle atom's width of a key row (and of q's rows)
READER_WG_ALIGN = 1024  # the 128-B swizzle pattern repeats every 1024 B: operand bases aligned to it
READER_WG_ROW_INFO_BYTES = 4  # per key row and stage: its scale (fp32) or 1, NaN where the page is bad
READER_WG_MAX_TOKENS = 4  # query tokens (MTP, next_n 1-4) a CTA scores from one staging of the keys
READER_MAX_SMEM_BYTES = SM90.block_shared_bytes  # dynamic shared memory one CTA may opt in to (sm_90)
READER_SM_SHARED_BYTES = SM90.shared_bytes  # shared memory of an sm_90 SM; the driver keeps some per CTA
READER_CTA_RESERVED_BYTES = SM90.reserved_shared_bytes
READER_WG_MAX_CTAS = SM90.threads // (4 * WARP)  # CTAs per SM the launch plans for at most (warpgroups of 128)
READER_WG_FP4_BLOCK = 32  # fp4 values per ue8m0 scale the wgmma path converts (one 16-B operand piece: 8)


def reader_wg_operand_row_bytes(lay: Layout) -> int:
    """Bytes of one key row as the wgmma A operand: as stored (bf16, fp8), widened to bf16 (fp4)."""
    if lay.spec.store.dtype == "fp4_e2m1":
        return lay.spec.head_dim * READER_OPERAND_BYTES
    return lay.row_bytes


def reader_wg_fp4_stage_bytes(lay: Layout) -> int:
    """fp4 keys: bytes of one stage's packed rows and scale bytes (the row words follow the stages)."""
    return READER_WG_TILE_KEYS * (lay.row_bytes + lay.scale_bytes)


def reader_wg_chunks(lay: Layout) -> int:
    """128-B operand chunks per key row (0: operand rows are not whole 128-B atoms); bf16 and fp8 stage
    them as stored, fp4 converts its packed rows into them."""
    row = reader_wg_operand_row_bytes(lay)
    return row // READER_WG_CHUNK_BYTES if row % READER_WG_CHUNK_BYTES == 0 else 0


def reader_wg_smem_bytes(lay: Layout, ntok: int, stages: int, tma: bool = False) -> int:
    """Dynamic shared memory of a wgmma-path CTA scoring `ntok` query tokens through `stages` stages
    (`tma`: the TMA variant's, whose stages also hold their two mbarriers)."""
    tile = READER_WG_TILE_KEYS
    token = reader_wg_chunks(lay) * READER_HEADS * READER_WG_CHUNK_BYTES + 4 * READER_HEADS
    if lay.spec.store.dtype == "fp4_e2m1":
        stage = reader_wg_fp4_stage_bytes(lay) + tile * READER_WG_ROW_INFO_BYTES
        return READER_WG_ALIGN + stages * stage + ntok * token
    stage = reader_wg_chunks(lay) * tile * READER_WG_CHUNK_BYTES + tile * READER_WG_ROW_INFO_BYTES
    if tma:
        stage += READER_WG_TMA_BARRIER_BYTES
    return READER_WG_ALIGN + stages * stage + ntok * token + (READER_WG_TMA_SHARE_BYTES if tma else 0)


def reader_wg_tokens_per_cta(lay: Layout, stages: int, tma: bool = False) -> int:
    """Query tokens a wgmma-path CTA scores together from one staging of the keys (their q in shared
    memory): up to READER_WG_MAX_TOKENS that fit; 0: one token does not fit. 1 for the cp.async variant of
    rows of several chunks, which stages a tile chunk by chunk (each token would keep its own accumulators
    across the chunks); the TMA variant stages, and fp4 converts, whole tiles."""
    chunks = reader_wg_chunks(lay)
    fits = [t for t in range(1, READER_WG_MAX_TOKENS + 1)
            if reader_wg_smem_bytes(lay, t, stages, tma) <= READER_MAX_SMEM_BYTES]
    if not chunks or not fits:
        return 0
    whole_tiles = tma or lay.spec.store.dtype == "fp4_e2m1"
    return 1 if chunks > 1 and not whole_tiles else max(fits)


def reader_wgmma(lay: Layout, stages: int) -> bool:
    """Can the wgmma path read this layout? bf16 or fp8 keys, rows of whole 128-B chunks at offset 0 of
    16-B aligned pages (cp.async of 16 B), no scale or one 4-B scale per token at 4-B aligned offsets,
    and one token's q fitting shared memory; or fp4 keys with a ue8m0 scale per READER_WG_FP4_BLOCK
    values, rows of whole 16-B pieces, a token's scale bytes whole 4-B words at 4-B aligned offsets.
    Otherwise the mma.sync path runs on sm_90a too."""
    spec = lay.spec
    dtype = spec.store.dtype
    if dtype not in ("bf16", "fp8_e4m3", "fp4_e2m1") or lay.kept_span.size or lay.quant_row_offset:
        return False
    if lay.page_bytes % 16 or lay.row_bytes % 16 or not reader_wg_chunks(lay) or stages < 2:
        return False
    if dtype == "fp4_e2m1":
        if spec.store.scale != "ue8m0" or lay.block != READER_WG_FP4_BLOCK or lay.scale_unit != 1:
            return False
        if lay.scale_bytes % 4 or lay.scale_region_offset % 4 or lay.scale_stride % 4:
            return False
        # a packed row's 16-B pieces split the CTA's threads into passes of whole 8-row swizzle groups
        pieces = lay.row_bytes // 16
        threads = reader_threads()
        if threads % pieces or (threads // pieces) % 8 or READER_WG_TILE_KEYS % (threads // pieces):
            return False
    elif lay.blocks_per_token:  # scaled
        if dtype != "fp8_e4m3" or lay.blocks_per_token != 1 or lay.scale_unit != 4:
            return False
        if lay.scale_region_offset % 4 or lay.scale_stride % 4:
            return False
    return reader_wg_tokens_per_cta(lay, stages) >= 1


def reader_wg_ctas_per_sm(lay: Layout, ntok: int, stages: int, tma: bool = False, consumers: int = 0,
                          pairs: bool = False, split: bool = False) -> int:
    """CTAs of the wgmma path one SM holds (shared memory bound, and register bound at the registers per
    thread each variant is planned at; the kernel's __launch_bounds__ caps its registers for the one-token
    count, so registers do not bind first). `pairs`: the cubin of two tokens per m64n128 group
    (reader_wg_pairs), planned at its own registers."""
    if split:  # planned as one CTA per SM: its launch registers are the SM's over its threads
        return 1
    per = reader_wg_smem_bytes(lay, ntok, stages, tma) + READER_CTA_RESERVED_BYTES
    # the TMA variant's CTAs are large: its threads' registers bind before the SM's thread count does
    regs = reader_wg_plan_registers(lay.spec.store.dtype, tma, pairs)
    if tma:
        most = READER_SM_REGISTERS // (reader_wg_tma_threads(consumers) * regs)
    else:
        most = min(READER_WG_MAX_CTAS, READER_SM_REGISTERS // (4 * WARP * regs))
    return max(1, min(most, READER_SM_SHARED_BYTES // per))


def reader_wg_stages(lay: Layout, tune: dict[str, int] | None = None) -> int:
    """The ring of the wgmma path's variant that runs: the tuning's (READER_TUNING_DEFAULTS by key dtype,
    `tune` over it) kReaderWgTmaStages where the TMA variant runs, else kReaderWgStages."""
    merged = {**_tuning(lay.spec), **(tune or {})}
    return int(merged["kReaderWgTmaStages" if reader_wg_tma(lay, tune) else "kReaderWgStages"])


def reader_wg_enabled(lay: Layout, tune: dict[str, int] | None = None) -> bool:
    """Does the reader rendered with `tune` take the wgmma path where the arch has it? The layout must
    allow it and the tuning want it (kReaderWgmma 0: the mma.sync path, the bench's comparison)."""
    merged = {**_tuning(lay.spec), **(tune or {})}
    return bool(merged["kReaderWgmma"]) and reader_wgmma(lay, int(merged["kReaderWgStages"]))



# The TMA variant of the sm_90a path (kReaderWgTma 1). One producer warp copies each 64-key tile with
# one tensor copy (cp.async.bulk.tensor through a tensor map of the cache, encoded on the host per cache
# tensor, kgen.tma: the copy writes the 128-B swizzle wgmma reads) and the tile's 64 scales with one bulk
# copy, into a ring of kReaderWgStages stages shared by kReaderWgConsumers warpgroups (tile i is scored by
# warpgroup i mod consumers); per stage a `full` mbarrier (the copies' bytes have landed) hands it to its
# warpgroup, an `empty` one (its wgmma has read it) back to the producer. 128 threads no longer issue 16-B
# copies and wait on barriers per tile, and q is staged once for several warpgroups. It reads a tile as one
# box, so a tile must lie in one page (page_size a multiple of 64), and fp8 scales as one 256-B copy
# (one 4-B scale per token, consecutive, at a 16-B aligned offset); else the cp.async variant runs.
READER_WG_TMA_BARRIER_BYTES = 16  # per stage: the full and the empty mbarrier, 8 B each
READER_WG_TMA_PRODUCER_THREADS = 32  # one warp, after the consumers' warpgroups
# after the barriers: the share of the work the producer computes and publishes (wg::Work::Share, 32 B) behind
# its own 8-B mbarrier, which the consumers wait for
READER_WG_TMA_SHARE_BYTES = 40
READER_WG_TMA_MAX_CONSUMERS = 4
READER_WG_TMA_MAX_STAGES = 32
READER_WG_TMA_MAP_BYTES = 128  # a CUtensorMap (64-B aligned)
READER_SM_REGISTERS = SM90.registers  # 32-bit registers of an sm_90 SM
# registers per thread a TMA-variant CTA plan assumes (the consumers' 32 accumulators, descriptors, the
# epilogue, the work split's bookkeeping): the plan's 2 CTAs of 288 threads let __launch_bounds__ give
# each thread up to 113, above what ptxas uses (96 for fp8 with the work split; 2026-12-01 run3), so it
# never spills to fit
READER_WG_TMA_REGISTERS = 80
# registers per thread the cp.async variant's plan leaves each thread at least: its CTAs are small, and an
# SM full of them (16) would cap every thread at 32 registers, 8 of them at 64, where ptxas spills the
# accumulators and the rows' pages; NVRTC 13.0's code for a spilled 32-key-page fp8 reader read a null page
# on the H200 (bench/results/h200-2026-12-01/final/README.md). 96 is what ptxas uses without spilling.
READER_WG_REGISTERS = 96
# the same for a cubin of two MTP tokens per m64n128 group (kReaderWgPairs): 64 accumulators where one token
# has 32, beside the same bookkeeping. ptxas (NVRTC 13.0, __launch_bounds__ lifted) uses 122 (fp8) and 124
# (bf16) for the TMA variant (166 and 168 before q's staging addresses stayed inside the pair change), 214
# (fp8) and 221 (fp4) for the cp.async variants; capped at 2 CTAs per SM (96) the TMA one spills 56 B. So such
# a TMA CTA has an SM to itself, and a cp.async one shares it with one.
READER_WG_TMA_PAIR_REGISTERS = 168
READER_WG_PAIR_REGISTERS = 224
# The TMA pair cubin's register split (kReaderWgSplit 1): the producer a whole warpgroup (one warp of it works),
# which gives registers back by setmaxnreg.dec to READER_WG_SPLIT_PRODUCER_REGISTERS (setmaxnreg's least), and the
# consumer warpgroups take them by setmaxnreg.inc (reader_wg_split_registers); one CTA per SM. The warpgroups
# trade within the registers the CTA was launched with: its threads x what ptxas compiles the kernel at under
# __launch_bounds__(threads, 1) (reader_wg_launch_registers: 96 for 4 consumers, 128 for 3). ptxas compiles each
# side at its setmaxnreg value: 4 consumer warpgroups at 112 (a producer at 24) do not spill and keep the wgmma
# asynchronous (NVRTC 13.0, every fp8 ring of 8-24 stages; 104 still fits; 96 spills).
READER_WG_SPLIT_PRODUCER_REGISTERS = 24
READER_WG_SPLIT_MAX_REGISTERS = 240  # setmaxnreg takes at most 256; ptxas allocates at most 255
READER_WG_SPLIT_PRODUCER_THREADS = 128


def reader_wg_launch_registers(threads: int) -> int:
    """What ptxas compiles a kernel of `threads` threads per CTA at when one CTA per SM must fit: the SM's
    registers over its threads, in setmaxnreg's (and the allocator's) steps of 8."""
    return min(READER_WG_SPLIT_MAX_REGISTERS, READER_SM_REGISTERS // max(1, threads) // 8 * 8)


def reader_wg_split_launch_registers(consumers: int) -> int:
    """The launch registers per thread of a split CTA of `consumers` warpgroups and its producer warpgroup."""
    return reader_wg_launch_registers(reader_wg_tma_threads(consumers, split=True))


def reader_wg_split_registers(consumers: int) -> int:
    """The consumers' registers of a split CTA of `consumers` warpgroups: what the CTA's launch registers leave
    after the producer warpgroup's READER_WG_SPLIT_PRODUCER_REGISTERS, per consumer thread, in steps of 8
    (0: none left, or no consumers)."""
    if consumers < 1:
        return 0
    pool = reader_wg_tma_threads(consumers, split=True) * reader_wg_split_launch_registers(consumers)
    left = pool - READER_WG_SPLIT_PRODUCER_THREADS * READER_WG_SPLIT_PRODUCER_REGISTERS
    return max(0, min(READER_WG_SPLIT_MAX_REGISTERS, left // (consumers * 4 * WARP) // 8 * 8))


# What ptxas (NVRTC 13.0, sm_90a) uses where __launch_bounds__ does not bind (scripts/reader_ptxas.py
# --uncapped: the shipped readable specs and 20 sampled ones, every tuning a launch may load), by (TMA variant,
# pairs, key dtype), where it exceeds the floor above: the one-token TMA cubins 100 (fp8) / 104-109 (bf16)
# (80 / 86 at their launch bounds since q's staging addresses stay inside the pair change: the plan holds);
# the cp.async ones 121-128 (fp8), 118-124 (bf16). Capped at 5 CTAs of 128 threads (102 registers, 96 as
# allocated) the cp.async fp8 and bf16 cubins of 64- and 256-key pages spill 224-252 B, so they are planned
# at 128 (4 CTAs). fp4 keys are planned at the floor, 96 (5 CTAs an SM where shared memory holds them): since
# its widening takes 3 integer instructions a word (reader/convert.cuh) it compiles to 96 without a spill
# (NVRTC 13.5 and 13.0; the byte-permute widening before it spilled 152 B there). The pair cubins' floors are
# what they use.
READER_WG_REGISTER_NEEDS: dict[tuple[bool, bool, str], int] = {
    (True, False, "fp8_e4m3"): 100, (True, False, "bf16"): 109,
    (False, False, "fp8_e4m3"): 128, (False, False, "bf16"): 128,
}


def reader_wg_plan_registers(dtype: str, tma: bool, pairs: bool, split: bool = False, consumers: int = 0) -> int:
    """Registers per thread the plan gives a wgmma-path cubin (TMA or cp.async variant, pairs or one token,
    by key dtype): the variant's floor, or what ptxas needs (READER_WG_REGISTER_NEEDS) where that is more.
    The CTAs per SM (reader_wg_ctas_per_sm) are planned at it, so __launch_bounds__ never caps a cubin below."""
    if split:  # the consumers' (one CTA per SM)
        return reader_wg_split_registers(consumers)
    floor = (READER_WG_TMA_PAIR_REGISTERS if pairs else READER_WG_TMA_REGISTERS) if tma else (
        READER_WG_PAIR_REGISTERS if pairs else READER_WG_REGISTERS)
    return max(floor, READER_WG_REGISTER_NEEDS.get((tma, pairs, dtype), 0))


def reader_wg_planned_registers(lay: Layout, tune: dict[str, int] | None = None) -> int:
    """reader_wg_plan_registers of the cubin rendered with `tune`."""
    return reader_wg_plan_registers(lay.spec.store.dtype, reader_wg_tma(lay, tune), reader_wg_pairs(lay, tune),
                                    reader_wg_split(lay, tune), reader_wg_consumers(lay, tune))


# the least registers a consumer of the pair cubin takes: its 64 accumulators and the rest of the loop (below it
# ptxas spills; at 104 it does not)
READER_WG_SPLIT_MIN_CONSUMER_REGISTERS = 104


def reader_wg_split_fits(consumers: int) -> bool:
    """Does a split CTA of `consumers` warpgroups leave each consumer at least
    READER_WG_SPLIT_MIN_CONSUMER_REGISTERS?"""
    return reader_wg_split_registers(consumers) >= READER_WG_SPLIT_MIN_CONSUMER_REGISTERS


def reader_wg_split(lay: Layout, tune: dict[str, int] | None = None) -> bool:
    """Does the reader rendered with `tune` run the TMA pair cubin with the register split (kReaderWgSplit 1,
    where the TMA variant runs pairs and its warpgroups fit at the split's registers)?"""
    merged = {**_tuning(lay.spec), **(tune or {})}
    return (bool(merged["kReaderWgSplit"]) and reader_wg_tma(lay, tune) and reader_wg_pairs(lay, tune)
            and reader_wg_split_fits(reader_wg_consumers(lay, tune)))


def reader_wg_pairs(lay: Layout, tune: dict[str, int] | None = None) -> bool:
    """Does the reader rendered with `tune` score two MTP tokens per m64n128 wgmma group (kReaderWgPairs 1,
    where a CTA holds two tokens or more and one CTA's threads fit the SM at the pair registers)? The tokens'
    q rows are one B operand of 128 rows (q chunk-major in shared memory), each half of the accumulators one
    token's logits."""
    merged = {**_tuning(lay.spec), **(tune or {})}
    if not merged["kReaderWgPairs"] or not reader_wg_enabled(lay, tune):
        return False
    tma = reader_wg_tma(lay, tune)
    consumers = reader_wg_consumers(lay, tune)
    threads = reader_wg_tma_threads(consumers) if tma else reader_threads()
    fits = threads * (READER_WG_TMA_PAIR_REGISTERS if tma else READER_WG_PAIR_REGISTERS) <= READER_SM_REGISTERS
    if tma and merged["kReaderWgSplit"]:  # the split's registers instead
        fits = reader_wg_split_fits(consumers)
    return fits and reader_wg_tokens_per_cta(lay, reader_wg_stages(lay, tune), tma) >= 2


def reader_wg_key_registers(lay: Layout, tune: dict[str, int] | None = None) -> bool:
    """Does the reader rendered with `tune` score MTP tokens from key tiles held in the wgmma's A registers, each
    token's 64 heads as two m64n32 groups, the next one issued before the last one is summed, so that a wgmma runs
    while the warpgroup adds up the heads (kReaderWgKeyRegisters 1, one token per group)?
    - fp8, where the TMA variant reads rows of one 128-B chunk: a warpgroup loads its tile once (ldmatrix, the
      tile's 16 registers a thread) and hands the stage back before any wgmma; else every token's m64n64 group
      reads the tile from shared memory and waits before its sums (kgen.reader_plan.reader_wg_key_tune picks it
      per launch);
    - fp4 at head_dim 128 (the cp.async variant), whose tile is converted into 32 A registers once for all of its
      tokens anyway: else every token's m64n64 group waits before its sums."""
    merged = {**_tuning(lay.spec), **(tune or {})}
    if not merged["kReaderWgKeyRegisters"] or reader_wg_pairs(lay, tune):
        return False
    if lay.spec.store.dtype == "fp4_e2m1":
        # held: a row's four quarters (a thread each) of one scale block each, one group of 8 k16 steps
        return reader_wg_enabled(lay, tune) and lay.spec.head_dim == 4 * READER_WG_FP4_BLOCK
    return lay.spec.store.dtype == "fp8_e4m3" and reader_wg_tma(lay, tune) and reader_wg_chunks(lay) == 1


def reader_wg_tma_layout(lay: Layout) -> bool:
    """Can the TMA variant read a layout the wgmma path reads (reader_wgmma: rows of whole 128-B chunks at
    offset 0, 16-B aligned pages, one 4-B fp8 scale per token)? Its own rules on top: bf16 or fp8 keys as
    stored (not fp4's converted tiles), a tile inside one page (page_size a multiple of 64: one box), and
    fp8 scales consecutive at a 16-B aligned offset (a tile's 64 are one 256-B bulk copy)."""
    if lay.spec.store.dtype not in ("bf16", "fp8_e4m3") or lay.page_size % READER_WG_TILE_KEYS:
        return False
    return not lay.blocks_per_token or (lay.scale_stride == 4 and lay.scale_region_offset % 16 == 0)


def reader_wg_tma(lay: Layout, tune: dict[str, int] | None = None) -> bool:
    """Does the reader rendered with `tune` run the TMA variant where the arch has wgmma? Its ring must be
    whole rounds of the consumer warpgroups (at most 32 stages, one bit each in the producer's mask): a
    warpgroup waits for stage s's next tile only after it read the stage's previous tile itself, so the
    stage's barrier is never two phases behind the phase it waits for (an mbarrier tells only the current
    phase from the one before)."""
    merged = {**_tuning(lay.spec), **(tune or {})}
    consumers, stages = int(merged["kReaderWgConsumers"]), int(merged["kReaderWgTmaStages"])
    return (bool(merged["kReaderWgTma"]) and reader_wg_enabled(lay, tune) and reader_wg_tma_layout(lay)
            and 1 <= consumers <= READER_WG_TMA_MAX_CONSUMERS and stages % consumers == 0
            and 2 <= stages <= READER_WG_TMA_MAX_STAGES and reader_wg_tokens_per_cta(lay, stages, tma=True) >= 1)


def reader_wg_consumers(lay: Layout, tune: dict[str, int] | None = None) -> int:
    """The TMA variant's consumer warpgroups per CTA (the tuning's)."""
    return int({**_tuning(lay.spec), **(tune or {})}["kReaderWgConsumers"])


def reader_wg_tma_threads(consumers: int, split: bool = False) -> int:
    """Threads of a TMA-variant CTA: its consumer warpgroups and the producer warp (`split`: warpgroup)."""
    return consumers * 4 * WARP + (READER_WG_SPLIT_PRODUCER_THREADS if split else READER_WG_TMA_PRODUCER_THREADS)


def reader_wg_threads(lay: Layout, tune: dict[str, int] | None = None) -> int:
    """Threads of a wgmma-path CTA (one warpgroup; the TMA variant's consumers and producer)."""
    if not reader_wg_tma(lay, tune):
        return reader_threads()
    return reader_wg_tma_threads(reader_wg_consumers(lay, tune), reader_wg_split(lay, tune))


# The mma.sync path's head passes where the default's cubin spills: fp8 keys of 64-B rows (head_dim 64; the
# wgmma path never reads them). With 2 passes ptxas itself settles on 96 registers and spills 16 B for some of
# their layouts (16-, 2- and 64-key pages among 40 sampled specs); with 4 passes every sampled one compiles to
# 96-127 registers without a spill (NVRTC 13.0, sm_90a; scripts/reader_ptxas.py --sample 40). Not timed.
READER_HEAD_PASSES_BY_ROW: dict[tuple[str, int], int] = {("fp8_e4m3", 64): 4}


def _tuning(spec: Spec) -> dict[str, int]:
    base = READER_TUNING_DEFAULTS.get(spec.store.dtype, READER_TUNING_DEFAULTS["bf16"])
    passes = READER_HEAD_PASSES_BY_ROW.get((spec.store.dtype, spec.head_dim))
    return {**base, "kReaderHeadPasses": passes} if passes else base


def reader_constants(lay: Layout, tune: dict[str, int] | None = None) -> dict[str, object]:
    """What the reader's config adds to the writer's constants (kgen.render substitutes them);
    `tune` overrides READER_TUNING_DEFAULTS[store dtype]."""
    spec = lay.spec
    key_bits = VALUE_BITS[spec.store.dtype]
    chunk_elems = READER_CHUNK_BYTES * 8 // key_bits
    groups = lay.quant_bytes // READER_GROUP_BYTES
    stages = reader_wg_stages(lay, tune)
    wg = reader_wg_enabled(lay, tune)
    tma = reader_wg_tma(lay, tune)
    consumers = reader_wg_consumers(lay, tune)
    pairs = reader_wg_pairs(lay, tune)
    split = reader_wg_split(lay, tune)
    return {
        "kReaderHeads": READER_HEADS,
        "kReaderWarps": READER_WARPS,
        "kReaderWarpKeys": READER_WARP_KEYS,
        "kReaderMmaK": READER_MMA_K,
        "kReaderChunkElems": chunk_elems,
        "kReaderStepElems": READER_STEP_ELEMS,
        "kReaderStepsPerChunk": chunk_elems // READER_STEP_ELEMS,
        "kReaderGroups": groups,
        "kReaderSteps": groups * (chunk_elems // READER_STEP_ELEMS),
        "kReaderGroupsInFlight": min(groups, READER_MAX_GROUPS_IN_FLIGHT),
        "kReaderKeyVectorBytes": reader_key_vector_bytes(lay),
        "kReaderQTokenBytes": reader_q_token_bytes(spec),
        "kReaderTokensPerCta": reader_tokens_per_cta(spec),
        "kReaderWgTileKeys": READER_WG_TILE_KEYS,
        "kReaderWgChunkBytes": READER_WG_CHUNK_BYTES,
        "kReaderWgChunks": reader_wg_chunks(lay) if wg else 0,
        "kReaderWgAlign": READER_WG_ALIGN,
        "kReaderWgTokensPerCta": reader_wg_tokens_per_cta(lay, stages, tma) if wg else 0,
        "kReaderWgMinBlocks": reader_wg_ctas_per_sm(lay, 1, stages, tma, consumers, pairs, split) if wg else 0,
        "kReaderWgTmaBarrierBytes": READER_WG_TMA_BARRIER_BYTES,
        "kReaderWgTmaProducerThreads": READER_WG_TMA_PRODUCER_THREADS,
        "kReaderWgTmaShareBytes": READER_WG_TMA_SHARE_BYTES,
        # the capacities and limits the twins compare against: rendered, never typed in the header
        "kReaderSmemBytes": READER_SMEM_BYTES,
        "kReaderMaxGroupsInFlight": READER_MAX_GROUPS_IN_FLIGHT,
        "kReaderWgMaxTokens": READER_WG_MAX_TOKENS,
        "kReaderMaxSmemBytes": READER_MAX_SMEM_BYTES,
        "kReaderSmSharedBytes": READER_SM_SHARED_BYTES,
        "kReaderCtaReservedBytes": READER_CTA_RESERVED_BYTES,
        "kReaderWgMaxCtas": READER_WG_MAX_CTAS,
        "kReaderWgTmaMaxConsumers": READER_WG_TMA_MAX_CONSUMERS,
        "kReaderSmRegisters": READER_SM_REGISTERS,
        "kReaderWgTmaRegisters": READER_WG_TMA_REGISTERS,
        "kReaderWgRegisters": READER_WG_REGISTERS,
        "kReaderWgTmaPairRegisters": READER_WG_TMA_PAIR_REGISTERS,
        "kReaderWgPairRegisters": READER_WG_PAIR_REGISTERS,
        "kReaderWgPlanRegisters": reader_wg_plan_registers(spec.store.dtype, tma, pairs, split, consumers),
        "kReaderWgSplitProducerRegisters": READER_WG_SPLIT_PRODUCER_REGISTERS,
        "kReaderWgSplitConsumerRegisters": reader_wg_split_registers(consumers),
        "kReaderWgSplitLaunchRegisters": reader_wg_split_launch_registers(consumers),
        **_tuning(spec),
        **(tune or {}),
        "kReaderWgmma": int(wg),  # the tuning's wish, where the path reads the layout
        "kReaderWgTma": int(tma),  # likewise
        "kReaderWgStages": stages,  # the ring of the variant that runs
        "kReaderWgPairs": int(pairs),  # the tuning's wish, where the CTA holds two tokens
        "kReaderWgSplit": int(split),  # likewise, where the TMA variant runs pairs
        "kReaderWgKeyRegisters": int(reader_wg_key_registers(lay, tune)),  # likewise, where it applies
    }


def reader_threads() -> int:
    return READER_WARPS * WARP


# ---------------------------------------------------------------------------------------------
# what the reader reads, and which path a cubin runs


def reader_problems(spec: Spec) -> list[str]:
    """Why indexer_logits cannot read this spec's pages (one line each); [] if it can."""
    try:
        lay = compute(spec)
    except (ValueError, ZeroDivisionError, OverflowError) as e:
        return [f"kgen cannot compute its byte layout ({e})"]
    s = spec.store
    out = []
    if s.dtype not in READER_DTYPES:
        out.append(f"store.dtype {s.dtype} is not a key dtype the reader multiplies")
    if lay.kept_span.size:
        out.append("keys with a kept RoPE span (store.rope_dtype) are not read: the reader multiplies one "
                   "dtype per row")
    if s.dtype == "fp8_e4m3" and lay.blocks_per_token > 1:
        out.append(f"fp8 keys need one scale per token (block = head_dim), got {lay.blocks_per_token} blocks")
    if s.dtype == "fp4_e2m1" and lay.block != 32:
        out.append(f"fp4 keys need a ue8m0 scale per 32 values, got block {lay.block}")
    if lay.row_bytes % READER_GROUP_BYTES:
        out.append(f"a key row of {lay.row_bytes} B is not a multiple of {READER_GROUP_BYTES} B "
                   "(4 lanes x 16-B chunks)")
    if not reader_key_vector_bytes(lay):
        out.append(f"pages of {lay.page_bytes} B are not 4-B aligned (page_align)")
    if reader_tokens_per_cta(spec) < 1:
        out.append(f"q of one token ({READER_HEADS} heads x {spec.head_dim}) does not fit "
                   f"{READER_SMEM_BYTES // 1024} KB of shared memory")
    return out


def readable(spec: Spec) -> bool:
    return not reader_problems(spec)


def runs_wgmma(spec: Spec, target: str | None, tune: dict | None = None, lay: Layout | None = None) -> bool:
    """Does the reader rendered with `tune` and compiled for `target` (None: not a GPU cubin, e.g. the
    CPU emulation) run the wgmma path? The kernel's twin is KGEN_READER_WGMMA and kReaderWgmma."""
    return target is not None and has_wgmma(target) and reader_wg_enabled(lay or compute(spec), tune)


def runs_tma(spec: Spec, target: str | None, tune: dict | None = None, lay: Layout | None = None) -> bool:
    """Does the reader rendered with `tune` and compiled for `target` run the wgmma path's TMA variant
    (which reads the cache through the tensor map Params.cache_map)? Its twin is kReaderWgTma."""
    return target is not None and has_wgmma(target) and reader_wg_tma(lay or compute(spec), tune)


# ---------------------------------------------------------------------------------------------
# the TMA variant's tensor map of a paged cache (kgen.tma encodes it with the driver)
#
# The map views the pages as a 4-D uint8 tensor, innermost first:
#   [128-B chunk of a key row (READER_WG_CHUNK_BYTES), chunk of the row, key of the page, page]
# with byte strides (row_bytes between keys, page_bytes between pages), so one box, {128, 1, 64, 1}, is one
# 64-key tile's chunk (READER_WG_TILE_KEYS keys of one page: reader_wg_tma_layout requires whole tiles per
# page), copied with the 128-B swizzle the wgmma operand reads. Scales (fp8) are not in the map: the
# kernel copies them with a plain bulk copy.

MAP_RANK = 4


@dataclass(frozen=True)
class MapGeometry:
    """What a tensor map of the cache's key region describes (cuTensorMapEncodeTiled's arguments)."""

    dims: tuple[int, ...]  # global dimensions, innermost first (elements = bytes: uint8)
    strides: tuple[int, ...]  # byte strides of dims 1.. (dim 0 is dense)
    box: tuple[int, ...]  # one copy's box, innermost first
    element_strides: tuple[int, ...]


def cache_map_geometry(lay: Layout, num_pages: int) -> MapGeometry:
    """The key region of `num_pages` pages of layout `lay` as the TMA variant's map describes it."""
    chunk = READER_WG_CHUNK_BYTES
    return MapGeometry(dims=(chunk, reader_wg_chunks(lay), lay.page_size, num_pages),
                       strides=(chunk, lay.row_bytes, lay.page_bytes),
                       box=(chunk, 1, READER_WG_TILE_KEYS, 1),
                       element_strides=(1,) * MAP_RANK)
