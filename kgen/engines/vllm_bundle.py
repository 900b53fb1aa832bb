"""kgen's package in a vLLM tree (`vllm/kgen_indexer/`, imported as `vllm.kgen_indexer`): what the
patched vLLM reads at run time, nothing else.

- `__init__.py`: the option (`indexer_kv_dtype="kgen"`, refused at start-up where kgen's kernels
  cannot run), the cache spec's page bytes from the generated constants, and the glue the patched
  call sites use (the store after vLLM's `compress_pool`, the bf16 query, the paged and the
  prefill scorer), each a function of vLLM's own arguments;
- `layers.py`: the indexer subclass vLLM's `_get_indexer_cls()` hook returns, with the cache,
  compressor and scoring layer its `_get_cache_cls()` / `_get_compressor_cls()` /
  `_get_attn_cls()` hooks return (imported only when the option is on: it imports vLLM's model);
- `host.py`, `spec.yaml`: the variant's constants and spec (kgen.engines.bundle).

No kernel sources: kgen's ops compile them from the installed kgen. Both templates are written as
vLLM's formatter (ruff format, line 88) and import order (ruff isort) leave them.
"""

from __future__ import annotations

import ast

from ..diagnostics import KgenError, Problem
from ..gpurun import spec_yaml
from ..render import render_variant
from .bundle import _host_module
from .sites import Ctx

OPTION = "kgen"  # the indexer_kv_dtype value that selects kgen's variant
# vLLM's DeepSeek-V4 indexer pages: a 256-token KV block holds 256 / 4 compressed keys
PAGE_SIZE = 64
# vLLM's compress_pool writes one bf16 row per boundary token: the variant's input rows
POOLED_DTYPE = "bf16"
# vLLM pads indexer pages to a multiple of 576 B with its default (FlashMLA, fp8_ds_mla) KV cache
PAGE_ALIGN = 576


def refusals(ctx: Ctx) -> list[Problem]:
    """Why the variant cannot be wired into vLLM's indexer as the patch does it (empty: it can)."""
    spec, lay, path = ctx.spec, ctx.layout, ctx.spec_path
    out = []
    if spec.input_dtype != POOLED_DTYPE:
        out.append(Problem("engine-patch", f"{spec.name} reads {spec.input_dtype} rows, but vLLM's compress_pool "
                           f"hands the store one {POOLED_DTYPE} pooled row per compressed key", file=path,
                           fix=f"set input_dtype: {POOLED_DTYPE} in {path}"))
    if spec.positions.source != "array":
        out.append(Problem("engine-patch", f"{spec.name} reads positions from SGLang's {spec.positions.source} "
                           "rows; vLLM passes each token's position and slot", file=path,
                           fix=f"drop `positions:` from {path}"))
    if lay.page_size != PAGE_SIZE:
        out.append(Problem("engine-patch", f"{spec.name} pages hold {lay.page_size} keys; vLLM's DeepSeek-V4 "
                           f"indexer pages hold {PAGE_SIZE} (its 256-token block, compress ratio 4)", file=path,
                           fix=f"set layout.page_size: {PAGE_SIZE} in {path}"))
    if lay.page_bytes % PAGE_ALIGN:
        out.append(Problem("engine-patch", f"{spec.name} pages are {lay.page_bytes} B, not a multiple of the "
                           f"{PAGE_ALIGN} B vLLM aligns indexer pages to", file=path,
                           fix=f"set layout.page_align: {PAGE_ALIGN} in {path}"))
    return out


def files(ctx: Ctx, package_dir: str) -> dict[str, str]:
    problems = refusals(ctx)
    if problems:
        raise KgenError(problems)
    rendered = render_variant(ctx.spec)
    init = INIT.format(name=ctx.name, option=OPTION, eps=repr(float(ctx.spec.norm.eps)),
                       hadamard=ctx.spec.hadamard)
    for text in (init, LAYERS):
        ast.parse(text)  # the templates are ours: a syntax error here is kgen's bug, not the engine's
    return {f"{package_dir}/__init__.py": init, f"{package_dir}/layers.py": LAYERS,
            f"{package_dir}/host.py": ruff_style(_host_module(rendered.files[f"{ctx.name}/host.py"])),
            f"{package_dir}/spec.yaml": spec_yaml(ctx.spec)}


