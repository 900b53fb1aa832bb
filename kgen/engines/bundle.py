"""kgen's generated files for one variant, laid out in a kgen-owned package of an engine tree.

Only what the engine reads at run time: the host constants (the byte math the pool and the budget
size from), the spec (one variant, as kgen's torch ops resolve it; a family file's variant is
written out on its own) and, for an engine whose store passes prefill plans, the variant's prefill
twin (`prefill_twin`). No kernel sources: kgen's ops compile them from the installed kgen.
`bundle_problems` is the audit's check that such a package holds exactly the audited variant.
"""

from __future__ import annotations

import ast

from ..gpurun import spec_yaml
from ..layout import compute
from ..render import render_variant
from ..spec import Spec
from .sites import Ctx, generated_constants

PREFILL_SPEC = "spec_prefill.yaml"
# the host constants an engine's code reads, checked against the layout by the audit
HOST_CHECKED = ("BYTES_PER_TOKEN", "PAGE_BYTES", "PAGE_SIZE")


def prefill_twin(spec: Spec) -> Spec | None:
    """The variant as SGLang's prefill step calls it: the same spec reading the CompressPlan rows
    (positions.source compress_plan) under its own name. SGLang's store is one call for both steps
    (its plan's second element is the DecodePlan or the CompressPlan, `is_decode` picks one of two
    kernels); kgen's two readings are two variants for the same reason: the row kinds are both
    uint8 [N, 16], only the caller knows which it holds. None without RoPE (nothing reads a position)."""
    if spec.rope.dim <= 0:
        return None
    data = spec.model_dump(mode="json", exclude_defaults=True)
    data["name"] = f"{spec.name}_prefill"
    data["description"] = f"{spec.name} as SGLang's prefill store calls it: positions from its CompressPlan rows"
    data["positions"] = {"source": "compress_plan", "compress_ratio": spec.positions.compress_ratio}
    return Spec.model_validate(data)


def variant_files(ctx: Ctx, package_dir: str) -> dict[str, str]:
    rendered = render_variant(ctx.spec)
    files = {f"{package_dir}/host.py": _host_module(rendered.files[f"{ctx.name}/host.py"]),
             f"{package_dir}/spec.yaml": spec_yaml(ctx.spec)}
    twin = prefill_twin(ctx.spec)
    if twin is not None:
        files[f"{package_dir}/{PREFILL_SPEC}"] = spec_yaml(twin)
    return files


def _host_module(text: str) -> str:
    """kgen render's host module as the engine's formatter writes it (double quotes, black's
    line breaks): each top-level constant re-emitted from its value, the other lines kept."""
    import json

    def lit(v) -> str:
        if isinstance(v, str):
            return json.dumps(v, ensure_ascii=False)
        if isinstance(v, tuple):
            inner = ", ".join(lit(e) for e in v)
            return f"({inner},)" if len(v) == 1 else f"({inner})"
        return repr(v)

    lines = text.splitlines()
    module = ast.parse(text)
    for node in reversed(module.body):
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)):
            continue
        name, value = node.targets[0].id, ast.literal_eval(node.value)
        one = f"{name} = {lit(value)}"
        if len(one) <= 88:
            new = [one]
        elif isinstance(value, tuple):
            new = [f"{name} = (", *(f"    {lit(e)}," for e in value), ")"]
        else:
            new = [f"{name} = (", f"    {lit(value)}", ")"]
        assert node.end_lineno is not None
        lines[node.lineno - 1:node.end_lineno] = new
    return "\n".join(lines) + "\n"


