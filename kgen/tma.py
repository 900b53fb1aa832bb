"""Tensor maps of a paged cache: the CUtensorMap through which the reader's TMA variant copies key tiles.

One job: encode, with the driver's cuTensorMapEncodeTiled, the map of a cache tensor's key region.
`cache_map_geometry(lay, num_pages)` is the pure part (what the map describes, every number from
kgen.layout); `cache_key_map(lay, cache)` encodes it for a tensor's address, memoized: an engine passes
the same cache tensor every decode step, and the op runs this per call (kgen.indexer.cache_map).

The map views the pages as a 4-D uint8 tensor, innermost first:
  [128-B chunk of a key row (READER_WG_CHUNK_BYTES), chunk of the row, key of the page, page]
with byte strides (row_bytes between keys, page_bytes between pages), so one box, {128, 1, 64, 1}, is one
64-key tile's chunk (READER_WG_TILE_KEYS keys of one page: reader_wg_tma_layout requires whole tiles per
page), copied with the 128-B swizzle the wgmma operand reads. Scales (fp8) are not in the map: the
kernel copies them with a plain bulk copy.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

from . import layout as L
from .abi import ArgumentError

RANK = 4
MEMO_MAX = 64  # cache tensors whose maps are kept (an engine has one per layer and device)


@dataclass(frozen=True)
class MapGeometry:
    """What a tensor map of the cache's key region describes (cuTensorMapEncodeTiled's arguments)."""

    dims: tuple[int, ...]  # global dimensions, innermost first (elements = bytes: uint8)
    strides: tuple[int, ...]  # byte strides of dims 1.. (dim 0 is dense)
    box: tuple[int, ...]  # one copy's box, innermost first
    element_strides: tuple[int, ...]


def cache_map_geometry(lay: L.Layout, num_pages: int) -> MapGeometry:
    """The key region of `num_pages` pages of layout `lay` as the TMA variant's map describes it."""
    chunk = L.READER_WG_CHUNK_BYTES
    return MapGeometry(dims=(chunk, L.reader_wg_chunks(lay), lay.page_size, num_pages),
                       strides=(chunk, lay.row_bytes, lay.page_bytes),
                       box=(chunk, 1, L.READER_WG_TILE_KEYS, 1),
                       element_strides=(1,) * RANK)


_memo: dict[tuple, bytes] = {}  # (address, device, num_pages, row, page size, page bytes) -> map


def cache_key_map(lay: L.Layout, cache: Any) -> bytes:
    """The CUtensorMap (kgen.abi.TENSOR_MAP_BYTES bytes) of the key region of `cache` (a CUDA uint8 tensor
    [num_pages, page_bytes] of layout `lay`, checked by kgen.abi: contiguous, 16-B aligned). A map the
    driver refuses is an ArgumentError naming `cache`. Memoized per address, device and geometry."""
    # the key: what the geometry is computed from (a few attribute reads; the geometry itself only on a miss)
    address, num_pages = int(cache.data_ptr()), int(cache.shape[0])
    key = (address, cache.device.index, num_pages, lay.row_bytes, lay.page_size, lay.page_bytes)
    hit = _memo.get(key)
    if hit is not None:
        return hit
    data = encode(address, cache_map_geometry(lay, num_pages))
    if len(_memo) >= MEMO_MAX:
        del _memo[next(iter(_memo))]  # the oldest
    _memo[key] = data
    return data


def encode(address: int, g: MapGeometry) -> bytes:
    """cuTensorMapEncodeTiled of `g` at `address`: uint8, no interleave, 128-B swizzle, 256-B L2
    promotion, no out-of-bounds fill (a tile never leaves its page)."""
    drv = _driver()
    u64, u32 = drv.cuuint64_t, drv.cuuint32_t
    try:
        err, tmap = drv.cuTensorMapEncodeTiled(
            drv.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_UINT8, RANK, address,
            [u64(d) for d in g.dims], [u64(s) for s in g.strides], [u32(b) for b in g.box],
            [u32(e) for e in g.element_strides],
            drv.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
            drv.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_128B,
            drv.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
            drv.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE)
    except Exception as e:  # noqa: BLE001 - no driver library, a value the binding cannot convert
        raise _refused(address, g, f"{type(e).__name__}: {e}") from None
    if err != drv.CUresult.CUDA_SUCCESS:
        raise _refused(address, g, _error_text(drv, err))
    words = [int(w) for w in tmap.opaque]  # 16 x 64 bits (kgen.abi checks the length it packs)
    return struct.pack(f"<{len(words)}Q", *words)


def _refused(address: int, g: MapGeometry, why: str) -> ArgumentError:
    return ArgumentError(f"cache: the driver cannot encode its tensor map ({why}): address {address:#x}, dims "
                         f"{list(g.dims)}, byte strides {list(g.strides)}, box {list(g.box)}",
                         fix="the TMA variant needs a cache the driver can describe (kReaderWgTma 0 reads any)")


def _error_text(drv, err) -> str:
    try:
        return f"{drv.cuGetErrorName(err)[1].decode()}: {drv.cuGetErrorString(err)[1].decode()}"
    except Exception:  # noqa: BLE001 - the message is a nicety
        return repr(err)


def _driver():
    from .runtime import _driver as driver

    return driver()
