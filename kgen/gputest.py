"""`kgen test`: run each variant on the GPU and compare the WHOLE cache with the Torch reference.

For every variant (families expand to their variants) and token count N:
  1. `reference.make_inputs` (random rows with outlier channels, random positions, shuffled
     out_loc with skipped slots, a poisoned cache larger than needed);
  2. the kernel writes cache A, the reference (torch, on the same GPU) writes cache B, both starting
     from the same poisoned bytes;
  3. A and B are compared byte for byte, untouched pages included, and every differing byte is
     classified by the page's byte map (kgen.layout): value codes, kept RoPE values, scales, or bytes
     no token owns ("stray" writes). Differing values are decoded as sign-magnitude codes and their
     code distance is reported (1 = adjacent codes).

Pass rules (`Comparison.ok`):
  * bf16/fp16 stores: every byte equal;
  * quantized stores (fp8, fp4, incl. kept bf16 RoPE dims): no stray byte, every scale byte equal,
    every differing value exactly one code away, and at most max(1, 1e-4 x written values) of them
    (>= 99.99 % of the written values equal). The reference follows the kernel's reduction order
    (docs/numerics.md), so any difference is reported with examples for a human to explain.

`--sample K` (`kgen test --sample K`, or `test_command(..., sample=K)`) also draws K random
specs the validator accepts (`sample_specs`) and tests each at a few N: whatever the validator
accepts must write the right bytes.

The comparison (`compare_caches`) and the spec sampler are plain torch / pure Python and run on CPU
(tests/test_runtime.py exercises them); everything else needs a GPU.
"""

from __future__ import annotations

import json
import math
import random
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .abi import NORM_ROPE_STORE
from .commands import err as _say
from .diagnostics import KgenError
from .layout import Layout, compute
from .spec import Spec

DEFAULT_TOKENS = (1, 7, 64, 4097, 65536, 1048576)
SAMPLE_TOKENS = (1, 7, 300, 4097)
QUANT_TOLERANCE = 1e-4  # fraction of written values allowed to differ by one code (quantized stores)
MAX_CLASSIFIED = 1 << 24  # differing bytes decoded in detail (the rest are only counted)
MAX_EXAMPLES = 8

ROLE_NONE, ROLE_VALUE, ROLE_KEPT, ROLE_SCALE = 0, 1, 2, 3
ROLE_NAMES = {ROLE_NONE: "unowned", ROLE_VALUE: "value", ROLE_KEPT: "kept", ROLE_SCALE: "scale"}




# ---------------------------------------------------------------------------------------------
# the page's byte map


@dataclass(frozen=True)
class ByteMap:
    """Per byte of a page: who owns it (role), where its element starts, and the element's width."""

    role: list[int]  # ROLE_*
    start: list[int]  # column of the first byte of the element this byte belongs to
    value_bytes: int  # bytes per element of the quantized span (1 for fp4: two codes per byte)
    value_bits: int  # bits per code of the quantized span
    scale_bytes: int  # bytes per scale (0 = no scales)


ROLE_OF = {None: ROLE_NONE, "values": ROLE_VALUE, "rope": ROLE_KEPT, "scale": ROLE_SCALE}


