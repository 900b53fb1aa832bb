"""The indexer top-k's numbers: its launch (one CTA per query row, or a cluster of CTAs for a long row), its
radix digits and its shared memory.

`kgen::indexer_topk` (templates/include/kgen/indexer_topk.cuh) selects the k largest of each row's visible
fp32 logits by a radix select on order-preserving 32-bit keys (docs/reader.md, "Top-k"). Every number it
builds in lives here and reaches the header through the variant's rendered config (kgen.render), as the
reader's do through kgen.reader_layout.reader_constants:

* TOPK_THREADS threads per CTA; the grid is (cluster, rows, 1) (more than 65535 rows: (cluster, 65535, z)) and
  a launch's cluster dimension is (grid.x, 1, 1), so `blockIdx.x` is a CTA's rank in its row's cluster;
* every row first: a histogram of TOPK_COARSE_BITS-bit coarse bins (a logit's sign, its octave within a window
  of 2 ** (TOPK_COARSE_BITS - 1 - TOPK_COARSE_MANTISSA_BITS) octaves from 2 ** TOPK_COARSE_LOW_EXPONENT, and its
  top TOPK_COARSE_MANTISSA_BITS mantissa bits), whose threshold bin's keys, when at most TOPK_CANDIDATES (one
  CTA) or TOPK_CLUSTER_CANDIDATES (a cluster, gathered in rank 0) of them, are refined in shared memory
  TOPK_REFINE_BITS bits at a time (the values' bits, then, among keys of the k-th value, the indices: the lower
  index wins), or, when at most TOPK_RANK_CAP, ranked by a thread each (the same order);
* else, one CTA per row (`topk_cluster` = 1): the global digits, TOPK_FIRST_BITS bits first, then
  TOPK_NEXT_BITS bits per further read of the row while the threshold bin holds more than TOPK_CANDIDATES keys;
* else, a cluster of C CTAs per row (sm_90+): each CTA holds its slice in shared memory where one block's shared
  memory has room for it (topk_slice_cap), else reads it again from the row in each pass; TOPK_CLUSTER_BITS bits per
  digit, histograms merged through distributed shared memory;
* the histogram holds 2 ** max(digit bits) counters; TOPK_STATE_BYTES of scalars ahead of it.
"""

from __future__ import annotations

from collections.abc import Callable

from .arch import CLUSTER_PORTABLE, SM90

TOPK_THREADS = 1024
TOPK_COARSE_BITS = 11  # the sign and 10 bits of magnitude
TOPK_COARSE_MANTISSA_BITS = 5  # 32 bins per octave
TOPK_COARSE_LOW_EXPONENT = -16  # the window of 32 octaves: [2^-16, 2^16), smaller and larger magnitudes clamped
TOPK_FIRST_BITS = 12
TOPK_NEXT_BITS = 10
TOPK_REFINE_BITS = 11
TOPK_CANDIDATES = 6144
TOPK_RANK_CAP = 512  # at most this many candidates: a thread each counts those ahead of it (n^2 comparisons)
TOPK_VECTOR_UNROLL = 4  # float4 loads in flight per thread in a row read
TOPK_BINS = 1 << max(TOPK_FIRST_BITS, TOPK_NEXT_BITS, TOPK_REFINE_BITS)
TOPK_MAX_K = 1 << 16  # the largest k the op takes (the engines' are 512 and 2048)
TOPK_STATE_BYTES = 256  # kgen::topk::Shared (counters, the threshold, one sum per warp), at offset 0