def ruff_style(text: str) -> str:
    """The host module as ruff format leaves it (where black wraps a too-long string in
    parentheses that do not make it fit, ruff keeps the assignment on one line), its
    one-line docstring split to vLLM's line length."""
    lines = text.split("\n")
    head = lines[0]
    if head.startswith('"""') and head.endswith('"""') and len(head) > 88 and ". " in head:
        first, rest = head[3:-3].split(". ", 1)
        lines[0:1] = [f'"""{first}.', "", f'{rest}', '"""']
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.endswith(" = (") and i + 2 < len(lines) and lines[i + 2] == ")" and \
                len(lines[i + 1]) > 88 and lines[i + 1].startswith("    ") and not lines[i + 1].endswith(","):
            out.append(line[:-1] + lines[i + 1].strip())
            i += 3
            continue
        out.append(line)
        i += 1
    return "\n".join(out)


INIT = '''"""kgen's variant {name} for vLLM's DeepSeek-V4 indexer.

Added by `kgen patch`; do not edit (run kgen patch again). host.py holds the byte
math, spec.yaml the variant kgen's ops compile and run (`pip install kgen`), layers.py
the indexer vLLM builds with `--attention-config '{{"indexer_kv_dtype": "{option}"}}'`;
without that option nothing here runs.
"""

import os

import torch

from . import host

_HERE = os.path.dirname(os.path.abspath(__file__))
SPEC = os.path.join(_HERE, "spec.yaml")
VARIANT = host.NAME
OPTION = "{option}"  # the indexer_kv_dtype value that selects this variant
NORM_EPS = {eps}  # the spec's RMSNorm eps: the model's must be the same
HADAMARD = {hadamard}  # the spec rotates keys (and so the query) by a Hadamard transform
_freqs: dict = {{}}
_registered: list = []


def enabled(vllm_config) -> bool:
    """indexer_kv_dtype="{option}", read where vLLM sets the indexer up (start-up).

    Refused there where kgen's CUDA kernels cannot run (ROCm/HIP, XPU, CPU), for models
    other than DeepSeek-V4 and with context parallelism (not wired)."""
    attention = getattr(vllm_config, "attention_config", None)
    if getattr(attention, "indexer_kv_dtype", None) != OPTION:
        return False
    from vllm.platforms import current_platform

    if not current_platform.is_cuda():
        raise ValueError(
            f"indexer_kv_dtype={{OPTION!r}} runs kgen's CUDA kernels: not available "
            f"on {{current_platform.device_type or 'this platform'}}"
        )
    model = getattr(vllm_config.model_config.hf_config, "model_type", None)
    if model != "deepseek_v4":
        raise ValueError(
            f"indexer_kv_dtype={{OPTION!r}} ({{VARIANT}}) is wired for DeepSeek-V4's "
            f"indexer only, not {{model}}"
        )
    parallel = vllm_config.parallel_config
    if (
        parallel.decode_context_parallel_size > 1
        or parallel.prefill_context_parallel_size > 1
    ):
        raise ValueError(
            f"indexer_kv_dtype={{OPTION!r}} does not support context parallelism"
        )
    return True


def indexer_cls():
    """The DeepSeek-V4 indexer holding kgen's keys (layers.py imports vLLM's model);
    kgen's store and query become vLLM custom ops here, once (torch.compile sees
    them whole)."""
    from .layers import KgenDeepseekV4Indexer

    if not _registered:
        from vllm.utils.torch_utils import direct_register_custom_op

        direct_register_custom_op(
            "kgen_indexer_store",
            _store,
            mutates_args=["kv_cache"],
            fake_impl=_store_fake,
        )
        direct_register_custom_op("kgen_indexer_query", _query, fake_impl=_query_fake)
        _registered.append(True)
    return KgenDeepseekV4Indexer


def kv_cache_spec(spec):
    """vLLM's indexer cache spec with kgen's pages: {{host.PAGE_BYTES}} B per page of
    {{host.PAGE_SIZE}} keys ({{host.BYTES_PER_TOKEN}} B each), what vLLM's memory accounting
    then counts. Refused where vLLM's own alignment does not divide them."""
    import dataclasses

    keys = spec.block_size // spec.tokens_per_state
    if keys != host.PAGE_SIZE:
        raise ValueError(
            f"kgen's {{VARIANT}} pages hold {{host.PAGE_SIZE}} keys; vLLM's block of "
            f"{{spec.block_size}} tokens holds {{keys}}"
        )
    if spec.alignment and host.PAGE_BYTES % spec.alignment:
        raise ValueError(
            f"kgen's {{VARIANT}} pages are {{host.PAGE_BYTES}} B, vLLM aligns indexer "
            f"pages to {{spec.alignment}} B here: use a variant with that page_align"
        )
    return dataclasses.replace(spec, alignment=host.PAGE_BYTES, page_size_padded=None)


def _spec(variant):
    """The spec file kgen's ops read for the variant the scoring layer names."""
    if variant != VARIANT:
        raise ValueError(f"kgen's package holds {{VARIANT}}, not {{variant}}")
    return SPEC


def _ops():
    import kgen.ops  # noqa: F401  (registers torch.ops.kgen.*)

    return torch.ops.kgen


def freqs(cos_sin_cache):
    """vLLM's cos_sin_cache ([max_pos, rope_dim]: the cosines, then the sines) as kgen's
    fp32 (cos, sin) pairs; converted once per cache."""
    key = (cos_sin_cache.data_ptr(), tuple(cos_sin_cache.shape), cos_sin_cache.device)
    if key not in _freqs:
        cos, sin = cos_sin_cache.float().chunk(2, dim=-1)
        _freqs[key] = torch.stack((cos, sin), dim=-1).flatten(-2).contiguous()
    return _freqs[key]


def pages(kv_cache):
    """vLLM's indexer cache ([blocks, 64, W] or [blocks, 64, 1, W], padded page
    stride) as kgen's [pages, PAGE_BYTES] bytes: a view, no copy."""
    if kv_cache.stride(0) != host.PAGE_BYTES:
        raise ValueError(
            f"kgen's {{VARIANT}} pages are {{host.PAGE_BYTES}} B, the indexer cache's "
            f"page stride is {{kv_cache.stride(0)}} B"
        )
    size = (kv_cache.shape[0], host.PAGE_BYTES)
    return torch.as_strided(kv_cache, size, (host.PAGE_BYTES, 1))


def store(pooled, positions, slot_mapping, weight, eps, cos_sin_cache, kv_cache, ratio):
    """kgen's store of compress_pool's rows: row i is token i's pooled key, written
    where token i ends a group of `ratio` tokens and has a slot, RoPE at the group's
    first position (as vLLM's own writer rotates it)."""
    torch.ops.vllm.kgen_indexer_store(
        pooled, positions, slot_mapping, weight, eps, cos_sin_cache, kv_cache, ratio
    )


def _store(
    pooled: torch.Tensor,
    positions: torch.Tensor,
    slot_mapping: torch.Tensor,
    weight: torch.Tensor,
    eps: float,
    cos_sin_cache: torch.Tensor,
    kv_cache: torch.Tensor,
    ratio: int,
) -> None:
    if eps != NORM_EPS:
        raise ValueError(
            f"kgen's {{VARIANT}} normalizes with eps {{NORM_EPS}}, the model with {{eps}}"
        )
    positions = positions.to(torch.int64)
    ends = (positions + 1) % ratio == 0
    out_loc = torch.where(ends, slot_mapping.to(torch.int64), -1)
    at = torch.div(positions, ratio, rounding_mode="floor") * ratio
    _ops().norm_rope_store(
        SPEC, pooled, weight, None, freqs(cos_sin_cache), at, out_loc, pages(kv_cache)
    )


def _store_fake(*args) -> None:
    return None


def query(positions, q, cos_sin_cache, weights, softmax_scale, head_scale):
    """The indexer query as kgen's scorer reads it: the variant's RoPE (and Hadamard)
    on a bf16 q, no quantization; the weights scaled as vLLM's fused q kernel scales
    them, fp32 [T, H]."""
    return torch.ops.vllm.kgen_indexer_query(
        positions, q, cos_sin_cache, weights, softmax_scale, head_scale
    )


def _query(
    positions: torch.Tensor,
    q: torch.Tensor,
    cos_sin_cache: torch.Tensor,
    weights: torch.Tensor,
    softmax_scale: float,
    head_scale: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    from kgen import reference
    from kgen.ops import resolve_spec

    spec = resolve_spec(SPEC)
    tokens, heads, dim = q.shape
    flat = q.reshape(tokens * heads, dim).float()
    at = positions.to(torch.int64).repeat_interleave(heads)
    flat = reference.rope(spec, flat, freqs(cos_sin_cache), at)
    if HADAMARD:
        flat = reference.hadamard(flat)
    q = flat.to(torch.bfloat16).view(tokens, heads, dim)
    return q, weights.float() * (softmax_scale * head_scale)


def _query_fake(positions, q, cos_sin_cache, weights, softmax_scale, head_scale):
    return q.new_empty(q.shape, dtype=torch.bfloat16), weights.new_empty(
        weights.shape, dtype=torch.float32
    )


def logits(variant, q, kv_cache, weights, seq_lens, block_table, max_model_len):
    """The decode scorer (DeepGEMM's fp8_fp4_paged_mqa_logits call) on kgen's pages:
    q [B, next_n, H, D], lengths [B, next_n] or [B, 1] (each row's own: the last is the
    sequence's), fp32 [B * next_n, max_model_len]."""
    lens = seq_lens[:, -1] if seq_lens.dim() == 2 else seq_lens
    return _ops().indexer_logits(
        _spec(variant),
        q,
        weights,
        pages(kv_cache),
        block_table.to(torch.int32),
        lens.to(torch.int32).contiguous(),
        max_model_len,
    )


def prefill_logits(variant, q, weights, kv_cache, chunk, cu_seqlen_ks, cu_seqlen_ke):
    """The prefill scorer (DeepGEMM's fp8_fp4_mqa_logits over the gathered keys) on
    kgen's pages, no gather: query row i reads its request's pages, keys 0 .. ke - ks
    - 1 (the columns of the engine's compressed logits), fp32 [rows, max_seqlen_k]."""
    starts = chunk.cu_seq_lens[:-1].contiguous()
    request = torch.searchsorted(starts, cu_seqlen_ks, right=True) - 1
    request = request.clamp(0, chunk.block_table.shape[0] - 1)
    lens = (cu_seqlen_ke - cu_seqlen_ks).to(torch.int32)
    return _ops().indexer_logits(
        _spec(variant),
        q.unsqueeze(1),
        weights,
        pages(kv_cache),
        chunk.block_table[request].to(torch.int32),
        lens,
        chunk.max_seqlen_k,
    )
'''

