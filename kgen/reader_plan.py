"""The reader's launch planning: the grid, threads and shared memory of an indexer_logits launch, and the
tuning (the cubin) each launch shape runs.

Pure functions of the checked arguments (kgen.abi.Args: the spec, the sizes they bound, the loaded cubin's
target and tuning) and the device's facts (kgen.arch.DeviceFacts: SMs and L2, which the op layer puts in
the arguments); nothing here asks a device. `ring_tunes` lists every tuning a spec's reader may load,
which `kgen compile` and the AOT directory build ahead of time. The byte math is kgen.reader_layout.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .arch import NO_DEVICE, DeviceFacts
from .layout import Layout, compute
from .reader_layout import (
    READER_WARP_KEYS,
    READER_WARPS,
    READER_WG_MAX_TOKENS,
    READER_WG_TILE_KEYS,
    readable,
    reader_q_token_bytes,
    reader_threads,
    reader_tokens_per_cta,
    reader_wg_consumers,
    reader_wg_ctas_per_sm,
    reader_wg_enabled,
    reader_wg_key_registers,
    reader_wg_pairs,
    reader_wg_smem_bytes,
    reader_wg_split,
    reader_wg_stages,
    reader_wg_threads,
    reader_wg_tma,
    reader_wg_tokens_per_cta,
    runs_tma,
    runs_wgmma,
)
from .spec import Spec

# The wgmma path's ring chosen per launch (launch_tune picks the cubin; each is rendered, and twinned, from
# the one spec). Where a key dtype has an entry (shallow stages, staged keys per SM), a launch that stages
# fewer keys per SM than that (B x token groups x max_seq_len keys over the SMs) runs `shallow` stages; at or
# above it, the default (READER_TUNING_DEFAULTS): a small launch gains from more CTAs per SM (2 stages: 8
# CTAs, one tile per pipeline step), a large one from deeper rings (4 stages: 5 CTAs, two tiles per step).
# The threshold sits between the fp8 shapes where each wins (both rings in one process on the H200:
# bench/results/h200-2026-11-30/reader4/README.md); bf16 has none (4 stages win at every shape: reader3).
# Those CTA counts were shared memory's. The cp.async fp8 cubin is now planned at the 128 registers it uses
# (reader_layout.READER_WG_REGISTER_NEEDS), so registers hold both rings to 4 CTAs. The rule's gain at small
# launches has not been measured since then.
READER_WG_SHAPE_STAGES: dict[str, tuple[int, int]] = {"fp8_e4m3": (2, 49152)}


# The TMA variant's pair cubin for MTP launches (next_n >= 2): two tokens per m64n128 wgmma group
# (kReaderWgPairs) where the one-token cubin runs an m64n64 group, its wait and its epilogue per token. Its
# threads need twice the accumulators (reader_layout.READER_WG_TMA_PAIR_REGISTERS), so its CTA has an SM to
# itself; its ring (reader_wg_pair_ring) keeps as many key bytes in flight per SM as the one-token cubin's
# CTAs. No key dtype loads it by shape (READER_WG_PAIR_STAGES is empty): measured beside the
# one-token cubin on the H200 (fp8 rings of 16 and 8 then) it is slower (fp8 32 x 64K next_n 2: 164.5 against
# 111.2 us cold; next_n 4: 265.6 against 189.0), as fast as the one-token cubin on the same one-CTA ring
# (162.2 / 247.4 us): the warpgroups per SM bind, not the wgmma count (bench/results/mtp-2026-12-03/README.md).
READER_WG_PAIR_STAGES: dict[str, int] = {}  # key dtype -> ring of the pair cubin its MTP launches load


def reader_wg_pair_ring(lay: Layout) -> int | None:
    """The pair cubin's ring: the one-token cubin's default ring times its CTAs per SM (the same key bytes in flight
    per SM); None where the TMA variant does not read the layout."""
    if not reader_wg_tma(lay):
        return None
    stages = reader_wg_stages(lay)
    return stages * reader_wg_ctas_per_sm(lay, 1, stages, True, reader_wg_consumers(lay))


def reader_wg_pair_tuning(lay: Layout, tune: dict[str, int] | None = None) -> dict[str, int]:
    """`tune` as the pair cubin (kReaderWgPairs 1 on reader_wg_pair_ring's ring unless `tune` fixes one)."""
    ring = reader_wg_pair_ring(lay)
    return {**({"kReaderWgTmaStages": ring} if ring else {}), **(tune or {}), "kReaderWgPairs": 1}


# The pair cubin with the register split (kReaderWgSplit: a producer warpgroup at few registers, consumer
# warpgroups at many, one CTA per SM, DeepGEMM's shape), on a ring of whole rounds of its warpgroups: fp8 4 consumers
# at 112 registers (as many warpgroups per SM as the one-token cubin's two CTAs), bf16 3 at 160 (4 serialize its
# wgmma at 8 stages). No launch loads it by shape: on the H200 its next_n 2 costs 1.18x its next_n 1, but that
# next_n 1 is 1.34x the one-token cubin's, and it is slower at every shape measured
# (bench/results/h200-2026-12-04-s12/README.md).
READER_WG_SPLIT_TUNING: dict[str, dict[str, int]] = {
    "fp8_e4m3": {"kReaderWgTmaStages": 16, "kReaderWgConsumers": 4},
    "bf16": {"kReaderWgTmaStages": 9, "kReaderWgConsumers": 3},
}


def reader_wg_split_tuning(lay: Layout, tune: dict[str, int] | None = None) -> dict[str, int]:
    """`tune` as the pair cubin with the register split (READER_WG_SPLIT_TUNING's ring and warpgroups unless
    `tune` fixes them)."""
    return {**READER_WG_SPLIT_TUNING.get(lay.spec.store.dtype, {}), **(tune or {}), "kReaderWgPairs": 1,
            "kReaderWgSplit": 1}


def reader_wg_pair_tune(lay: Layout, tune: dict[str, int] | None, next_n: int) -> dict[str, int] | None:
    """`tune` plus the pair cubin's (READER_WG_PAIR_STAGES) for a TMA-variant launch of next_n >= 2, unless
    `tune` fixes kReaderWgPairs or the key dtype has no entry; `tune` itself otherwise."""
    stages = READER_WG_PAIR_STAGES.get(lay.spec.store.dtype)
    if next_n < 2 or stages is None or (tune and "kReaderWgPairs" in tune):
        return tune
    paired = {"kReaderWgTmaStages": stages, **(tune or {}), "kReaderWgPairs": 1}
    return paired if reader_wg_tma(lay, paired) and reader_wg_pairs(lay, paired) else tune


# Key tiles held in the wgmma's A registers (kReaderWgKeyRegisters, reader_layout.reader_wg_key_registers) for
# launches of at least this many query tokens per sequence, by key dtype.
# - fp8 (the TMA variant): both cubins in one process on the same tensors (H100, graphs,
#   bench/results/h100-2026-12-06-s24/, calls 2 and 3; B x keys 1 x 4K ... 64 x 32K, equal, +-30 % and uniform
#   lengths) against the cubin whose every token reads the keys from shared memory: next_n 4 0.91-0.94x its time
#   (0.99x at 1 x 4K), next_n 3 0.95-0.96x, next_n 1 1.00-1.07x (two m64n32 groups and their waits cost one token
#   what they save the next). At next_n 2 it was 0.98-1.03x then; since its tokens' q descriptors are constants
#   (wg::score_halves issues every token of a held tile) 0.93-0.97x in graphs and 0.95-1.01x cold, every logit
#   equal, DeepGEMM beside (H100, bench/results/h100-2026-12-07-s36/, call2: 8 shapes, 1 x 64K ... 128 x 16K).
# - fp4 (the cp.async variant, its tile converted into the A registers for every token anyway), on the ring of
#   READER_WG_KEY_REGISTER_STAGES: against the shipped cubin (3 stages, each token's m64n64 group waited for
#   before its sums), one process, the same tensors (H100, bench/results/h100-2026-12-07-s34/, call1): next_n 4
#   0.71x its time at 32 x 64K and at 128 x 16K uniform in graphs (271.8 against 382.7 us, 144.1 against
#   203.8), 0.90x at 1 x 64K; next_n 2 0.95x and 0.93x; next_n 1 1.00x (108.1 against 108.0 us), so next_n 1
#   keeps the shipped cubin. Either change alone gives next_n 4 0.80x: 2 stages leave room for 3 CTAs an SM
#   where next_n 4's q (64 KB of bf16) leaves 2 on 3 stages.
READER_WG_KEY_REGISTER_TOKENS: dict[str, int] = {"fp8_e4m3": 2, "fp4_e2m1": 2}
READER_WG_KEY_REGISTER_STAGES: dict[str, int] = {"fp4_e2m1": 2}  # the cp.async ring those launches run on


def reader_wg_key_tune(lay: Layout, tune: dict[str, int] | None, next_n: int) -> dict[str, int] | None:
    """`tune` plus the keys-in-registers cubin (on READER_WG_KEY_REGISTER_STAGES' ring where the key dtype has one
    and `tune` fixes none) for a launch of next_n >= READER_WG_KEY_REGISTER_TOKENS' entry, unless `tune` fixes
    kReaderWgKeyRegisters or that cubin would not read the layout; `tune` otherwise."""
    dtype = lay.spec.store.dtype
    least = READER_WG_KEY_REGISTER_TOKENS.get(dtype)
    if least is None or next_n < least or (tune and "kReaderWgKeyRegisters" in tune):
        return tune
    ring = READER_WG_KEY_REGISTER_STAGES.get(dtype)
    keyed = {**({"kReaderWgStages": ring} if ring else {}), **(tune or {}), "kReaderWgKeyRegisters": 1}
    return keyed if reader_wg_key_registers(lay, keyed) else tune


def reader_wg_shape_tune(lay: Layout, tune: dict[str, int] | None, batch: int, next_n: int, max_seq_len: int,
                         sm_count: int, l2_bytes: int = 0) -> dict[str, int] | None:
    """The tuning a wgmma-path launch of this shape runs (the result None: the shipped default):
    - the TMA variant: `tune` plus the pair cubin where next_n >= 2 (reader_wg_pair_tune), the keys in registers
      where next_n reaches READER_WG_KEY_REGISTER_TOKENS (reader_wg_key_tune), plus the
      evict-first L2 policy where the launch's keys overflow the L2 (reader_wg_evict_first; `l2_bytes` 0:
      unknown, never), unless `tune` fixes kReaderWgEvictFirst;
    - the cp.async variant: `tune` plus the keys in registers where next_n reaches READER_WG_KEY_REGISTER_TOKENS
      (reader_wg_key_tune, fp4's MTP launches); then that itself where it fixes kReaderWgStages or the key dtype
      has no shape rule (READER_WG_SHAPE_STAGES), else plus this shape's stages."""
    if reader_wg_tma(lay, tune):
        tune = reader_wg_key_tune(lay, reader_wg_pair_tune(lay, tune, next_n), next_n)
        if (tune and "kReaderWgEvictFirst" in tune) or not reader_wg_evict_first(lay, batch, next_n, max_seq_len,
                                                                                  l2_bytes, tune):
            return tune
        return {**(tune or {}), "kReaderWgEvictFirst": 1}
    tune = reader_wg_key_tune(lay, tune, next_n)
    rule = READER_WG_SHAPE_STAGES.get(lay.spec.store.dtype)
    if rule is None or (tune and "kReaderWgStages" in tune):
        return tune
    shallow, min_keys_per_sm = rule
    groups = -(-max(1, next_n) // max(1, reader_wg_tokens_per_cta(lay, reader_wg_stages(lay, tune))))
    if batch * groups * max_seq_len >= min_keys_per_sm * max(1, sm_count):
        return tune
    return {**(tune or {}), "kReaderWgStages": shallow}


# The TMA variant's L2 policy per launch. Keys are read once per launch (per token group); copied under an
# evict-first policy they displace each other rather than the lines the launch reuses, so cold calls get
# faster; but back-to-back calls on the same keys (CUDA-graph replays) then no longer find them in the L2.
# So the policy is used only where the launch's keys cannot stay in the L2 anyway: more key bytes than the
# L2 holds (as torch reports it). Measured both ways, with and without the rule:
# bench/results/h200-2026-11-30/tma1/README.md (runs 8 and 9).
def reader_wg_evict_first(lay: Layout, batch: int, next_n: int, max_seq_len: int, l2_bytes: int,
                          tune: dict[str, int] | None = None) -> bool:
    """Does a TMA-variant launch of this shape read more key bytes than an L2 of `l2_bytes` holds?"""
    groups = -(-max(1, next_n) // max(1, reader_wg_tokens_per_cta(lay, reader_wg_stages(lay, tune), tma=True)))
    return l2_bytes > 0 and batch * groups * max_seq_len * lay.bytes_per_token > l2_bytes


def reader_keys_per_cta(batch: int, token_groups: int, max_seq_len: int, sm_count: int) -> int:
    """Keys one CTA scores: the whole problem in about 16 CTAs per SM (several waves of 2-4 resident
    CTAs: a short tail; B = 1 short contexts still spread over the GPU), a power-of-two multiple of
    the keys a CTA scores per iteration, at most 8192."""
    step = READER_WARPS * READER_WARP_KEYS
    work = max(1, batch * token_groups) * max(1, max_seq_len)
    want = -(-work // max(1, 16 * sm_count))
    per = step
    while per < want and per < 8192:
        per *= 2
    return per


def reader_launch(spec: Spec, batch: int, next_n: int, max_seq_len: int, sm_count: int, *, wgmma: bool = False,
                  tune: dict[str, int] | None = None, lay: Layout | None = None
                  ) -> tuple[tuple[int, int, int], int, int, int]:
    """((grid x, y, z), threads, dynamic shared bytes, keys per CTA) of an indexer_logits launch:
    x splits the context, y is the sequence, z the groups of query tokens. `wgmma`: the cubin runs the
    sm_90a path (kgen.reader_layout.runs_wgmma); `tune`: the tuning it was rendered with; `lay`: compute(spec)
    when the caller has it."""
    if wgmma:
        return reader_wg_launch(spec, batch, next_n, max_seq_len, sm_count, tune, lay)
    tpc = reader_tokens_per_cta(spec)
    groups = -(-next_n // tpc)
    per = reader_keys_per_cta(batch, groups, max_seq_len, sm_count)
    grid = (max(1, -(-max_seq_len // per)), batch, groups)
    return grid, reader_threads(), min(tpc, next_n) * reader_q_token_bytes(spec), per


def reader_wg_launch(spec: Spec, batch: int, next_n: int, max_seq_len: int, sm_count: int,
                     tune: dict[str, int] | None = None, lay: Layout | None = None
                     ) -> tuple[tuple[int, int, int], int, int, int]:
    """The wgmma path's launch: one wave of a 1-D grid, the CTAs an SM holds at once times the SMs (no
    more than the tiles the longest rows could have: B x token groups x ceil(max_seq_len / 64)). Each CTA
    derives its share of the work from seq_lens in the kernel (kgen::detail::wg::Work): an even split of
    the tiles the sequences really have, then of the -inf columns past them, so ragged batches keep every SM
    busy and nothing here depends on the lengths (a captured CUDA graph replays for any). A DRAM-bound
    kernel gains nothing from a second wave but a tail. The fourth value: the keys one CTA scores where every
    sequence has max_seq_len of them."""
    lay = lay or compute(spec)
    stages = reader_wg_stages(lay, tune)
    tma = reader_wg_tma(lay, tune)
    consumers = reader_wg_consumers(lay, tune)
    tpc = reader_wg_tokens_per_cta(lay, stages, tma)
    ntok = min(tpc, next_n)
    groups = -(-next_n // tpc)
    slots = max(1, sm_count) * reader_wg_ctas_per_sm(lay, ntok, stages, tma, consumers, reader_wg_pairs(lay, tune),
                                                     reader_wg_split(lay, tune))
    tiles = max(1, batch * groups * -(-max_seq_len // READER_WG_TILE_KEYS))
    ctas = max(1, min(slots, tiles))
    per = -(-tiles // ctas) * READER_WG_TILE_KEYS
    return (ctas, 1, 1), reader_wg_threads(lay, tune), reader_wg_smem_bytes(lay, ntok, stages, tma), per


# ---------------------------------------------------------------------------------------------
# the launch of checked arguments (kgen.abi.INDEXER_LOGITS's grid, shared memory and tensor map ask here)

_launches: dict[tuple, tuple] = {}  # launch_of's and launch_tune's memo: key -> (spec, value)


def _memo(key: tuple, spec: Spec, compute: Callable[[], Any]) -> Any:
    """The value _launches holds for `key` (which starts with id(spec)) while it belongs to this spec
    object: the memo keeps the spec, so its id is not reused meanwhile. Else compute()'s, stored."""
    hit = _launches.get(key)
    if hit is not None and hit[0] is spec:
        return hit[1]
    if len(_launches) >= 256:
        _launches.clear()
    value = compute()
    _launches[key] = (spec, value)
    return value


def device_of(args) -> DeviceFacts:
    """The device facts the checked arguments carry (NO_DEVICE: arguments checked for no GPU)."""
    return args.device or NO_DEVICE


def _sizes(args) -> tuple[int, int, int, int]:
    """(B, next_n, max_seq_len, SMs of q's device): what a reader launch's shape depends on."""
    return (int(args.dims["B"]), int(args.dims["next_n"]), int(args.dims["max_seq_len"]), device_of(args).sm_count)


def _tune_key(tune: dict | None) -> tuple:
    return tuple(sorted(tune.items())) if tune else ()


def _launch_entry(args) -> tuple:
    """((grid, threads, dynamic shared bytes), wgmma) of the checked arguments, memoized."""
    spec, sizes = args.spec, _sizes(args)

    def compute() -> tuple:
        wgmma = runs_wgmma(spec, args.target, args.tune, args.layout)
        grid, threads, smem, _ = reader_launch(spec, *sizes, wgmma=wgmma, tune=args.tune, lay=args.layout)
        return (grid, threads, smem), wgmma

    return _memo((id(spec), "launch", args.target, _tune_key(args.tune), *sizes), spec, compute)


def launch_of(args) -> tuple:
    """(grid (x, y, z), threads, dynamic shared bytes) of the checked arguments `args` (kgen.abi.Args),
    for the path the loaded cubin runs (args.target, args.tune). Memoized per spec object and sizes."""
    return _launch_entry(args)[0]


def launch_wgmma(args) -> bool:
    """Does the launch of `args` run the wgmma path (kgen.abi: the SM's largest shared carveout)?"""
    return _launch_entry(args)[1]


def launch_tma(args) -> bool:
    """Does the launch of the checked arguments `args` run the TMA variant (args.target, args.tune: the
    loaded cubin's)? Memoized per spec object, target and tuning."""
    spec, target = args.spec, args.target
    if target is None:  # the CPU emulation, or arguments no cubin was picked for yet
        return False
    return _memo((id(spec), "tma", target, _tune_key(args.tune)), spec,
                 lambda: runs_tma(spec, target, args.tune, args.layout))


def launch_tune(args, arch: str, tune: dict | None = None) -> dict | None:
    """The tuning (the cubin) the checked call `args` runs on a GPU of `arch`: on the wgmma path the ring
    of its shape (reader_wg_shape_tune: fewer stages for launches that stage few keys per SM), elsewhere
    `tune` as given. Memoized with the launch shape."""
    spec, sizes = args.spec, _sizes(args)
    l2 = device_of(args).l2_bytes

    def compute() -> dict | None:
        if not runs_wgmma(spec, arch, tune, args.layout):
            return tune
        return reader_wg_shape_tune(args.layout, tune, *sizes, l2)

    return _memo((id(spec), "tune", arch, _tune_key(tune), *sizes, l2), spec, compute)


def ring_tunes(spec: Spec, tune: dict | None) -> list[dict | None]:
    """`tune` and the tunings reader_wg_shape_tune picks for it at other shapes (the cp.async variant's ring
    of small launches, the TMA variant's L2 policy of large ones, its pair and keys-in-registers cubins of MTP
    launches): the cubins a run of `tune` may load."""
    if not readable(spec) or not reader_wg_enabled(compute(spec), tune):
        return [tune]
    lay = compute(spec)
    shapes = [(1, 1, 1, 1, 1 << 40), (1 << 10, 1, 1 << 20, 1, 1)]  # one key, an L2 it fits; more than SMs and L2 hold
    tunes = [tune] + [reader_wg_shape_tune(lay, tune, b, n, k, sms, l2) for n in (1, 2, READER_WG_MAX_TOKENS)
                      for b, _, k, sms, l2 in shapes]
    return [t for i, t in enumerate(tunes) if t not in tunes[:i]]