# the cluster path: keys per CTA the cluster size aims at, the most a CTA holds, the largest (portable) cluster
TOPK_CLUSTER_BITS = 11
TOPK_CLUSTER_BINS = 1 << TOPK_CLUSTER_BITS
# the most keys a CTA of a cluster takes: since a cluster merges its coarse histograms through rank 0, the more CTAs
# the better up to 4K keys each. H100, two rounds (bench/results/h100-2026-12-06-s22, call1): 4096 against 8192, the
# top-k alone 0.88x at 1 and 8 rows of 32K keys (8 CTAs of 4K against 4 of 8K), 0.95x at 1 x 64K (16 against 8), 0.91x
# at 1 x 16K +-30 %, within 1 % at every other shape of B 1, 8, 32 x 4K-64K
TOPK_SLICE_KEYS = 4096
# the longest row the one-CTA path takes: a cluster's barriers and merges cost more than one SM's reads of a row this
# long. H100, two rounds (bench/results/h100-2026-12-05-s19, call4): rows of 12K keys 10.5-10.8 us on clusters of 2
# against 7.4-7.8 on one CTA, 16K 10.9-11.5 against 8.4-9.0; rows of 24K on one CTA 1.04-1.05x the time of clusters
# of 4 at 1 and 8 rows (1.16-1.17x for rows up to 32K), 0.87x at 32 and 64 rows (where the plan halves clusters for
# the SMs): the bound stays at 16K. With the merge through rank 0, rows of 16K on clusters of 2 still take 1.18-1.20x
# one CTA's time at 1, 8 and 32 rows (bench/results/h100-2026-12-06-s22, call1)
TOPK_ONE_CTA_KEYS = 16384
TOPK_CLUSTER_CANDIDATES = 4096  # the coarse threshold bin's (key, index) pairs rank 0 gathers from the cluster
TOPK_SHARED_LIMIT = SM90.block_shared_bytes  # sm_90's (and sm_100's) opt-in dynamic shared memory per block
# a cluster CTA's shared memory ahead of its slice: the state, three histograms (two a digit's, the merged one)
# and rank 0's coarse candidates (uint32 key, int32 index)
TOPK_CLUSTER_FIXED_BYTES = TOPK_STATE_BYTES + 3 * 4 * TOPK_CLUSTER_BINS + 8 * TOPK_CLUSTER_CANDIDATES
# the kernel's bound on CTAs per row, a wide cluster: more than the portable 8 (an sm_90 GPC holds up to 16 of these
# 1024-thread CTAs), launched only where the launch stack set the function's non-portable attribute and the driver
# said how many such clusters run at once (kgen.arch.DeviceFacts.cluster_counts)
TOPK_CLUSTER_MAX = 16
TOPK_CLUSTER_PORTABLE = CLUSTER_PORTABLE
# the sizes a plan picks from (powers of two): the launch stack asks the driver how many of each run at once
TOPK_CLUSTER_SIZES = tuple(1 << i for i in range(1, TOPK_CLUSTER_MAX.bit_length()))
# the fewest keys a CTA of a wide cluster takes. H200, one process, three rounds (bench/results/h200-2026-12-05-s15,
# call2): 16 CTAs of 16K keys (rows of 256K) cut the top-k 15-17 % against 8 of 32K; with the merge through rank 0,
# 16 of 4K (rows of 64K) cut it 5 % against 8 of 8K (H100, s22's call1 above).
TOPK_WIDE_SLICE_KEYS = TOPK_SLICE_KEYS


