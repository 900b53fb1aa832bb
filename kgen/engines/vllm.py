"""vLLM's DeepSeek-V4 indexer keys as a table of sites (facts read from vLLM's public sources).

vLLM stores the same 132 B/token key as SGLang (128 fp8 bytes, then a 4-byte scale) but with a
power-of-two scale, no Hadamard rotation, and pages padded to a multiple of 576 B (8448 -> 8640):
the page stride is the spec's padded size, not the product. The sites: the cache's bytes per token
(`DeepseekV4Indexer.__init__`), the page padding (`DeepseekV4IndexerCache.get_kv_cache_spec`), the
dtype gate of the indexer backend, the Triton writer, DeepGEMM's paged-logits reader, and, per
architecture, the fp8 scale slot (SM100: four equal ue8m0 bytes, `mqa_logits_use_mx_scales()`).
`kgen patch` wires another variant in behind `indexer_kv_dtype="kgen"` (kgen/engines/vllm_patch.py:
the gate, the indexer hook, the scorer op; kgen/engines/vllm_bundle.py: kgen's package); once the
tree carries it, the same sites check those edits instead of vLLM's own format.
"""

from __future__ import annotations

from typing import cast

import libcst as cst

from ..layout import compute
from . import vllm_patch
from .pyeval import Function, dotted, methods
from .sites import Adapter, Ctx, Encoding, Site, code_of, encoding_of
from .tree import (
    Drift,
    calls,
    collect,
    find_class,
    find_function,
    find_method,
    statement_of,
)

# the model moved from model_executor/models/ to a top-level vllm/models/ package
ATTENTION = ("vllm/models/deepseek_v4/attention.py", "vllm/model_executor/models/deepseek_v4/attention.py")
COMPRESSOR = ("vllm/models/deepseek_v4/compressor.py", "vllm/model_executor/models/deepseek_v4/compressor.py")
WRITER = "compress_norm_rope_store_triton"
BACKEND = "vllm/v1/attention/backends/mla/indexer.py"
READER = "vllm/model_executor/layers/sparse_attn_indexer.py"

# vLLM's own indexer-key encodings, by the cache-dtype name its backend gate uses
NATIVE = {"fp8": Encoding("fp8_e4m3", "fp32_pow2", 128), "mxfp4": Encoding("fp4_e2m1", "ue8m0", 32)}
WRITER_ROTATES = False  # vLLM's Triton writer applies no Hadamard transform to the keys (V4 and V3.2)
WRITER_ROUNDS_BF16 = True  # it rounds the normalized, rotated values to bf16 before quantizing
ITEMSIZE = {"torch.uint8": 1, "torch.int8": 1, "torch.bfloat16": 2, "torch.float16": 2, "torch.float32": 4}


# The KV-cache dtype the audit assumes: FlashMLA's packed fp8_ds_mla cache (vLLM's default DeepSeek-V4
# backend on Hopper/Blackwell), under which indexer pages align to 576 B; FlashInfer's plain rows
# align them to 512 B instead.
CACHE_DTYPE = "fp8_ds_mla"


def env(ctx: Ctx) -> dict[str, object]:
    fp4 = ctx.mode.native == "mxfp4"
    return {"config.index_head_dim": ctx.spec.head_dim, "self.use_fp4_kv": fp4,
            "vllm_config.cache_config.cache_dtype": CACHE_DTYPE, "self.cache_config.cache_dtype": CACHE_DTYPE,
            **ITEMSIZE}


def _method(ctx: Ctx, files: tuple[str, ...], cls_name: str, name: str, what: str):
    """(parsed, class, method) of `cls_name.name` in whichever of `files` the tree has."""
    rel = ctx.tree.pick(files, f"class {cls_name}", what, contains=f"class {cls_name}")
    parsed = ctx.tree.parse(rel)
    cls = find_class(ctx.tree, parsed, cls_name, what)
    return parsed, cls, find_method(ctx.tree, parsed, cls, name, what)


def _stmt_of(method: cst.CSTNode, node: cst.CSTNode) -> cst.CSTNode:
    return statement_of(method, node)