def bundle_problems(ctx: Ctx, package_dir: str) -> list[tuple[str, int, str]]:
    """(file, line, message) for each way the package in the tree is not the audited variant."""
    from ruamel.yaml import YAML

    out: list[tuple[str, int, str]] = []
    rel = f"{package_dir}/spec.yaml"
    if not ctx.tree.exists(rel):
        return [(rel, 1, f"kgen's package has no spec.yaml: kgen's ops cannot resolve {ctx.name}")]
    try:
        held = Spec.model_validate(YAML(typ="safe", pure=True).load(ctx.tree.text(rel)))
    except Exception as e:  # noqa: BLE001  (any failure to read it as one variant is the finding)
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        return [(rel, 1, f"kgen's spec.yaml is not one variant's spec ({first}): kgen's ops cannot resolve "
                 f"{ctx.name} from it")]
    lay = ctx.layout
    if held.name != ctx.name or compute(held).page_bytes != lay.page_bytes or \
            held.model_dump(exclude={"description"}) != ctx.spec.model_dump(exclude={"description"}):
        out.append((rel, 1, f"kgen's spec.yaml holds {held.name}, not {ctx.name} (the engine's ops would run "
                    "another variant than the pool sizes)"))
    host = generated_constants(ctx.tree, ctx.adapter)
    for name in HOST_CHECKED:
        want = {"BYTES_PER_TOKEN": lay.bytes_per_token, "PAGE_BYTES": lay.page_bytes,
                "PAGE_SIZE": lay.page_size}[name]
        if host.get(name) != want:
            out.append((f"{package_dir}/host.py", 1, f"kgen's host.py has {name} = {host.get(name)!r}, "
                        f"{ctx.name} needs {want}"))
    return out


def sglang_files(ctx: Ctx, package_dir: str, flag_import: str, flag_expr: str, fp4_expr: str) -> dict[str, str]:
    """The package SGLang imports as `sglang.kgen_indexer`: __init__.py (the flag and the calls
    the patched sites make) and the variant's files."""
    twin = prefill_twin(ctx.spec)
    prefill = f'os.path.join(_HERE, "{PREFILL_SPEC}")' if twin is not None else "None"
    init = SGLANG_INIT.format(name=ctx.name, flag_import=flag_import, flag_expr=flag_expr, fp4_expr=fp4_expr,
                              prefill_spec=prefill, ratio=ctx.spec.positions.compress_ratio,
                              eps=repr(float(ctx.spec.norm.eps)), hadamard=ctx.spec.hadamard)
    ast.parse(init)  # the template is ours: a syntax error here is kgen's bug, not the engine's
    return {f"{package_dir}/__init__.py": init, **variant_files(ctx, package_dir)}