def topk_slice_cap(shared_limit: int = TOPK_SHARED_LIMIT) -> int:
    """The most keys a cluster CTA's slice holds within `shared_limit` bytes of dynamic shared memory (whole
    16-B groups of four)."""
    return max(0, (int(shared_limit) - TOPK_CLUSTER_FIXED_BYTES) // 16 * 4)


TOPK_SLICE_CAP = topk_slice_cap()  # on sm_90 and sm_100
TOPK_MAX_GRID_Y = 65535  # CUDA's limit on gridDim.y (and z)

# dynamic shared memory of the one-CTA path: the state, the histogram (int32 counters), the candidates' keys
# (uint32) and indices (int32)
TOPK_SHARED_BYTES = TOPK_STATE_BYTES + 4 * TOPK_BINS + 8 * TOPK_CANDIDATES


def topk_constants() -> dict[str, int]:
    """What the top-k's config adds to the writer's constants (kgen.render substitutes them)."""
    return {
        "kTopkThreads": TOPK_THREADS,
        "kTopkCoarseBits": TOPK_COARSE_BITS,
        "kTopkCoarseMantissaBits": TOPK_COARSE_MANTISSA_BITS,
        "kTopkCoarseLowExponent": TOPK_COARSE_LOW_EXPONENT,
        "kTopkFirstBits": TOPK_FIRST_BITS,
        "kTopkNextBits": TOPK_NEXT_BITS,
        "kTopkRefineBits": TOPK_REFINE_BITS,
        "kTopkCandidates": TOPK_CANDIDATES,
        "kTopkRankCap": TOPK_RANK_CAP,
        "kTopkBins": TOPK_BINS,
        "kTopkUnroll": TOPK_VECTOR_UNROLL,
        "kTopkStateBytes": TOPK_STATE_BYTES,
        "kTopkSharedBytes": TOPK_SHARED_BYTES,
        "kTopkClusterBits": TOPK_CLUSTER_BITS,
        "kTopkClusterBins": TOPK_CLUSTER_BINS,
        "kTopkClusterFixedBytes": TOPK_CLUSTER_FIXED_BYTES,
        "kTopkClusterCandidates": TOPK_CLUSTER_CANDIDATES,
        "kTopkClusterMax": TOPK_CLUSTER_MAX,
    }


def topk_slice(max_seq_len: int, cluster: int) -> int:
    """Keys of a row one CTA of a `cluster` holds: ceil(max_seq_len / cluster), rounded up to four (the kernel
    computes the same from the row's visible length, at most this)."""
    per = -(-max(int(max_seq_len), 0) // max(int(cluster), 1))
    return -(-per // 4) * 4


def topk_cluster(max_seq_len: int, rows: int = 1, sm_count: int | None = None, *, clusters: bool = True,
                 at_once: Callable[[int], int | None] | None = None) -> int:
    """CTAs per row: the smallest power of two giving each at most TOPK_SLICE_KEYS keys, at most TOPK_CLUSTER_PORTABLE,
    halved until the rows' clusters all run at once (one 1024-thread CTA per SM); 1 (the one-CTA path) for rows of at
    most TOPK_ONE_CTA_KEYS keys and on a device without `clusters` (before sm_90). A second wave of clusters costs more
    than the split saves (H200, 32 rows of 64K keys, 55.9 us on clusters of 8 against 32.6 on one CTA each,
    bench/results/topk2-2026-12-03/run1; where they fit, they pay: 64 rows of 64K, 27.5 on clusters of 2 against
    32.8, bench/results/h200-2026-12-03-s8/callB). How many run at once is `at_once(size)`, the driver's answer for
    the kernel (kgen.arch.DeviceFacts.clusters_at_once: a cluster fits within one GPC), where it gave one; else
    `sm_count` // size (H200: 30 clusters of 4, not 33; 16 rows of 64K keys 12.7 us on clusters of 4 against 19.2
    on 8, 32 rows 18.3 on 2 against 23.2 on 4, bench/results/h200-2026-12-05-s17). A slice past what a block's
    shared memory holds is read from the row in each pass (topk_shared_bytes), still on the cluster's SMs.

    A row of TOPK_CLUSTER_PORTABLE CTAs runs on TOPK_CLUSTER_MAX instead (a wide cluster: SGLang 0.5.23's top-k runs a
    1 x 64K row on 16 CTAs) where each of them still takes TOPK_WIDE_SLICE_KEYS keys and the driver said that every
    row's wide cluster runs at once."""
    rows = int(rows)
    told = at_once or (lambda size: None)

    def fits(size: int) -> bool:
        count = told(size)
        if count:  # the driver's answer
            return rows <= count
        return size <= TOPK_CLUSTER_PORTABLE and (sm_count is None or rows * size <= int(sm_count))

    if max_seq_len <= TOPK_ONE_CTA_KEYS:
        return 1
    cluster = 1
    while clusters and cluster < TOPK_CLUSTER_PORTABLE and topk_slice(max_seq_len, cluster) > TOPK_SLICE_KEYS:
        cluster *= 2
    if (cluster == TOPK_CLUSTER_PORTABLE and topk_slice(max_seq_len, TOPK_CLUSTER_MAX) >= TOPK_WIDE_SLICE_KEYS
            and fits(TOPK_CLUSTER_MAX)):  # a wide size fits only by the driver's answer
        return TOPK_CLUSTER_MAX
    while cluster > 1 and not fits(cluster):
        cluster //= 2
    return cluster


def topk_shared_bytes(max_seq_len: int, cluster: int | None = None, shared_limit: int = TOPK_SHARED_LIMIT) -> int:
    """Dynamic shared memory of a launch: the one-CTA path's, or the cluster path's: the state, three histograms
    (two a digit's and the merged one), rank 0's coarse candidates, then the slice's values where they fit
    `shared_limit` (the kernel keeps a row's slice in shared memory exactly when the launch has room for it)."""
    cluster = topk_cluster(max_seq_len) if cluster is None else int(cluster)
    if cluster <= 1:
        return TOPK_SHARED_BYTES
    slice_keys = topk_slice(max_seq_len, cluster)
    held = slice_keys if slice_keys <= topk_slice_cap(shared_limit) else 0
    return TOPK_CLUSTER_FIXED_BYTES + 4 * held


def topk_grid(rows: int, max_seq_len: int = 0, cluster: int | None = None, sm_count: int | None = None, *,
              clusters: bool = True, at_once: Callable[[int], int | None] | None = None
              ) -> tuple[tuple[int, int, int], int]:
    """((cluster, y, z) blocks, threads per block) of a launch over `rows` query rows: row = y + gridDim.y * z,
    `cluster` CTAs per row (default: topk_cluster(max_seq_len, rows, sm_count, clusters=, at_once=)); the launch's
    cluster dimension is (grid.x, 1, 1)."""
    if cluster is None:
        cluster = topk_cluster(max_seq_len, rows, sm_count, clusters=clusters, at_once=at_once)
    rows = int(rows)
    y = min(rows, TOPK_MAX_GRID_Y)
    z = -(-rows // y) if y else 0
    return (int(cluster), y, z), TOPK_THREADS