def _kwarg(call: cst.Call, name: str) -> cst.Arg | None:
    return next((a for a in call.args if a.keyword is not None and a.keyword.value == name), None)


def _one_call(ctx: Ctx, parsed, scope_node, callee: str, where: str, what: str) -> cst.Call:
    found = calls(scope_node, callee)
    if len(found) != 1:
        raise Drift(ctx.tree.path(parsed.rel), f"{callee}(...) in {where}", len(found), what)
    return found[0]


CACHE_HOOK = "_get_cache_cls"  # 0.33.0: the cache class comes from a platform hook (ROCm overrides it)


def _cache_call(ctx: Ctx, parsed, cls: cst.ClassDef, init: cst.FunctionDef) -> cst.Call:
    """The cache's construction in DeepseekV4Indexer.__init__: `DeepseekV4IndexerCache(...)`, or
    `self._get_cache_cls()(...)` where the hook returns DeepseekV4IndexerCache."""
    direct = calls(init, "DeepseekV4IndexerCache")
    hooked = calls(init, f"self.{CACHE_HOOK}()")
    if hooked and not direct:
        hook = find_method(ctx.tree, parsed, cls, CACHE_HOOK, "indexer cache")
        returned = [dotted(r.value) for r in collect(hook, cst.Return) if r.value is not None]
        if returned != ["DeepseekV4IndexerCache"]:
            raise Drift(ctx.tree.path(parsed.rel), f"DeepseekV4Indexer.{CACHE_HOOK} returning DeepseekV4IndexerCache",
                        0, "indexer cache")
        return _one_call(ctx, parsed, init, f"self.{CACHE_HOOK}()", "DeepseekV4Indexer.__init__", "indexer cache")
    return _one_call(ctx, parsed, init, "DeepseekV4IndexerCache", "DeepseekV4Indexer.__init__", "indexer cache")


def audit_cache_bytes(ctx: Ctx) -> None:
    if ctx.mode.flag:  # kgen's indexer (its cache class) is built through the attention's hook
        vllm_patch.audit_hook(ctx)
        return
    parsed, cls, init = _method(ctx, ATTENTION, "DeepseekV4Indexer", "__init__", "indexer cache")
    call = _cache_call(ctx, parsed, cls, init)
    head, dtype = _kwarg(call, "head_dim"), _kwarg(call, "dtype")
    if head is None or dtype is None:
        raise Drift(ctx.tree.path(parsed.rel), "DeepseekV4IndexerCache(head_dim=..., dtype=...)", 0, "indexer cache")
    fn, stmt = Function(init, parsed.scope, cls), _stmt_of(init, call)
    width = ctx.evaluate("indexer cache width", parsed, head.value,
                         lambda: ctx.evaluator().value_at(fn, stmt, head.value))
    size = ITEMSIZE.get(dotted(dtype.value) or "")
    if size is None:
        ctx.report("engine-unreadable", parsed, dtype.value, "indexer cache dtype: kgen cannot tell its size",
                   "update kgen/engines/vllm.py")
        return
    if width is not None and width * size != ctx.layout.bytes_per_token:
        ctx.report("engine-pool", parsed, head.value, f"the indexer cache holds {width * size} B/token "
                   f"(head_dim {width} x {size} B) but {ctx.name} stores {ctx.layout.bytes_per_token} B/token "
                   f"({ctx.layout.bytes_per_token_formula()})", "make the cache's head_dim the spec's bytes per token")


