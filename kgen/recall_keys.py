"""`kgen recall --keys FILE`: a user's keys (and optionally queries and weights) read from a safetensors or
torch .pt file, checked before any measurement: a regular file (a FIFO would block the read), the named tensors of
the right rank, dense floating-point dtypes, no empty dim, finite in float32 and within MAX_KEY_MAGNITUDE, the
shapes agreeing with each other and the variants' head_dim. Only the rows a run uses are read (safetensors: from their
offsets; .pt: a memory map). Every failure is one KgenError naming the file and the tensor (docs/recall.md)."""

from __future__ import annotations

import json
import math
import os
import stat
from pathlib import Path
from typing import Any

from .diagnostics import KgenError, Problem
from .files import file_kind

MAX_KEY_MAGNITUDE = 1e30  # |value| of a user key or query: the store's Hadamard and scales stay finite in fp32
_KEY_DTYPES = ("float16", "bfloat16", "float32", "float64")
_ST_DTYPES = {"F64": "float64", "F32": "float32", "F16": "float16", "BF16": "bfloat16"}
_ST_SIZES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "F8_E4M3": 1, "F8_E5M2": 1, "I64": 8, "I32": 4, "I16": 2,
             "I8": 1, "U8": 1, "BOOL": 1}
MAX_ST_HEADER = 100 << 20  # the safetensors format's own bound on its JSON header


def _keys_problem(path: Path, msg: str, code: int = 1) -> KgenError:
    return KgenError([Problem("recall-keys", f"{path}: {msg}")], exit_code=code)


