"""A prefill step and a decode step through the patched SGLang tree's own `kgen_indexer.store` (the
module `kgen patch` wrote), on CPU tensors: kgen's op runs its reference there. SGLang's plan
NamedTuples and its config bag are stood in for by their shapes (the real modules need CUDA and
sgl_kernel); the plan rows are laid out like SGLang's planner (kgen.reference.compress_plan_for /
decode_plan_for). Usage: python prefill_probe.py SGLANG_ROOT (kgen importable)."""

from __future__ import annotations

import sys
import types
from typing import NamedTuple

import torch

from kgen import ops
from kgen import reference as R
from kgen.abi import NORM_ROPE_STORE

root = sys.argv[1]
sys.path.insert(0, f"{root}/python")
flags = types.SimpleNamespace(enable_kgen_indexer=True, enable_deepseek_v4_fp4_indexer=False)
ctx = types.ModuleType("sglang.srt.runtime_context")
ctx.get_exec = lambda: types.SimpleNamespace(kernel=flags)  # type: ignore[attr-defined]
sys.modules["sglang.srt.runtime_context"] = ctx


class CompressorDecodePlan(NamedTuple):  # SGLang's shape: (compress_ratio, plan_d), is_decode True
    compress_ratio: int
    plan_d: torch.Tensor

    @property
    def is_decode(self) -> bool:
        return True


class CompressorPrefillPlan(NamedTuple):  # (compress_ratio, plan_c, plan_w, pin_buffer), is_decode False
    compress_ratio: int
    plan_c: torch.Tensor
    plan_w: torch.Tensor
    pin_buffer: torch.Tensor | None = None

    @property
    def is_decode(self) -> bool:
        return False


from sglang import kgen_indexer  # noqa: E402

for kind in ("prefill", "decode"):
    spec = ops.resolve(kgen_indexer.SPEC_PREFILL if kind == "prefill" else kgen_indexer.SPEC).spec
    inp = R.make_inputs(spec, 257, seed=11)
    rows = inp["positions"]
    plan = (CompressorPrefillPlan(4, rows, torch.full((257, 8), 255, dtype=torch.uint8)) if kind == "prefill"
            else CompressorDecodePlan(4, rows))
    freqs_cis = torch.view_as_complex(inp["freqs"].reshape(inp["freqs"].shape[0], -1, 2))  # as SGLang keeps it
    got = inp["cache"].clone()
    kgen_indexer.store(inp["x"], plan, inp["weight"], freqs_cis, inp["out_loc"], got)
    want = inp["cache"].clone()
    R.norm_rope_store(spec, *(v for k, v in NORM_ROPE_STORE.arguments(spec, inp).items() if k != "cache"), want)
    written = int((got != inp["cache"]).any(dim=1).sum())
    print(f"{kind}: {type(plan).__name__} rows {tuple(rows.shape)} -> {spec.name} "
          f"(positions.source {spec.positions.source}); pages written {written}; "
          f"bytes equal to kgen's reference: {torch.equal(got, want)}")
