"""Tensor maps: the driver's encoding of a CUtensorMap, which the reader's TMA variant copies key tiles through.

One job: encode, with the driver's cuTensorMapEncodeTiled, the map a kernel ABI's TensorMap field
describes (kgen.abi: `geometry(args)`, for the reader the cache's key region, kgen.reader_layout's
`cache_map_geometry`). `encode_map(tensor, geometry)` is the launch stack's encoder (`Args.values(encode=
encode_map)`), memoized per address, device and geometry: an engine passes the same cache tensor every
decode step.
"""

from __future__ import annotations

import struct
from typing import Any

from .abi import ArgumentError
from .launcher import driver
from .reader_layout import MAP_RANK, MapGeometry, cache_map_geometry

__all__ = ["MEMO_MAX", "MapGeometry", "cache_map_geometry", "encode", "encode_map"]

MEMO_MAX = 64  # tensors whose maps are kept (an engine has one cache per layer and device)

_memo: dict[tuple, bytes] = {}  # (address, device, geometry) -> map


def encode_map(tensor: Any, geometry: MapGeometry) -> bytes:
    """The CUtensorMap (kgen.abi.TENSOR_MAP_BYTES bytes) of `geometry` over the data of `tensor` (a CUDA
    tensor checked by kgen.abi: contiguous, 16-B aligned). A map the driver refuses is an ArgumentError
    naming the tensor's argument. Memoized per address, device and geometry."""
    address = int(tensor.data_ptr())
    key = (address, tensor.device.index, geometry)
    hit = _memo.get(key)
    if hit is not None:
        return hit
    data = encode(address, geometry)
    if len(_memo) >= MEMO_MAX:
        del _memo[next(iter(_memo))]  # the oldest
    _memo[key] = data
    return data


def encode(address: int, g: MapGeometry) -> bytes:
    """cuTensorMapEncodeTiled of `g` at `address`: uint8, no interleave, 128-B swizzle, 256-B L2
    promotion, no out-of-bounds fill (a tile never leaves its page)."""
    drv = driver()
    u64, u32 = drv.cuuint64_t, drv.cuuint32_t
    try:
        err, tmap = drv.cuTensorMapEncodeTiled(
            drv.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_UINT8, MAP_RANK, address,
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