SGLANG_INIT = '''"""kgen's variant {name} for SGLang's DeepSeek-V4 C4 indexer (added by `kgen patch`).

Generated by kgen; do not edit (run kgen patch again). host.py holds the byte math, spec.yaml the
variant kgen's ops compile and run (`pip install kgen`). SGLang uses this package only where the C4
indexer pool was built with --enable-kgen-indexer; with the flag off nothing here runs.
"""

import os

{flag_import}

from . import host

_HERE = os.path.dirname(os.path.abspath(__file__))
SPEC = os.path.join(_HERE, "spec.yaml")
# the same variant reading SGLang's prefill CompressPlan rows (positions.source compress_plan)
SPEC_PREFILL = {prefill_spec}
VARIANT = host.NAME
COMPRESS_RATIO = {ratio}  # tokens per key the plans are read with
NORM_EPS = {eps}  # the spec's RMSNorm eps: the model's must be the same
HADAMARD = {hadamard}  # the spec rotates keys (and so the query) by a Hadamard transform
_state = {{"on": False}}


def enabled() -> bool:
    """--enable-kgen-indexer, read once where the C4 indexer pool and the budget are set up.

    Refused at start-up where kgen's kernels cannot run (HIP, XPU), and together with the fp4
    indexer flag (another key layout)."""
    if not {flag_expr}:
        return False
    import torch

    xpu = hasattr(torch, "xpu") and torch.xpu.is_available()
    if torch.version.hip is not None or xpu:
        raise RuntimeError(
            "--enable-kgen-indexer runs kgen's CUDA kernels: not available on HIP or XPU"
        )
    if {fp4_expr}:
        raise ValueError(
            "--enable-kgen-indexer ({name}) and --enable-deepseek-v4-fp4-indexer choose "
            "two different indexer key layouts: enable one of them"
        )
    _state["on"] = True
    return True


def in_use(token_to_kv_pool, compress_ratio: int = 4) -> bool:
    """Whether this token pool's C4 indexer pool holds kgen's keys (its factory decided)."""
    if compress_ratio != 4:
        return False
    pool = getattr(token_to_kv_pool, "c4_indexer_kv_pool", None)
    return bool(getattr(pool, "use_kgen_indexer", False))


def skips_deep_gemm(indexer_metadata) -> bool:
    """No DeepGEMM schedule for the C4 indexer once kgen's pool is built: its scorer needs none."""
    return _state["on"] and getattr(indexer_metadata, "compress_ratio", 4) == 4


def pd_layout(layout: str) -> str:
    """The PD handshake's layout string with the indexer's: peers must hold the same variant."""
    return f"{{layout}},c4i:kgen:{{VARIANT}}"


def _ops():
    import kgen.ops  # noqa: F401  (registers torch.ops.kgen.*)
    import torch

    return torch.ops.kgen


def _real_freqs(freqs):
    """SGLang's complex freqs_cis as kgen's (cos, sin) pairs: a view, no copy."""
    import torch

    return torch.view_as_real(freqs).flatten(-2) if freqs.is_complex() else freqs


def store(x, plan, weight, eps, freqs, out_loc, cache) -> None:
    """The engine's fused norm/RoPE/store call, routed to kgen's op with the engine's own tensors
    and its plan rows. Decode: the DecodePlan rows. Prefill: the CompressPlan rows (one per
    compressed key, x row i, its slot out_loc[ragged_id]) through SPEC_PREFILL."""
    if eps != NORM_EPS:
        raise ValueError(
            f"kgen's {{VARIANT}} normalizes with eps {{NORM_EPS}}, the model with {{eps}}"
        )
    spec = SPEC
    # a CompressorDecodePlan: its [N, 16] DecodePlan rows
    rows = getattr(plan, "plan_d", None)
    if rows is None and getattr(plan, "is_decode", True) is False:  # a prefill plan
        if SPEC_PREFILL is None:
            raise NotImplementedError(
                "{name} has no RoPE: kgen has no prefill reading of SGLang's CompressPlan"
            )
        rows, spec = plan.plan_c, SPEC_PREFILL
    ratio = getattr(plan, "compress_ratio", COMPRESS_RATIO)
    if ratio != COMPRESS_RATIO:
        raise ValueError(
            f"kgen's {{VARIANT}} reads plans of compress ratio {{COMPRESS_RATIO}}, "
            f"the engine's plan has {{ratio}}"
        )
    rows = plan if rows is None else rows  # older trees hand the plan rows themselves
    freqs = _real_freqs(freqs)
    _ops().norm_rope_store(spec, x, weight, None, freqs, rows, out_loc, cache)


def query(c4_indexer, q_lora, positions, weights, q_lora_quant=None):
    """The indexer query as kgen's scorer reads it: SGLang's projection, then the variant's RoPE
    (and Hadamard) on a bf16 q, no fp8 quantization; the weights scaled as the engine's fused q
    kernel scales them, fp32 [T, H, 1]."""
    import torch
    from kgen import reference
    from kgen.ops import resolve_spec

    spec = resolve_spec(SPEC)
    q, _ = c4_indexer.wq_b(q_lora if q_lora_quant is None else q_lora_quant)
    tokens, heads = q.shape[0], c4_indexer.n_local_heads
    flat = q.view(tokens * heads, -1).float()
    at = positions.repeat_interleave(heads)
    flat = reference.rope(spec, flat, _real_freqs(c4_indexer.freqs_cis), at)
    if HADAMARD:
        flat = reference.hadamard(flat)
    q = flat.to(torch.bfloat16).view(tokens, heads, -1)
    return q, (weights.float() * c4_indexer.weight_scale).unsqueeze(-1)


def logits(q, kv_cache, weights, seq_lens, page_table, metadata, max_seq_len, clean):
    """DeepGEMM's paged-logits call, scored by kgen's reader (the metadata is unused): the
    [pages, 64, 1, W] view back to [pages, page bytes], the [B, 1] lengths to [B]."""
    import torch

    cache = kv_cache.view(kv_cache.shape[0], host.PAGE_BYTES)
    lens = seq_lens.reshape(-1).to(torch.int32)
    table = page_table.to(torch.int32)
    return _ops().indexer_logits(SPEC, q, weights, cache, table, lens, max_seq_len)
'''
