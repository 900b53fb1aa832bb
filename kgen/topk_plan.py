"""The indexer top-k's numbers: its launch (one CTA per query row), its radix digits and its shared memory.

`kgen::indexer_topk` (templates/include/kgen/indexer_topk.cuh) selects the k largest of each row's visible
fp32 logits by a radix select on order-preserving 32-bit keys (docs/reader.md, "Top-k"). Every number it
builds in lives here and reaches the header through the variant's rendered config (kgen.render), as the
reader's do through kgen.reader_layout.reader_constants:

* TOPK_THREADS threads per CTA, one CTA per row (B * next_n rows);
* the global digits: TOPK_FIRST_BITS bits first (the histogram the row's first read builds), then
  TOPK_NEXT_BITS bits per further read while the threshold bin holds more than TOPK_CANDIDATES keys;
* TOPK_CANDIDATES (key, index) pairs of the threshold bin kept in shared memory once they fit, refined
  there TOPK_REFINE_BITS bits at a time (the values' low bits, then, among keys of the k-th value, the
  indices: the lower index wins);
* the histogram holds 2 ** max(digit bits) counters.
"""

from __future__ import annotations

TOPK_THREADS = 1024
TOPK_FIRST_BITS = 12
TOPK_NEXT_BITS = 10
TOPK_REFINE_BITS = 11
TOPK_CANDIDATES = 6144
TOPK_VECTOR_UNROLL = 2  # float4 loads in flight per thread in a row read
TOPK_BINS = 1 << max(TOPK_FIRST_BITS, TOPK_NEXT_BITS, TOPK_REFINE_BITS)
TOPK_MAX_K = 1 << 16  # the largest k the op takes (the engines' are 512 and 2048)

# dynamic shared memory of a CTA: the histogram (int32 counters), the candidates' keys (uint32) and indices (int32)
TOPK_SHARED_BYTES = 4 * TOPK_BINS + 8 * TOPK_CANDIDATES


def topk_constants() -> dict[str, int]:
    """What the top-k's config adds to the writer's constants (kgen.render substitutes them)."""
    return {
        "kTopkThreads": TOPK_THREADS,
        "kTopkFirstBits": TOPK_FIRST_BITS,
        "kTopkNextBits": TOPK_NEXT_BITS,
        "kTopkRefineBits": TOPK_REFINE_BITS,
        "kTopkCandidates": TOPK_CANDIDATES,
        "kTopkBins": TOPK_BINS,
        "kTopkUnroll": TOPK_VECTOR_UNROLL,
        "kTopkSharedBytes": TOPK_SHARED_BYTES,
    }


def topk_grid(rows: int) -> tuple[int, int]:
    """(blocks, threads per block) of a launch over `rows` query rows: one CTA per row."""
    return rows, TOPK_THREADS
