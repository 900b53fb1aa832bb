"""The one table of the dtypes kgen knows: a spec's name, its width, its torch dtype, what a spec may use
it for, and a quantized code's largest finite magnitude.

Every other map of dtypes (kgen.layout's bit widths, the ABI's torch names, the reference's torch
dtypes, the reader's q dtype) is read from here. Pure: torch dtypes are named, never imported.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Dtype:
    name: str  # as a spec writes it
    bits: int
    torch: str | None  # torch's dtype name (None: no torch dtype holds it; fp4 is stored packed as bytes)
    input: bool = False  # a spec's input_dtype
    store: bool = False  # a spec's store.dtype (a key's code)
    quant_max: float | None = None  # a quantized code's largest finite magnitude


DTYPES: dict[str, Dtype] = {d.name: d for d in (
    Dtype("fp32", 32, "float32", input=True),
    Dtype("bf16", 16, "bfloat16", input=True, store=True),
    Dtype("fp16", 16, "float16", input=True, store=True),
    Dtype("fp8_e4m3", 8, "float8_e4m3fn", store=True, quant_max=448.0),
    Dtype("fp4_e2m1", 4, None, store=True, quant_max=6.0),
)}

STORE_BITS = {d.name: d.bits for d in DTYPES.values() if d.store}
INPUT_BYTES = {d.name: d.bits // 8 for d in DTYPES.values() if d.input}
QUANT_MAX = {d.name: d.quant_max for d in DTYPES.values() if d.quant_max is not None}
TORCH_NAME = {d.name: d.torch for d in DTYPES.values() if d.torch is not None}


def torch_name(name: str) -> str:
    """torch's dtype name of a kgen dtype that has one (KeyError otherwise)."""
    return TORCH_NAME[name]