def _check_keys_path(path: Path) -> None:
    """A regular file, before anything opens it (a FIFO would block the read)."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise _keys_problem(path, "no such file", 2) from None
    except OSError as e:
        raise _keys_problem(path, f"cannot read it ({e.strerror or e})", 2) from None
    if not stat.S_ISREG(st.st_mode):
        raise _keys_problem(path, f"is {file_kind(st.st_mode)}, not a regular file")


def keys_file_rows(path: Path) -> int:
    """How many keys a --keys file holds, read from its header (safetensors) or a memory map (.pt):
    nothing of the data is read."""
    data = _open_keys(path, rows=0)
    if not isinstance(data, dict):
        return 0
    shape = data.get("__shapes__", {}).get("keys") or list(getattr(data.get("keys"), "shape", []))
    return int(shape[0]) if shape else 0


def _open_keys(path: Path, rows: int | None):
    import torch

    _check_keys_path(path)
    try:
        if path.suffix == ".safetensors":
            return read_safetensors(path, rows)
        try:  # a memory map: only the rows a run uses are read
            data = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
        except RuntimeError:  # the legacy (non-zip) format cannot be mapped
            data = torch.load(path, map_location="cpu", weights_only=True)
        return {"keys": data} if isinstance(data, torch.Tensor) else data
    except KgenError:
        raise
    except Exception as e:  # noqa: BLE001 - any unreadable file is the user's input error
        kind = "safetensors" if path.suffix == ".safetensors" else "a torch .pt file"
        raise _keys_problem(path, f"cannot read it as {kind} ({type(e).__name__}: {e})") from None


def load_keys_file(path: Path, head_dim: int | None = None, rows: int | None = None) -> dict:
    """{"keys": [N, D], "queries": [Q, H, D] or None, "weights": [Q, H] or None} (CPU float tensors)
    from a safetensors or torch .pt file; KgenError naming the file and the tensor otherwise. `rows`:
    read only the first `rows` keys (what the run's largest context uses)."""
    import torch

    bad = lambda msg, code=1: _keys_problem(path, msg, code)  # noqa: E731
    data = _open_keys(path, rows)
    if not isinstance(data, dict) or "keys" not in data:
        raise bad("expected a tensor named 'keys' [N, head_dim] (and optionally 'queries' [Q, H, head_dim], "
                  "'weights' [Q, H])")
    out: dict = {}
    for name, ndim in (("keys", 2), ("queries", 3), ("weights", 2)):
        t = data.get(name)
        if t is None:
            out[name] = None
            continue
        if not isinstance(t, torch.Tensor) or t.dim() != ndim or not t.is_floating_point():
            raise bad(f"'{name}' must be a floating-point tensor of {ndim} dims, got "
                      f"{getattr(t, 'dtype', type(t).__name__)} {list(getattr(t, 'shape', []))}")
        if t.layout != torch.strided or str(t.dtype).removeprefix("torch.") not in _KEY_DTYPES:
            raise bad(f"'{name}' is {str(t.dtype).removeprefix('torch.')} ({str(t.layout).removeprefix('torch.')}); "
                      f"kgen reads dense {', '.join(_KEY_DTYPES)} tensors")
        if 0 in t.shape:
            raise bad(f"'{name}' is {list(t.shape)}: every dim must be at least 1")
        if name == "keys" and rows is not None:
            t = t[:rows]
        t = t.float()
        if not bool(torch.isfinite(t).all()):
            raise bad(f"'{name}' holds non-finite values in float32 (NaN, inf, or beyond 3.4e38)")
        biggest = float(t.abs().max())
        if biggest > MAX_KEY_MAGNITUDE:
            raise bad(f"'{name}' holds values up to {biggest:.3g}; kgen reads keys and queries up to "
                      f"{MAX_KEY_MAGNITUDE:.0e} (the store's fp32 math overflows beyond)")
        out[name] = t
    keys, q, w = out["keys"], out["queries"], out["weights"]
    if head_dim is not None and keys.shape[1] != head_dim:
        raise bad(f"'keys' is [{keys.shape[0]}, {keys.shape[1]}] but the variants have head_dim {head_dim}")
    if q is not None:
        if q.shape[2] != keys.shape[1]:
            raise bad(f"'queries' is {list(q.shape)}: its last dim must be head_dim {keys.shape[1]}")
        if w is None:
            out["weights"] = torch.full(q.shape[:2], 1.0 / math.sqrt(q.shape[1]))
        elif list(w.shape) != list(q.shape[:2]):
            raise bad(f"'weights' is {list(w.shape)}, expected [Q, H] = {list(q.shape[:2])}")
    elif w is not None:
        raise bad("'weights' given without 'queries'")
    return out


def read_safetensors(path: Path, rows: int | None = None) -> dict:
    """The floating-point tensors of a safetensors file (8-byte little-endian header length, a JSON
    header {name: {dtype, shape, data_offsets}}, then the raw little-endian data), read from their
    offsets: `rows` keeps only the first rows of 'keys' (0: shapes only, no data)."""
    import torch

    with open(path, "rb") as f:
        size = f.seek(0, 2)
        f.seek(0)
        raw = f.read(8)
        if len(raw) < 8:
            raise ValueError("shorter than a safetensors header")
        n = int.from_bytes(raw, "little")
        if n > min(size - 8, MAX_ST_HEADER):
            raise ValueError(f"header of {n} B in a {size}-B file")
        header = json.loads(f.read(n))
        if not isinstance(header, dict):
            raise ValueError("the header is not a JSON object")
        base = 8 + n
        out: dict[str, Any] = {}
        for name, info in header.items():
            if name == "__metadata__":
                continue
            shape, offsets, code = (info.get("shape"), info.get("data_offsets"), info.get("dtype")) \
                if isinstance(info, dict) else (None, None, None)
            if not (isinstance(shape, list) and all(isinstance(d, int) and d >= 0 for d in shape)
                    and isinstance(offsets, list) and len(offsets) == 2 and all(isinstance(o, int) for o in offsets)
                    and 0 <= offsets[0] <= offsets[1] <= size - base and code in _ST_SIZES):
                raise ValueError(f"tensor '{name}': a malformed header entry")
            if offsets[1] - offsets[0] != math.prod(shape) * _ST_SIZES[code]:
                raise ValueError(f"tensor '{name}': {offsets[1] - offsets[0]} B of data for shape {shape} {code}")
            dt = _ST_DTYPES.get(code)
            if dt is None:
                out[name] = f"unsupported dtype {code}"
                continue
            out.setdefault("__shapes__", {})[name] = list(shape)
            if name == "keys" and rows is not None and shape:
                shape = [min(rows, shape[0]), *shape[1:]]
            nbytes = math.prod(shape) * _ST_SIZES[code]
            f.seek(base + offsets[0])
            buf = bytearray(f.read(nbytes))
            t = torch.frombuffer(buf, dtype=getattr(torch, dt)) if buf else torch.empty(0, dtype=getattr(torch, dt))
            out[name] = t.reshape(shape)
    return out