def audit_cache_page(ctx: Ctx) -> None:
    if ctx.mode.flag:  # kgen's cache class pads to the generated PAGE_BYTES (the package site checks it)
        return
    parsed, cls, method = _method(ctx, ATTENTION, "DeepseekV4IndexerCache", "get_kv_cache_spec",
                                  "indexer cache pages")
    call = _one_call(ctx, parsed, method, "MLAAttentionSpec", "DeepseekV4IndexerCache.get_kv_cache_spec",
                     "indexer cache pages")
    arg = _kwarg(call, "alignment")
    align = 1 if arg is None else ctx.evaluate(
        "page alignment", parsed, arg.value,
        lambda: ctx.evaluator().value_at(Function(method, parsed.scope, cls), _stmt_of(method, call), arg.value))
    if arg is not None and align is None:
        return  # the evaluator's own finding (engine-unreadable) is already reported
    if isinstance(align, bool) or not isinstance(align, int) or align <= 0:
        # the evaluator never guesses: a page alignment it cannot judge is a finding, not a pass
        ctx.report("engine-unreadable", parsed, arg.value if arg is not None else call, f"vLLM's indexer page "
                   f"alignment is {align!r}, not a positive number of bytes: kgen cannot tell the page stride",
                   "update kgen/engines/vllm.py for this vLLM version")
        return
    spec = ctx.spec
    # vLLM's page, described as a kgen layout: the spec's rows and scales, padded to vLLM's alignment
    engine = compute(spec.model_copy(update={"layout": spec.layout.model_copy(update={"page_align": align})}))
    if engine.page_bytes != ctx.layout.page_bytes:
        assumed = "" if arg is None or isinstance(arg.value, cst.Integer) else f" (with the {CACHE_DTYPE} KV cache)"
        ctx.report("engine-pool", parsed, arg.value if arg is not None else call, f"vLLM pads indexer pages to a "
                   f"multiple of {align} B{assumed}: {engine.page_bytes} B ({engine.page_bytes_formula()}), but "
                   f"{ctx.name} "
                   f"pages are {ctx.layout.page_bytes} B; the cache's page stride is the padded size",
                   f"set layout.page_align: {align} in {ctx.spec_path}")


def audit_dtype_gate(ctx: Ctx) -> None:
    if ctx.mode.flag:
        vllm_patch.audit_gate(ctx)
        return
    rel = ctx.tree.pick([BACKEND], "DSA_INDEXER_KV_DTYPES", "indexer dtype gate")
    parsed = ctx.tree.parse(rel)
    value = parsed.scope.constants.get("DSA_INDEXER_KV_DTYPES")
    if not isinstance(value, (cst.Tuple, cst.List)):
        raise Drift(ctx.tree.path(rel), "DSA_INDEXER_KV_DTYPES = (...)", 0, "indexer dtype gate")
    names = [str(e.value.evaluated_value) for e in value.elements if isinstance(e.value, cst.SimpleString)]
    key = ctx.mode.native
    if key not in names:
        ctx.report("engine-dtype", parsed, value, f"the indexer backend accepts kv cache dtypes {', '.join(names)} "
                   f"only; {ctx.name} stores {encoding_of(ctx.layout)}, none of them (vLLM refuses it at start)",
                   ctx.patch_fix)


WRITER_METHODS = ("forward", "_compress_norm_rope_store")  # 0.33.0 moved the store into an override hook


def audit_writer(ctx: Ctx) -> None:
    if ctx.mode.flag:  # kgen's compressor stores (its package); vLLM's writer is not called
        return
    rel = ctx.tree.pick(COMPRESSOR, "class DeepseekCompressor", "indexer writer", contains="class DeepseekCompressor")
    parsed = ctx.tree.parse(rel)
    cls = find_class(ctx.tree, parsed, "DeepseekCompressor", "indexer writer")
    holders = [m for name, m in methods(cls).items() if name in WRITER_METHODS and WRITER in code_of(parsed, m)]
    if len(holders) != 1:
        raise Drift(ctx.tree.path(parsed.rel), f"{WRITER} in DeepseekCompressor.{' or .'.join(WRITER_METHODS)}",
                    len(holders), "indexer writer")
    call = _writer_call(ctx, parsed, holders[0])
    key = ctx.mode.native or "fp8"
    want = encoding_of(ctx.layout)
    if NATIVE[key] != want:
        ctx.report("engine-store", parsed, call, f"the indexer writer ({WRITER}) writes "
                   f"{NATIVE[key]} but {ctx.name} stores {want}", "use a spec of vLLM's encoding")
    if ctx.spec.store.dtype != "bf16" and ctx.spec.store.bf16_roundtrip != WRITER_ROUNDS_BF16:
        ctx.report("engine-store", parsed, call, f"vLLM's writer rounds to bf16 before quantizing but {ctx.name} "
                   "quantizes the fp32 values (store.bf16_roundtrip: false): codes and scales differ",
                   f"set store.bf16_roundtrip: true in {ctx.spec_path}")
    if ctx.spec.hadamard != WRITER_ROTATES:
        ctx.report("engine-store", parsed, call, f"vLLM's writer applies no Hadamard rotation but {ctx.name} "
                   "rotates its keys (hadamard: true): same bytes, different numbers",
                   f"set hadamard: false in {ctx.spec_path}")


