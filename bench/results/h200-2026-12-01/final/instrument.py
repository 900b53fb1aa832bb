"""Prints every key copy of the cp.async path's per-row staging whose source lies outside the cache, with
the row's page and the tile (a lab probe for call5; applied to a scratch copy of the header that holds
WgLogits::issue, then indexer_logits.cuh, since the split reader/wg_logits.cuh; never kept)."""
import sys
from pathlib import Path

path = Path(sys.argv[1])
text = path.read_text()
anchor = "      wg::cp16(dst + j * kDstRowStep, src, page ? 16u : 0u);\n"
probe = anchor + (
    "      if (page && (src < p.cache || src >= p.cache + static_cast<long long>(p.num_pages) * kPageBytes))\n"
    "        printf(\"BAD block %d tid %d j %d rows %d k0 %d pair %d slot %d whole %d \"\n"
    "               \"cache %p page %p src %p np %d\\n\",\n"
    "               (int)blockIdx.x, tid, j, pg.rows[j], k0, pg.pair, slot, pg.whole,\n"
    "               p.cache, page, src, p.num_pages);\n")
assert text.count(anchor) == 1
path.write_text(text.replace(anchor, probe))