def byte_map(lay: Layout) -> ByteMap:
    """kgen.layout's byte ownership (`Layout.byte_owners`) as the comparison indexes it."""
    from .layout import VALUE_BITS

    roles, start = lay.byte_owners()
    vbits = VALUE_BITS[lay.spec.store.dtype]
    return ByteMap([ROLE_OF[r] for r in roles], start, max(vbits // 8, 1), vbits, lay.scale_unit)


# ---------------------------------------------------------------------------------------------
# comparison


@dataclass
class Comparison:
    variant: str
    tokens: int
    equal_bytes: int
    total_bytes: int
    fraction: float
    max_code_distance: int
    ok: bool
    written_tokens: int = 0
    written_values: int = 0
    diff_values: int = 0  # differing value elements (quantized span + kept span)
    value_fraction: float = 1.0  # equal written values / written values
    diff_bytes_by_role: dict = field(default_factory=dict)
    stray_bytes: int = 0
    scale_mismatches: int = 0
    max_scale_distance: int = 0
    distance_histogram: dict = field(default_factory=dict)
    sampled: bool = False
    examples: list = field(default_factory=list)
    reason: str = ""
    seconds: float = 0.0
    error: str | None = None

    def to_json(self) -> dict:
        d = asdict(self)
        d["fraction"] = round(self.fraction, 9)
        d["value_fraction"] = round(self.value_fraction, 9)
        return d


def _ordinal(code, bits: int):
    """Sign-magnitude code -> a position on the number line (+0 and -0 both 0); int64 tensor."""
    import torch

    code = code.to(torch.int64)
    sign = (code >> (bits - 1)) & 1
    mag = code & ((1 << (bits - 1)) - 1)
    return torch.where(sign == 1, -mag, mag)


def _gather(flat, starts, width: int):
    """Little-endian unsigned integers of `width` bytes at byte offsets `starts` (int64 tensor)."""
    import torch

    out = torch.zeros_like(starts)
    for i in range(width):
        out |= flat[starts + i].to(torch.int64) << (8 * i)
    return out


def compare_caches(spec: Spec, a, b, *, out_loc=None, tokens: int | None = None) -> Comparison:
    """Compare the kernel's cache `a` with the reference's `b` (uint8 [pages, page_bytes], any device)."""
    import torch

    lay = compute(spec)
    if a.shape != b.shape or a.dtype != torch.uint8 or b.dtype != torch.uint8:
        raise ValueError(f"caches differ in shape/dtype: {a.dtype} {tuple(a.shape)} vs {b.dtype} {tuple(b.shape)}")
    num_pages, pb = a.shape
    total = a.numel()
    n = tokens if tokens is not None else (0 if out_loc is None else int(out_loc.numel()))
    written = n
    if out_loc is not None:
        ol = out_loc.to(a.device)
        written = int(((ol >= 0) & (ol < lay.slots(num_pages))).sum())
    per_token_values = lay.quant_span.size + lay.kept_span.size
    quantized = spec.store.dtype not in ("bf16", "fp16")
    c = Comparison(variant=spec.name, tokens=n, equal_bytes=total, total_bytes=total, fraction=1.0,
                   max_code_distance=0, ok=True, written_tokens=written,
                   written_values=written * per_token_values)
    diff = a != b
    n_diff = int(diff.sum())
    if n_diff == 0:
        return c
    c.equal_bytes = total - n_diff
    c.fraction = c.equal_bytes / total
    bm = byte_map(lay)
    role = torch.tensor(bm.role, dtype=torch.int64, device=a.device)
    start = torch.tensor(bm.start, dtype=torch.int64, device=a.device)
    for r, name in ROLE_NAMES.items():
        cnt = int((diff & (role == r)[None, :]).sum())
        if cnt:
            c.diff_bytes_by_role[name] = cnt
    c.stray_bytes = c.diff_bytes_by_role.get("unowned", 0)

    idx = diff.reshape(-1).nonzero().squeeze(1)
    if idx.numel() > MAX_CLASSIFIED:
        idx, c.sampled = idx[:MAX_CLASSIFIED], True
    page, col = idx // pb, idx % pb
    r = role[col]
    fa, fb = a.reshape(-1), b.reshape(-1)
    hist: dict[int, int] = {}
    maxd = 0
    diff_values = 0

    def account(dist) -> None:
        nonlocal maxd, diff_values
        dist = dist[dist > 0]
        if dist.numel() == 0:
            return
        diff_values += int(dist.numel())
        maxd = max(maxd, int(dist.max()))
        vals, counts = torch.unique(dist, return_counts=True)
        for v, k in zip(vals.tolist(), counts.tolist()):
            hist[v] = hist.get(v, 0) + k

    # quantized span
    sel = r == ROLE_VALUE
    if bool(sel.any()):
        starts = torch.unique(page[sel] * pb + start[col[sel]])
        if bm.value_bits == 4:
            va, vb = _gather(fa, starts, 1), _gather(fb, starts, 1)
            for shift in (0, 4):
                account((_ordinal((va >> shift) & 15, 4) - _ordinal((vb >> shift) & 15, 4)).abs())
        else:
            w = bm.value_bytes
            account((_ordinal(_gather(fa, starts, w), 8 * w) - _ordinal(_gather(fb, starts, w), 8 * w)).abs())
    # kept RoPE span (16-bit)
    sel = r == ROLE_KEPT
    if bool(sel.any()):
        starts = torch.unique(page[sel] * pb + start[col[sel]])
        account((_ordinal(_gather(fa, starts, 2), 16) - _ordinal(_gather(fb, starts, 2), 16)).abs())
    # scales: fp32 in ulps (sign-magnitude ordinal), ue8m0 in exponent steps
    sel = r == ROLE_SCALE
    if bool(sel.any()):
        starts = torch.unique(page[sel] * pb + start[col[sel]])
        w = bm.scale_bytes
        sa, sb = _gather(fa, starts, w), _gather(fb, starts, w)
        d = (sa - sb).abs() if w == 1 else (_ordinal(sa, 32) - _ordinal(sb, 32)).abs()
        c.scale_mismatches = int((d > 0).sum())
        c.max_scale_distance = int(d.max()) if d.numel() else 0

    c.diff_values = diff_values
    c.max_code_distance = maxd
    c.distance_histogram = {str(k): v for k, v in sorted(hist.items())}
    c.value_fraction = 1.0 - diff_values / c.written_values if c.written_values else 0.0
    for i in range(min(MAX_EXAMPLES, idx.numel())):
        p, q = int(page[i]), int(col[i])
        c.examples.append({"page": p, "byte": q, "role": ROLE_NAMES[int(r[i])],
                           "token_slot": _slot_of(lay, q), "kernel": int(a[p, q]), "reference": int(b[p, q])})

    reasons = []
    if c.stray_bytes:
        reasons.append(f"{c.stray_bytes} byte(s) no token owns were changed")
    if not quantized:
        reasons.append(f"{n_diff} byte(s) differ; a {spec.store.dtype} store must match exactly")
    else:
        if c.scale_mismatches:
            reasons.append(f"{c.scale_mismatches} scale(s) differ (max distance {c.max_scale_distance})")
        if maxd > 1:
            reasons.append(f"a value is {maxd} codes away (only adjacent codes are tolerated)")
        allowed = max(1, math.floor(QUANT_TOLERANCE * c.written_values))
        if diff_values > allowed:
            reasons.append(f"{diff_values} values differ (> {allowed} = 1e-4 of {c.written_values} written)")
        if c.sampled:
            reasons.append(f"more than {MAX_CLASSIFIED} differing bytes")
    c.reason = "; ".join(reasons)
    c.ok = not reasons
    return c


def _slot_of(lay: Layout, col: int) -> int | None:
    if col < lay.rows_bytes:
        return col // lay.row_bytes
    if lay.scale_stride and col < lay.rows_bytes + lay.scale_region_bytes:
        return (col - lay.rows_bytes) // lay.scale_stride
    return None


# ---------------------------------------------------------------------------------------------
# running one case on the GPU


def kernel_args(spec: Spec, inputs: dict) -> tuple:
    """The kernel's tensors from `reference.make_inputs`, in the ABI's order (kgen.abi: x, ..., cache
    last), None where the spec has none: the positional arguments of the op and of the reference."""
    return tuple(NORM_ROPE_STORE.arguments(spec, inputs).values())


def spec_yaml(spec: Spec) -> str:
    """The spec as a YAML document (non-default fields), to paste into a file and replay."""
    import io

    from ruamel.yaml import YAML

    y = YAML(typ="safe", pure=True)
    y.default_flow_style = False
    y.sort_base_mapping_type_on_output = False
    buf = io.StringIO()
    y.dump(spec.model_dump(mode="json", exclude_defaults=True), buf)
    return buf.getvalue()


class KernelFault(RuntimeError):
    """A CUDA error raised by the kernel launch of one case (e.g. an illegal memory access), with
    the spec as YAML. The CUDA context is unusable afterwards (the error is sticky)."""

    def __init__(self, spec: Spec, n: int, seed: int, error: BaseException):
        self.spec, self.tokens, self.seed, self.error = spec, n, seed, error
        super().__init__(f"CUDA error in the kernel of {spec.name} at N={n} (seed {seed}): "
                         f"{type(error).__name__}: {error}\nspec:\n{spec_yaml(spec)}")


def run_case(spec: Spec, n: int, *, seed: int, device: str = "cuda", kernel=None) -> Comparison:
    """Kernel on cache A, reference on cache B (both on `device`), whole-cache comparison.
    `kernel` defaults to kgen.ops.norm_rope_store (tests pass the reference to dry-run on CPU)."""
    import torch

    from . import ops, reference

    kernel = kernel or ops.norm_rope_store
    t0 = time.perf_counter()
    inputs = reference.make_inputs(spec, n, seed=seed, device=device)
    *tensors, cache_a = kernel_args(spec, inputs)
    cache_b = cache_a.clone()
    kernel(spec, *tensors, cache_a)
    if device != "cpu":
        # a fault in the kernel is sticky and asynchronous: without this it surfaces in whatever
        # CUDA call comes next (the reference), far from the spec that caused it
        try:
            torch.cuda.synchronize()
        except Exception as e:  # noqa: BLE001 - re-raised with the spec attached
            raise KernelFault(spec, n, seed, e) from e
    reference.norm_rope_store(spec, *tensors, cache_b)
    if device != "cpu":
        torch.cuda.synchronize()
    c = compare_caches(spec, cache_a, cache_b, out_loc=inputs["out_loc"], tokens=n)
    c.seconds = round(time.perf_counter() - t0, 3)
    return c


def precompile(specs: list[Spec]) -> dict[str, str]:
    """Compile (or find cached) every spec for this GPU's arch; {name: error}. Renders serially, then
    runs NVRTC in threads (it is thread-safe per program and releases the GIL)."""
    import torch

    from .compile import compile_variant
    from .runtime import check_arch

    idx = torch.cuda.current_device()
    cap = tuple(torch.cuda.get_device_capability(idx))
    name = torch.cuda.get_device_name(idx)
    errors: dict[str, str] = {}
    jobs = []
    for s in specs:
        try:
            jobs.append((s, check_arch(cap, list(s.targets), device_name=f"GPU {idx} ({name})", variant=s.name)))
        except KgenError as e:
            errors[s.name] = "; ".join(p.message for p in e.problems)

    def guard(s: Spec, fn) -> None:
        try:
            fn()
        except KgenError as e:
            errors[s.name] = "\n".join(p.format() for p in e.problems)
        except Exception as e:  # noqa: BLE001 - reported per variant
            errors[s.name] = f"{type(e).__name__}: {e}"

    try:
        from .compile import compile_rendered
        from .render import render_variant
    except ImportError:  # only the public API: compile one by one
        for s, arch in jobs:
            guard(s, lambda s=s, arch=arch: compile_variant(s, arch))
        return errors
    rendered = []
    for s, arch in jobs:
        box: list = []
        guard(s, lambda s=s, box=box: box.append(render_variant(s)))
        if box:
            rendered.append((s, arch, box[0]))

    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=min(16, max(1, len(rendered)))) as ex:
        list(ex.map(lambda job: guard(job[0], lambda: compile_rendered(job[2], job[1])), rendered))
    return errors


# ---------------------------------------------------------------------------------------------
# random valid specs


SAMPLE_KINDS = ("fp8_e4m3", "fp4_e2m1", "bf16", "fp8_e4m3", "packed", "fp16", "fp8_e4m3", "fp4_e2m1")


def random_spec_dict(rng: random.Random, name: str, kind: str | None = None) -> dict:
    """A random spec as data, drawn broadly around what the rules accept (many draws are valid).
    `kind` forces the store dtype ("packed": fp8 with the RoPE dims kept in bf16/fp16)."""
    head = rng.choice([32, 64, 128, 128, 256, 512, 512, 1024])
    V = head // 32
    in_dt = rng.choice(["fp32", "bf16", "fp16"])
    norm = rng.choice(["rmsnorm", "rmsnorm", "layernorm", "none"])
    style = rng.choice(["interleaved", "neox"])
    step = 2 * V if style == "neox" else max(V, 2)
    rope_choices = [0] + [k for k in range(step, head + 1, step)]
    rope = rng.choice(rope_choices[: 1 + min(len(rope_choices) - 1, 8)]) if rng.random() < 0.85 else 0
    if kind == "packed" and rope == 0:
        rope = rope_choices[1] if len(rope_choices) > 1 and rope_choices[1] < head else 0
    dtype = kind if kind in ("bf16", "fp16", "fp8_e4m3", "fp4_e2m1") else (
        "fp8_e4m3" if kind == "packed" else rng.choice(["bf16", "fp16", "fp8_e4m3", "fp4_e2m1"]))
    scale = {"bf16": "none", "fp16": "none", "fp4_e2m1": "ue8m0"}.get(dtype) or rng.choice(
        ["fp32", "fp32_pow2", "ue8m0", "none"])
    store: dict = {"dtype": dtype, "scale": scale}
    quantized = dtype in ("fp8_e4m3", "fp4_e2m1")
    if quantized and 0 < rope < head and (kind == "packed" or rng.random() < 0.2):
        store["rope_dtype"] = rng.choice(["bf16", "fp16"])
    if quantized:
        store["bf16_roundtrip"] = rng.random() < 0.3
        store["amax_floor"] = rng.choice([1e-4, 1e-6, 1e-2])
        store["scale_math"] = rng.choice(["divide", "reciprocal"])
    if scale != "none":
        if dtype == "fp4_e2m1":
            store["block"] = 32
        else:
            quant = head - (rope if "rope_dtype" in store else 0)
            blocks = [V * (1 << k) for k in range(6) if V * (1 << k) <= quant and quant % (V * (1 << k)) == 0]
            if blocks and rng.random() < 0.8:
                store["block"] = rng.choice(blocks)
    layout: dict = {"page_size": rng.choice([1, 2, 4, 16, 64, 64, 256])}
    if scale != "none" and rng.random() < 0.3:
        layout["scale_stride"] = rng.choice([4, 8, 16, 32])
    if rng.random() < 0.3:
        layout["page_align"] = rng.choice([16, 64, 576, 1024])
    spec = {
        "kgen": 1, "name": name, "input_dtype": in_dt, "head_dim": head,
        "norm": {"kind": norm, "eps": rng.choice([1e-6, 1e-5])},
        "rope": {"dim": rope, "style": style, "placement": rng.choice(["first", "last"])},
        "hadamard": rng.random() < 0.5,
        "store": store, "layout": layout,
        "launch": {"warps_per_block": rng.choice([1, 2, 4, 8, 8, 16]), "tokens_per_warp": rng.choice([1, 2, 2, 4])},
        "targets": ["sm_90a", "sm_100a", "sm_120a"],
    }
    return spec


def sample_specs(k: int, seed: int = 0, *, max_draws: int = 20000) -> list[Spec]:
    """K distinct random specs that the validator accepts (no error from any rule)."""
    from pydantic import ValidationError

    from .rules import check_variant

    rng = random.Random(seed)
    out: list[Spec] = []
    seen: set[str] = set()
    for _ in range(max_draws):
        if len(out) >= k:
            break
        kind = SAMPLE_KINDS[len(out) % len(SAMPLE_KINDS)]
        data = random_spec_dict(rng, f"sample_s{seed}_{len(out)}", kind)
        try:
            spec = Spec.model_validate(data)
        except ValidationError:
            continue
        _, problems = check_variant(spec)
        if any(p.severity == "error" for p in problems):
            continue
        key = spec.model_copy(update={"name": "x"}).model_dump_json()
        if key in seen:
            continue
        seen.add(key)
        out.append(spec)
    return out


# ---------------------------------------------------------------------------------------------
# the command


def expand(paths: list[Path]) -> list[Spec]:
    """Every variant of every path (validated; KgenError with every error otherwise)."""
    from .validate import validate_path

    specs, problems = [], []
    for path in paths:
        r = validate_path(Path(path))
        problems += r.errors
        specs += [c.spec for c in r.variants]
    if problems:
        raise KgenError(problems, exit_code=1)
    return specs


def device_summary() -> dict:
    import torch

    from .runtime import device_info

    info = device_info()
    info["torch"] = torch.__version__
    info["cuda"] = torch.version.cuda
    return info


def test_command(paths: list[Path], tokens: list[int] | None, as_json: bool = False, *,
                 sample: int = 0, seed: int = 0, sample_tokens: list[int] | None = None) -> int:
    """Exit 0 all equal, 1 any failure, 2 no GPU / usage."""
    from .runtime import gpu_problem

    if not paths and not sample:
        _say("kgen test: give spec/family paths (or --sample K)")
        return 2
    if tokens is not None and any(t < 0 for t in tokens):
        _say("kgen test: --tokens must be >= 0")
        return 2
    specs = expand(paths)
    reason = gpu_problem()
    if reason is not None:
        _say(f"kgen test: no GPU: {reason}. Nothing was tested; run it on a GPU machine (docs/gpu.md).")
        return 2

    cases: list[tuple[Spec, int]] = [(s, n) for s in specs for n in (tokens or DEFAULT_TOKENS)]
    sampled = sample_specs(sample, seed) if sample else []
    cases += [(s, n) for s in sampled for n in (sample_tokens or SAMPLE_TOKENS)]
    all_specs = specs + sampled
    dev = device_summary()
    _say(f"kgen test: {len(all_specs)} variant(s), {len(cases)} case(s) on {dev['name']} ({dev['arch']})")
    t0 = time.perf_counter()
    compile_errors = precompile(all_specs)
    _say(f"kgen test: kernels ready in {time.perf_counter() - t0:.1f} s"
         + (f" ({len(compile_errors)} failed)" if compile_errors else ""))

    results: list[Comparison] = []
    interrupted = False
    try:
        _run_cases(cases, compile_errors, seed, results)
    except KeyboardInterrupt:  # timeout -s INT: report what ran
        interrupted = True
        _say(f"kgen test: interrupted after {len(results)}/{len(cases)} case(s)")
    ok = all(c.ok for c in results) and len(results) == len(cases)
    if as_json:
        out = {"device": dev, "ok": ok, "interrupted": interrupted, "cases": len(cases),
               "results": [c.to_json() for c in results],
               "samples": [s.model_dump(mode="json") for s in sampled]}
        print(json.dumps(out, indent=2))
    else:
        print(summary_table(results))
    fails = [c for c in results if not c.ok]
    _say(f"kgen test: {len(results) - len(fails)}/{len(cases)} case(s) ok" + ("" if ok else " -- FAILED"))
    return 0 if ok else 1


def _run_cases(cases, compile_errors: dict, seed: int, results: list) -> None:
    import torch

    for i, (spec, n) in enumerate(cases):
        if spec.name in compile_errors:
            c = Comparison(spec.name, n, 0, 0, 0.0, 0, False, error=compile_errors[spec.name],
                           reason="no kernel")
        else:
            try:
                c = run_case(spec, n, seed=1000 * i + seed)
            except KgenError as e:
                c = Comparison(spec.name, n, 0, 0, 0.0, 0, False, error="; ".join(p.format() for p in e.problems),
                               reason="error")
            except Exception as e:  # noqa: BLE001 - a crash in one case must not hide the others
                c = Comparison(spec.name, n, 0, 0, 0.0, 0, False, error=f"{type(e).__name__}: {e}", reason="error")
                if _sticky(str(e)):
                    _say(f"  {spec.name} N={n}: {c.error}")
                    results.append(c)
                    _say("kgen test: stopping: the CUDA context is likely broken after this error")
                    break
            torch.cuda.empty_cache()
        results.append(c)
        _say(_line(c))


STICKY_ERRORS = ("illegal memory access", "illegal address", "misaligned address", "unspecified launch failure",
                 "device-side assert", "illegal instruction", "hardware stack error", "launch timed out")


def _sticky(message: str) -> bool:
    """Does this CUDA error leave the context unusable (so later cases would only repeat it)?"""
    m = message.lower()
    return any(k in m for k in STICKY_ERRORS)


def _line(c: Comparison) -> str:
    if c.error:
        return f"  FAIL {c.variant:<32} N={c.tokens:<8} {c.error.splitlines()[0] if c.error else ''}"
    state = "ok  " if c.ok else "FAIL"
    text = (f"  {state} {c.variant:<32} N={c.tokens:<8} bytes equal {100 * c.fraction:.6f}% "
            f"({c.equal_bytes}/{c.total_bytes}) values differing {c.diff_values} max code dist "
            f"{c.max_code_distance} [{c.seconds:.1f} s]")
    return text + (f" -- {c.reason}" if c.reason else "")


def summary_table(results: list[Comparison]) -> str:
    rows = [f"{'variant':<32} {'N':>8} {'equal bytes %':>14} {'diff values':>11} {'max dist':>8} {'ok':>4}"]
    for c in results:
        rows.append(f"{c.variant:<32} {c.tokens:>8} {100 * c.fraction:>14.6f} {c.diff_values:>11} "
                    f"{c.max_code_distance:>8} {'yes' if c.ok else 'NO':>4}")
    return "\n".join(rows)