def _writer_call(ctx: Ctx, parsed, method: cst.FunctionDef) -> cst.Call:
    """The call of the Triton writer in DeepseekCompressor.forward: direct in older versions; newer
    ones bind it to a local (`compress_norm_rope_store_fn = compress_norm_rope_store_triton` in the
    indexer branch, another kernel for the 512-wide latent) and call that local once."""
    direct = calls(method, WRITER)
    if direct:
        return _one_call(ctx, parsed, method, WRITER, "DeepseekCompressor.forward", "indexer writer")
    aliases = {dotted(a.targets[0].target) for a in collect(method, cst.Assign, lambda a: len(a.targets) == 1
                                                            and dotted(a.value) == WRITER)}
    found = [c for alias in sorted(a for a in aliases if a) for c in calls(method, alias)]
    if len(found) != 1:
        raise Drift(ctx.tree.path(parsed.rel), f"{WRITER}(...), or a local bound to it and called once, in "
                    "DeepseekCompressor.forward", len(found), "indexer writer")
    return found[0]


MX_SCALES = "mqa_logits_use_mx_scales"  # 0.33.0: SM100's MQA logits kernels take packed ue8m0 scales
DEEP_GEMM = "vllm/utils/deep_gemm.py"
FAMILY_CHECK = "is_device_capability_family"
UE8M0_ONE_X4 = "7f 7f 7f 7f"  # 1.0 as four ue8m0 bytes (the exponent + 127, repeated)
FP32_ONE = "00 00 80 3f"  # 1.0 as a little-endian fp32


def _family(target: str) -> int | None:
    """The CUDA family (major version) of an NVRTC target: sm_100a -> 10."""
    digits = target.removeprefix("sm_").rstrip("af")
    return int(digits) // 10 if digits.isdigit() else None


def audit_scale_slot(ctx: Ctx) -> None:
    """Per architecture: on the GPU family `mqa_logits_use_mx_scales()` names (SM100), vLLM's fp8
    writer fills each token's 4-byte scale slot with four equal ue8m0 bytes instead of an fp32, and
    its reader takes them as int32. kgen's spec schema has no encoding for a replicated ue8m0 slot
    (ue8m0 with scale_stride 4 leaves three bytes unwritten), so a spec that targets that family
    is reported there, once, with the bytes that differ. fp4 keys are ue8m0 on every GPU; older
    vLLMs, whose reader never asks, store the fp32 everywhere."""
    if ctx.mode.native != "fp8":
        return  # not vLLM's fp8 keys: the writer and dtype-gate sites already say what differs
    reader = ctx.tree.pick([READER], "function sparse_attn_indexer", "fp8 scale slot")
    if MX_SCALES not in ctx.tree.text(reader):
        return
    rel = ctx.tree.pick([DEEP_GEMM], f"function {MX_SCALES}", "fp8 scale slot")
    parsed = ctx.tree.parse(rel)
    fn = find_function(ctx.tree, parsed, MX_SCALES, "fp8 scale slot")
    checks = [c for c in calls(fn, FAMILY_CHECK) if c.args and isinstance(c.args[0].value, cst.Integer)]
    if len(checks) != 1:
        raise Drift(ctx.tree.path(rel), f"{FAMILY_CHECK}(<capability>) in {MX_SCALES}", len(checks),
                    "fp8 scale slot")
    check = checks[0]
    capability = cast(cst.Integer, check.args[0].value).evaluated_value
    family = int(capability) // 10
    hit = [t for t in ctx.spec.targets if _family(t) == family]
    if not hit:
        return
    others = [t for t in ctx.spec.targets if t not in hit]
    lay = ctx.layout
    first, stride = lay.scale_offset(0), lay.scale_stride
    last = lay.scale_offset(lay.page_size - 1) + lay.scale_unit - 1
    elsewhere = f"; on {', '.join(others)} vLLM stores the fp32 there" if others else ""
    ctx.report("engine-store", parsed, check,
               f"on {', '.join(hit)} (the SM{capability} family, where {MX_SCALES}() is true) vLLM's fp8 writer "
               f"fills each token's 4-byte scale slot (page bytes {first}-{last}, {stride} B per token) with four "
               f"equal ue8m0 bytes (1.0 is {UE8M0_ONE_X4}) where {ctx.name} stores an fp32 scale (1.0 is "
               f"{FP32_ONE}): all 4 bytes of every token's scale slot differ there, and kgen's spec schema has no "
               f"encoding for a replicated ue8m0 slot{elsewhere}",
               f"drop {', '.join(hit)} from targets in {ctx.spec_path} for vLLM (kgen cannot express its "
               f"SM{capability} scale slot)")