LAYERS = '''"""vLLM's DeepSeek-V4 indexer with kgen's keys (added by `kgen patch`; do not edit).

vLLM builds it through `DeepseekV4Attention._get_indexer_cls()` when indexer_kv_dtype
is kgen's; it differs from vLLM's indexer only through vLLM's own hooks: the cache class
(kgen's page bytes), the compressor (vLLM's compress_pool, then kgen's store), the
scoring layer (vLLM's sparse_attn_indexer op with kgen's variant) and the query (bf16,
not quantized).
"""

from typing import Any

import torch

from vllm.model_executor.layers.sparse_attn_indexer import SparseAttnIndexer
from vllm.models.deepseek_v4.attention import DeepseekV4Indexer, DeepseekV4IndexerCache
from vllm.models.deepseek_v4.compressor import CompressorMetadata, DeepseekCompressor

from . import NORM_EPS, VARIANT, host, kv_cache_spec, query, store


class KgenIndexerCache(DeepseekV4IndexerCache):
    """The indexer cache with kgen's bytes per key and page bytes."""

    def __init__(self, head_dim: int, dtype: torch.dtype, *args, **kwargs) -> None:
        super().__init__(host.BYTES_PER_TOKEN, torch.uint8, *args, **kwargs)

    def get_kv_cache_spec(self, vllm_config):
        return kv_cache_spec(super().get_kv_cache_spec(vllm_config))


class KgenCompressor(DeepseekCompressor):
    """vLLM's compressor; its store step pools with vLLM's compress_pool, then stores
    with kgen's op (the split vLLM's ROCm MXFP4 compressor makes)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        if self.rms_norm_eps != NORM_EPS:
            raise ValueError(
                f"kgen's {VARIANT} normalizes with eps {NORM_EPS}, "
                f"the model with {self.rms_norm_eps}"
            )

    def _compress_norm_rope_store(
        self,
        state_metadata: CompressorMetadata,
        state_cache: torch.Tensor,
        state_width: int,
        positions: torch.Tensor,
        rotary_emb,
        attn_metadata: dict[str, Any],
        pdl_kwargs: dict,
    ) -> None:
        from vllm.models.deepseek_v4.amd.rocm import compress_pool

        num_tokens = state_metadata.slot_mapping.shape[0]
        if num_tokens == 0:
            return
        k_cache_metadata = attn_metadata[self.k_cache_prefix]
        kv_slot_mapping = k_cache_metadata.slot_mapping[:num_tokens]
        kv_cache = self._static_forward_context[self.k_cache_prefix].kv_cache
        pooled_k = torch.empty(
            (num_tokens, self.head_dim), dtype=torch.bfloat16, device=state_cache.device
        )
        compress_pool(
            state_cache,
            state_metadata.token_to_req_indices,
            positions,
            kv_slot_mapping,
            state_metadata.block_table,
            state_metadata.block_size,
            pooled_k,
            state_width,
            self.compress_ratio,
            self.overlap,
        )
        store(
            pooled_k,
            positions[:num_tokens],
            kv_slot_mapping,
            self.norm.weight,
            self.rms_norm_eps,
            rotary_emb.cos_sin_cache,
            kv_cache,
            self.compress_ratio,
        )


class KgenSparseAttnIndexer(SparseAttnIndexer):
    """vLLM's scoring layer; its sparse_attn_indexer op scores kgen's pages."""

    kgen_variant = VARIANT


class KgenDeepseekV4Indexer(DeepseekV4Indexer):
    def _get_cache_cls(self) -> type[DeepseekV4IndexerCache]:
        return KgenIndexerCache

    def _get_compressor_cls(self) -> type[DeepseekCompressor]:
        return KgenCompressor

    def _get_attn_cls(self) -> type[SparseAttnIndexer]:
        return KgenSparseAttnIndexer

    def _register_q_quant_warmup(self) -> None:
        pass  # no quantized query: nothing to warm up

    def _q_rope_quant(
        self,
        positions: torch.Tensor,
        q: torch.Tensor,
        rotary_emb: torch.nn.Module,
        indexer_weights: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        return query(
            positions,
            q,
            rotary_emb.cos_sin_cache,
            indexer_weights,
            self.softmax_scale,
            self.n_head**-0.5,
        )
'''
