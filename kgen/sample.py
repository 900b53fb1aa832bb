"""Random spec dicts around what the validator accepts: the one sampler of kgen.

`spec_candidate(choose, ...)` draws a spec dict through a `Chooser` (pick one of some options, or a
coin), so the same sampler serves `kgen test --sample K` (a seeded `random.Random`: `sample_specs`)
and the test suite's hypothesis strategies (tests/strategies.py wraps hypothesis' `draw`, so
hypothesis can shrink a failing draw). Most draws are accepted; `accepted(data)` says which.

Covered: every store kind (bf16, fp16, fp8 with each scale kind, fp4, packed fp8 + kept RoPE dims in
bf16/fp16), head_dim 32..1024, both RoPE styles and placements, scale blocks and strides, page sizes
and alignments, launch shapes, amax floors, scale math, bf16 round trip, norms.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any, Protocol, TypeVar

from pydantic import ValidationError

from .rules import FAST_SCALES, check_variant
from .spec import Spec

T = TypeVar("T")

HEAD_DIMS = (32, 64, 128, 256, 512, 1024)
# "packed": fp8 with the RoPE dims kept in bf16/fp16
STORE_KINDS = ("bf16", "fp16", "fp8_fp32", "fp8_pow2", "fp8_ue8m0", "fp8_none", "fp4", "packed")
TARGETS = ("sm_90a", "sm_100a", "sm_120a")


class Chooser(Protocol):
    def choice(self, options: Sequence[T]) -> T: ...


class RandomChooser:
    def __init__(self, rng: random.Random):
        self.rng = rng

    def choice(self, options: Sequence[T]) -> T:
        return self.rng.choice(list(options))


def spec_candidate(c: Chooser, *, name: str, kind: str | None = None, max_page_size: int = 1024,
                   targets: Sequence[str] = TARGETS) -> dict:
    """A spec dict drawn through `c` (most are valid). `kind` forces the store kind (STORE_KINDS)."""
    head = c.choice(HEAD_DIMS)
    V = head // 32
    kind = kind or c.choice(STORE_KINDS)
    rope_style = c.choice(("interleaved", "neox"))
    if rope_style == "interleaved" and V % 2:
        rope_style = "neox"
    unit = 2 * V  # rope.dim multiple of 2V keeps both styles on whole lanes
    rope_dim = min(c.choice((0, unit, 2 * unit, 64 if 64 % unit == 0 and 64 <= head else unit)), head)
    store: dict[str, Any]
    if kind in ("bf16", "fp16"):
        store = {"dtype": kind, "scale": "none"}
    elif kind == "fp8_none":
        store = {"dtype": "fp8_e4m3", "scale": "none"}
    elif kind == "fp4":
        if head < 64:
            head, V = 64, 2
            rope_dim = min(rope_dim, head)
        store = {"dtype": "fp4_e2m1", "scale": "ue8m0", "block": 32}
    else:
        scale = {"fp8_fp32": "fp32", "fp8_pow2": "fp32_pow2", "fp8_ue8m0": "ue8m0", "packed": "ue8m0"}[kind]
        store = {"dtype": "fp8_e4m3", "scale": scale}
        span = head
        if kind == "packed":
            rope_dim = c.choice([d for d in (unit, 2 * unit, 64, 128) if 0 < d < head and d % unit == 0] or [unit])
            if rope_dim >= head:
                rope_dim = head // 2
            store["rope_dtype"] = c.choice(("bf16", "fp16"))
            span = head - rope_dim
        block = V * c.choice((1, 2, 4, 8, 16, 32))
        if span % block:
            block = V
        store["block"] = c.choice((block, None)) if kind != "packed" else block
    store["amax_floor"] = c.choice((1e-4, 1e-6, 1e-2, 0.5))
    store["bf16_roundtrip"] = c.choice((False, True))
    store["scale_math"] = c.choice(("divide", "reciprocal"))
    layout: dict[str, Any] = {"page_size": 2 ** c.choice(range(max(0, max_page_size.bit_length() - 1) + 1))}
    if store.get("scale", "none") != "none" and c.choice((False, True)):
        unit_b = 1 if store["scale"] == "ue8m0" else 4
        blocks = -(-((head - rope_dim) if "rope_dtype" in store else head) // (store.get("block") or head))
        layout["scale_stride"] = blocks * unit_b + unit_b * c.choice((0, 1, 2, 3))
    align = c.choice((1, 16, 64, 576, 4096))
    if align != 1:
        layout["page_align"] = align
    launch: dict[str, Any] = {"warps_per_block": c.choice((1, 2, 4, 8, 16, 32)), "tokens_per_warp": c.choice((1, 2, 4))}
    spec: dict[str, Any] = {
        "kgen": 1,
        "name": name,
        "input_dtype": c.choice(("fp32", "bf16", "fp16")),
        "head_dim": head,
        "norm": {"kind": c.choice(("rmsnorm", "layernorm", "none")), "eps": c.choice((1e-6, 1e-5, 1.0))},
        "rope": {"dim": rope_dim, "style": rope_style, "placement": c.choice(("first", "last"))},
        "hadamard": c.choice((False, True)),
        "store": store,
        "layout": layout,
        "launch": launch,
        "targets": list(targets),
    }

    if store["dtype"] == "fp8_e4m3" and "rope_dtype" not in store and store["scale"] in FAST_SCALES \
            and c.choice((False, False, True)):
        spec["numerics"] = "fast"  # checked against its stated tolerance (kgen.compare)
    if c.choice((False, True)):  # the per-N shape, switching inside the token counts kgen test runs
        launch.update(large_min_tokens=c.choice((7, 300, 4097)), large_tokens_per_warp=c.choice((1, 2, 4, 8)))
        stage = c.choice((0, 0, 1, 3))  # the large shape's tokens loaded in staged groups (launch.stage_tokens)
        if stage:
            launch["stage_tokens"] = stage
    if c.choice((False, True)):
        del spec["launch"]  # the default launch shape
    return spec


def accepted(data: dict) -> bool:
    """Does kgen's validator accept this spec dict (no errors; warnings allowed)?"""
    try:
        spec = Spec.model_validate(data)
    except ValidationError:
        return False
    _, problems = check_variant(spec)
    return not any(p.severity == "error" for p in problems)


def sample_specs(k: int, seed: int = 0, *, max_draws: int = 20000, max_page_size: int = 256) -> list[Spec]:
    """K distinct random specs that the validator accepts, cycling through the store kinds."""
    rng = RandomChooser(random.Random(seed))
    out: list[Spec] = []
    seen: set[str] = set()
    for _ in range(max_draws):
        if len(out) >= k:
            break
        data = spec_candidate(rng, name=f"sample_s{seed}_{len(out)}", kind=STORE_KINDS[len(out) % len(STORE_KINDS)],
                              max_page_size=max_page_size)
        if not accepted(data):
            continue
        spec = Spec.model_validate(data)
        key = spec.model_copy(update={"name": "x"}).model_dump_json()
        if key not in seen:
            seen.add(key)
            out.append(spec)
    return out