def audit_scorer(ctx: Ctx) -> None:
    if ctx.mode.flag:
        vllm_patch.audit_scorer(ctx)
        return
    rel = ctx.tree.pick([READER], "function sparse_attn_indexer", "indexer scorer")
    parsed = ctx.tree.parse(rel)
    fn = find_function(ctx.tree, parsed, "sparse_attn_indexer", "indexer scorer")
    call = _one_call(ctx, parsed, fn, "fp8_fp4_paged_mqa_logits", "sparse_attn_indexer", "indexer scorer")
    if ctx.mode.native is None:
        own = ", ".join(str(e) for e in NATIVE.values())
        ctx.report("engine-scorer", parsed, call, f"the indexer scores with DeepGEMM's fp8_fp4_paged_mqa_logits, "
                   f"which reads {own} pages only; {ctx.name} stores {encoding_of(ctx.layout)} and needs kgen's "
                   "scorer", ctx.patch_fix)


def audit_package(ctx: Ctx) -> None:
    """kgen's package in the tree holds this variant: its spec.yaml and the host constants the cache
    class sizes pages from."""
    if not ctx.mode.flag:
        return
    from .bundle import bundle_problems

    for rel, line, message in bundle_problems(ctx, vllm_patch.PKG_DIR):
        ctx.report_at("engine-kernel", rel, line, 1, message, ctx.patch_fix)


def bundle(ctx: Ctx) -> dict[str, str]:
    from .vllm_bundle import files

    return files(ctx, vllm_patch.PKG_DIR)


ADAPTER = Adapter(
    name="vllm",
    markers=("vllm/v1", "vllm/model_executor"),
    native=NATIVE,
    default_native="fp8",
    package_dir="vllm/kgen_indexer",
    package_module="vllm.kgen_indexer",
    package_alias="kgen_indexer",
    env=env,
    bundle=bundle,
    option=vllm_patch.OPTION_TEXT,
    sites=(
        Site("cache-bytes", "engine-pool", "DeepseekV4Indexer.__init__", audit_cache_bytes, vllm_patch.patch_hook),
        Site("cache-page", "engine-pool", "DeepseekV4IndexerCache.get_kv_cache_spec", audit_cache_page),
        Site("dtype-gate", "engine-dtype", "DSA_INDEXER_KV_DTYPES", audit_dtype_gate, vllm_patch.patch_gate),
        Site("writer", "engine-store", "DeepseekCompressor.forward", audit_writer),
        Site("scorer", "engine-scorer", "sparse_attn_indexer", audit_scorer, vllm_patch.patch_scorer),
        Site("scale-slot", "engine-store", MX_SCALES, audit_scale_slot),
        Site("package", "engine-kernel", vllm_patch.PKG_DIR, audit_package),
    ),
)
