"""SGLang's DeepSeek-V4 C4 indexer keys as a table of sites (facts read from SGLang's public sources).

The 132 B/token fact lives in five places that must agree - the pool, the memory budget, the store
call, the reader view, the store kernel - plus the page size, the scorer choice, the fp8-only
non-paged path and the flags. Each site below finds its place by class/function/assignment/call
name, reads what the engine computes there, and (for `kgen patch`) rewrites it behind one server
flag, `--enable-kgen-indexer`, so that with the flag off the engine is byte-for-byte unchanged.
"""

from __future__ import annotations

import re

import libcst as cst

from ..diagnostics import KgenError, Problem
from .pyeval import Function, Unknown, dotted, methods
from .sites import (
    Adapter,
    Ctx,
    Encoding,
    Site,
    around_statement,
    code_of,
    encoding_of,
    ensure_import,
    expression,
    insert_statements,
    parse_statement,
    replace_node,
)
from .tree import (
    Drift,
    assignments,
    calls,
    chain_statement,
    collect,
    collect_all,
    find_class,
    find_classes_with,
    find_method,
)

POOL = "python/sglang/srt/mem_cache/deepseek_v4_memory_pool.py"
CONFIGURATOR = "python/sglang/srt/model_executor/pool_configurator.py"
COMPRESSOR = "python/sglang/srt/layers/attention/dsv4/compressor_v2.py"
INDEXER = "python/sglang/srt/layers/attention/dsv4/indexer.py"
# the JIT store kernel moved from jit_kernel/ to kernels/jit/ between versions
KERNELS = ("python/sglang/jit_kernel/csrc/deepseek_v4/fused_norm_rope_v2.cuh",
           "python/sglang/kernels/jit/csrc/deepseek_v4/fused_norm_rope_v2.cuh")
# server flags are annotated fields: on ServerArgs, or (newer) in per-group field modules
SERVER_ARGS = ("python/sglang/srt/server_args.py",
               "python/sglang/srt/arg_groups/fields/kernel.py")

FP4_FLAG = "enable_deepseek_v4_fp4_indexer"
FLAG = "enable_kgen_indexer"
PKG = "kgen_indexer"
PKG_DIR = "python/sglang/kgen_indexer"
# SGLang's default --page-size for DeepSeek-V4; the C4 indexer page holds a quarter of it
DEFAULT_PAGE_SIZE = 256

# The engine's own indexer-key encodings (its JIT store kernel and DeepGEMM's paged logits read
# exactly these): fp8 e4m3 + one fp32 scale per 128, or fp4 e2m1 + one ue8m0 per 32.
NATIVE = {"fp8": Encoding("fp8_e4m3", "fp32", 128), "fp4": Encoding("fp4_e2m1", "ue8m0", 32)}
# which constant of the store kernel gives the page bytes it checks, per native mode
KERNEL_PAGE_CONSTANT = {"fp8": "kIndexerBytes", "fp4": "kIndexerFp4Bytes"}


def env(ctx: Ctx) -> dict[str, object]:
    """SGLang's configuration in the audited mode, by the spelling its code reads it with."""
    fp4 = ctx.native_encoding()[0] == "fp4"
    flag = ctx.mode.flag
    h = ctx.spec.head_dim
    return {
        "self.index_head_dim": h, "self.indexer_head_dim": h,
        "self.use_fp4_indexer": fp4, "use_fp4_indexer": fp4, "c4_indexer.use_fp4_indexer": fp4,
        f"get_exec().kernel.{FP4_FLAG}": fp4, f"get_exec().kernel.{FLAG}": flag,
        "self.kgen_indexer": flag, f"{PKG}.enabled()": flag,
    }


def _mode_text(ctx: Ctx) -> str:
    if ctx.mode.flag:
        return f"with --{FLAG.replace('_', '-')}"
    key, _ = ctx.native_encoding()
    return "fp4 indexer" if key == "fp4" else "fp8 indexer, the default"


def _holds(stmt: cst.CSTNode, node: cst.CSTNode) -> bool:
    """Whether `node` (by identity) lies inside `stmt`."""
    return any(n is node for n in collect_all(stmt))


def _kgen_code(ctx: Ctx, node: cst.CSTNode, parsed) -> bool:
    return PKG in code_of(parsed, node)


# ---------------------------------------------------------------------------------------------
# server flag


def _server_args(ctx: Ctx):
    found = []
    for rel in SERVER_ARGS:
        if ctx.tree.exists(rel):
            parsed = ctx.tree.parse(rel)
            found += [(parsed, cls, field) for cls, field in find_classes_with(parsed, FP4_FLAG)]
    if len(found) != 1:
        raise Drift(ctx.tree.path(found[1][0].rel) if len(found) > 1 else None,
                    f"the class declaring {FP4_FLAG} in {' or '.join(SERVER_ARGS)}", len(found), "server flags")
    return found[0]


def audit_flag(ctx: Ctx) -> None:
    parsed, cls, _ = _server_args(ctx)
    if ctx.mode.native is not None:
        return
    have_flag = bool(find_classes_with(parsed, FLAG))
    own = ", ".join(f"{k} ({e})" for k, e in NATIVE.items())
    if not have_flag:
        ctx.report("engine-flag", parsed, cls, f"no server flag selects {ctx.name}: {cls.name.value} only "
                   f"chooses among the engine's own indexer layouts ({own})", ctx.patch_fix)
    elif ctx.mode.installed != ctx.name:
        held = ctx.mode.installed or "nothing"
        ctx.report("engine-flag", parsed, cls, f"--{FLAG.replace('_', '-')} exists but kgen's files in "
                   f"{PKG_DIR} hold {held}, not {ctx.name}", ctx.patch_fix)


def patch_flag(ctx: Ctx) -> None:
    parsed, cls, field = _server_args(ctx)
    if find_classes_with(parsed, FLAG):
        return
    stmt = parse_statement(f"{FLAG}: bool = False\n")
    stmt = stmt.with_changes(leading_lines=[cst.EmptyLine(comment=cst.Comment(
        f"# kgen patch: store and score the DeepSeek-V4 indexer keys as kgen's variant ({PKG_DIR})"))])
    holder = next(s for s in cls.body.body if isinstance(s, cst.SimpleStatementLine) and _holds(s, field))
    around_statement(ctx, parsed, holder, [stmt], "after")


# ---------------------------------------------------------------------------------------------
# the pool: flag read, bytes per token, page bytes, page size


def _pool(ctx: Ctx, cls_name: str = "DeepSeekV4IndexerPool"):
    rel = ctx.tree.pick([POOL], f"class {cls_name}", "indexer pool")
    parsed = ctx.tree.parse(rel)
    return parsed, find_class(ctx.tree, parsed, cls_name, "indexer pool")


def _fp4_read(ctx: Ctx):
    parsed, cls = _pool(ctx)
    init = find_method(ctx.tree, parsed, cls, "__init__", "indexer pool flags")
    found = assignments(init, "self.use_fp4_indexer")
    if len(found) != 1:
        raise Drift(ctx.tree.path(parsed.rel), "DeepSeekV4IndexerPool.__init__: self.use_fp4_indexer = ...",
                    len(found), "indexer pool flags")
    return parsed, cls, init, found[0]


def audit_pool_flag(ctx: Ctx) -> None:
    parsed, _cls, init, anchor = _fp4_read(ctx)
    if ctx.mode.flag and not assignments(init, "self.kgen_indexer"):
        ctx.report("engine-flag", parsed, anchor, f"the indexer pool never reads --{FLAG.replace('_', '-')}: it "
                   f"sizes {ctx.name}'s pages from the engine's own flags", ctx.patch_fix)


def patch_pool_flag(ctx: Ctx) -> None:
    parsed, _cls, init, anchor = _fp4_read(ctx)
    if assignments(init, "self.kgen_indexer"):
        return
    parsed = ensure_import(ctx, parsed)
    parsed, _cls, init, anchor = _fp4_read(ctx)
    holder = next(s for s in collect(init, cst.SimpleStatementLine) if _holds(s, anchor))
    around_statement(ctx, parsed, holder, [parse_statement(f"self.kgen_indexer = {PKG}.enabled()\n")], "after")


def _bytes_method(ctx: Ctx):
    parsed, cls = _pool(ctx)
    return parsed, cls, find_method(ctx.tree, parsed, cls, "get_bytes_per_token", "indexer pool bytes per token")


def audit_pool_bytes(ctx: Ctx) -> None:
    parsed, cls, method = _bytes_method(ctx)
    returns = collect(method, cst.Return)
    at = returns[-1] if returns else method
    got = ctx.evaluate("indexer pool bytes per token", parsed, at,
                       lambda: ctx.evaluator().call(Function(method, parsed.scope, cls), [], {}))
    lay = ctx.layout
    if got is not None and got != lay.bytes_per_token:
        ctx.report("engine-pool", parsed, at, f"the indexer pool allocates {got} B/token ({_mode_text(ctx)}) but "
                   f"{ctx.name} stores {lay.bytes_per_token} B/token ({lay.bytes_per_token_formula()})", ctx.patch_fix)


def patch_pool_bytes(ctx: Ctx) -> None:
    parsed, _cls, method = _bytes_method(ctx)
    if _kgen_code(ctx, method, parsed):
        return
    parsed = ensure_import(ctx, parsed)
    parsed, _cls, method = _bytes_method(ctx)
    stmt = parse_statement(f"if self.kgen_indexer:\n    return {PKG}.host.BYTES_PER_TOKEN\n")
    insert_statements(ctx, parsed, method, _after_docstring(method), [stmt])


def _after_docstring(fn: cst.FunctionDef) -> int:
    body = fn.body.body
    if body and isinstance(body[0], cst.SimpleStatementLine) and isinstance(body[0].body[0], cst.Expr) \
            and isinstance(body[0].body[0].value, cst.SimpleString):
        return 1
    return 0


def audit_pool_page(ctx: Ctx) -> None:
    parsed, cls = _pool(ctx)
    method = find_method(ctx.tree, parsed, cls, "_create_buffer", "indexer pool pages")
    found = assignments(method, "page_bytes")
    if len(found) != 1:
        raise Drift(ctx.tree.path(parsed.rel), "DeepSeekV4IndexerPool._create_buffer: page_bytes = ...",
                    len(found), "indexer pool pages")
    lay = ctx.layout
    # pages of the spec's size here: a page-size disagreement is the page-size site's finding
    got = ctx.evaluate("indexer page bytes", parsed, found[0], lambda: ctx.evaluator().value_at(
        Function(method, parsed.scope, cls), found[0], found[0].value, {"self.page_size": lay.page_size}))
    if got is not None and got != lay.page_bytes:
        ctx.report("engine-pool", parsed, found[0], f"the indexer pool allocates pages of {got} B "
                   f"({_mode_text(ctx)}) but {ctx.name} pages are {lay.page_bytes} B ({lay.page_bytes_formula()})",
                   ctx.patch_fix)


def audit_page_size(ctx: Ctx) -> None:
    """The indexer pages' token count where the token pool builds the indexer pool (at the default
    --page-size). Call sites whose argument the interpreter cannot follow (loops over ratios) are
    left to the reader site, whose view states the page size the scorer assumes."""
    parsed, cls = _pool(ctx, "DeepSeekV4TokenToKVPool")
    find_method(ctx.tree, parsed, cls, "_make_indexer_pool", "indexer pool factory")
    init = find_method(ctx.tree, parsed, cls, "__init__", "indexer pool factory")
    sites = calls(init, "self._make_indexer_pool")
    if not sites:
        raise Drift(ctx.tree.path(parsed.rel), "self._make_indexer_pool(...) in DeepSeekV4TokenToKVPool.__init__", 0,
                    "indexer pool factory")
    fn = Function(init, parsed.scope, cls)
    for call in sites:
        positional = [a for a in call.args if a.keyword is None]
        arg = next((a for a in call.args if a.keyword is not None and a.keyword.value == "page_size"),
                   positional[1] if len(positional) > 1 else None)
        if arg is None:
            raise Drift(ctx.tree.path(parsed.rel), "self._make_indexer_pool(size, page_size, ...)", 0,
                        "indexer pool factory")
        stmt = next(s for s in collect(init, cst.SimpleStatementLine) if _holds(s, call))
        try:
            got = ctx.evaluator().value_at(fn, stmt, arg.value, {"page_size": DEFAULT_PAGE_SIZE,
                                                                 "self.page_size": DEFAULT_PAGE_SIZE})
        except Unknown:
            continue
        if got != ctx.layout.page_size:
            ctx.report("engine-page-size", parsed, arg.value, f"indexer pages hold {got} tokens (at the default "
                       f"--page-size {DEFAULT_PAGE_SIZE}) but {ctx.name} pages hold {ctx.layout.page_size}",
                       "use a spec with the engine's page size")


# The pool's fp8-layout helpers (quantize-and-store, split pages into keys and scales): right for
# the engine's own layout only. Which of them a version has varies; each one present is guarded.
FP8_HELPERS = ("set_index_fused", "set_index_k_scale_buffer", "get_index_k_scale_buffer")


def _fp8_helpers(ctx: Ctx):
    parsed, cls = _pool(ctx)
    return parsed, [m for name, m in methods(cls).items() if name in FP8_HELPERS]


def audit_fp8_helpers(ctx: Ctx) -> None:
    if not ctx.mode.flag:
        return
    parsed, helpers = _fp8_helpers(ctx)
    for m in helpers:
        if not _kgen_code(ctx, m, parsed):
            ctx.report("engine-fp8-helper", parsed, m.name, f"DeepSeekV4IndexerPool.{m.name.value} reads or writes "
                       f"the engine's fp8 layout and stays callable with --{FLAG.replace('_', '-')} ({ctx.name})",
                       ctx.patch_fix)


def patch_fp8_helpers(ctx: Ctx) -> None:
    for name in FP8_HELPERS:
        parsed, helpers = _fp8_helpers(ctx)
        method = next((m for m in helpers if m.name.value == name), None)
        if method is None or _kgen_code(ctx, method, parsed):
            continue
        parsed = ensure_import(ctx, parsed)
        parsed, helpers = _fp8_helpers(ctx)
        method = next(m for m in helpers if m.name.value == name)
        stmt = parse_statement(f"if self.kgen_indexer:\n    raise NotImplementedError(\"{name}: the fp8 indexer "
                               f"layout; with --{FLAG.replace('_', '-')} the keys are {PKG}'s\")\n")
        insert_statements(ctx, parsed, method, _after_docstring(method), [stmt])


# ---------------------------------------------------------------------------------------------
# the memory budget


def _budget(ctx: Ctx):
    rel = ctx.tree.pick([CONFIGURATOR], "class DSV4PoolConfigurator", "memory budget")
    parsed = ctx.tree.parse(rel)
    cls = find_class(ctx.tree, parsed, "DSV4PoolConfigurator", "memory budget")
    method = find_method(ctx.tree, parsed, cls, "_get_bytes_per_full_token", "memory budget")
    found = assignments(method, "indexer_bytes")
    if len(found) != 1:
        raise Drift(ctx.tree.path(parsed.rel), "DSV4PoolConfigurator._get_bytes_per_full_token: indexer_bytes = ...",
                    len(found), "memory budget")
    return parsed, cls, method, found[0]


def audit_budget(ctx: Ctx) -> None:
    parsed, cls, method, assign = _budget(ctx)
    got = ctx.evaluate("memory budget", parsed, assign.value, lambda: ctx.evaluator().value_at(
        Function(method, parsed.scope, cls), assign, assign.value))
    bpt = ctx.layout.bytes_per_token
    if got is not None and got != bpt:
        effect = "under-budgets the indexer pool: OOM at load" if got < bpt else "over-reserves memory"
        ctx.report("engine-budget", parsed, assign.value, f"the memory budget counts {got} B/token for the indexer "
                   f"but {ctx.name} stores {bpt} B/token ({effect})", ctx.patch_fix)


def patch_budget(ctx: Ctx) -> None:
    parsed, _cls, _method, assign = _budget(ctx)
    if _kgen_code(ctx, assign, parsed):
        return
    parsed = ensure_import(ctx, parsed)
    parsed, _cls, _method, assign = _budget(ctx)
    new = expression(f"{PKG}.host.BYTES_PER_TOKEN if {PKG}.enabled() else ({code_of(parsed, assign.value)})")
    replace_node(ctx, parsed, assign.value, new)


# ---------------------------------------------------------------------------------------------
# the store


def _store(ctx: Ctx):
    rel = ctx.tree.pick([COMPRESSOR], "class CompressorBackendMixin", "indexer store")
    parsed = ctx.tree.parse(rel)
    cls = find_class(ctx.tree, parsed, "CompressorBackendMixin", "indexer store")
    method = find_method(ctx.tree, parsed, cls, "_forward_compress_all_in_one", "indexer store")
    found = calls(method, "compress_norm_rope_store")
    if len(found) != 1:
        raise Drift(ctx.tree.path(parsed.rel), "compress_norm_rope_store(...) in "
                    "CompressorBackendMixin._forward_compress_all_in_one", len(found), "indexer store")
    return parsed, cls, method, found[0]


def audit_store(ctx: Ctx) -> None:
    parsed, _cls, method, call = _store(ctx)
    routed = calls(method, f"{PKG}.store")
    if ctx.mode.flag:
        if not routed:
            ctx.report("engine-store", parsed, call, f"with --{FLAG.replace('_', '-')} the indexer store still "
                       f"calls the engine's kernel, not kgen's op for {ctx.name}", ctx.patch_fix)
        return
    _key, written = ctx.native_encoding()
    want = encoding_of(ctx.layout)
    if written != want:
        ctx.report("engine-store", parsed, call, f"the indexer store (compress_norm_rope_store, the engine's JIT "
                   f"kernel) writes {written} ({_mode_text(ctx)}) but {ctx.name} stores {want}", ctx.patch_fix)


def _kwarg(call: cst.Call, name: str, parsed, ctx: Ctx) -> str:
    arg = next((a for a in call.args if a.keyword is not None and a.keyword.value == name), None)
    if arg is None:
        raise Drift(ctx.tree.path(parsed.rel), f"compress_norm_rope_store(..., {name}=...)", 0, "indexer store")
    return code_of(parsed, arg.value)


def patch_store(ctx: Ctx) -> None:
    parsed, _cls, method, call = _store(ctx)
    if calls(method, f"{PKG}.store"):
        return
    params = [*method.params.params, *method.params.kwonly_params]
    bound = {p.name.value for p in params} | {
        dotted(a.targets[0].target) for a in collect(method, cst.Assign)}
    if "is_indexer" not in bound:
        raise Drift(ctx.tree.path(parsed.rel), "is_indexer in CompressorBackendMixin._forward_compress_all_in_one "
                    "(what tells the indexer store from the latent store)", 0, "indexer store")
    positional = [a for a in call.args if a.keyword is None]
    if len(positional) < 2:
        raise Drift(ctx.tree.path(parsed.rel), "compress_norm_rope_store(kv, plan, ...)", 0, "indexer store")
    args = [code_of(parsed, positional[0].value), code_of(parsed, positional[1].value),
            _kwarg(call, "norm_weight", parsed, ctx), _kwarg(call, "freq_cis", parsed, ctx),
            _kwarg(call, "out_loc", parsed, ctx), _kwarg(call, "kvcache", parsed, ctx)]
    parsed = ensure_import(ctx, parsed)
    parsed, _cls, method, call = _store(ctx)
    holder = next(s for s in collect(method, cst.SimpleStatementLine) if _holds(s, call))
    routed = parse_statement(f"{PKG}.store({', '.join(args)})\n")
    new_if = cst.If(test=expression(f"is_indexer and {PKG}.enabled()"), body=cst.IndentedBlock([routed]),
                    orelse=cst.Else(cst.IndentedBlock([holder.with_changes(leading_lines=())])),
                    leading_lines=holder.leading_lines)
    around_statement(ctx, parsed, holder, [new_if], "replace")


# ---------------------------------------------------------------------------------------------
# the store kernel (C++: its page-byte constant and the static_assert that refuses bf16 indexers)

_ASSERT_BF16 = re.compile(r"static_assert\(\s*!\(\s*kIsIndexer\s*&&\s*kBf16Store\s*\)")
_KPAGE = re.compile(r"kPageBytes\s*=\s*(\d+)")


def _line_col(text: str, pos: int) -> tuple[int, int]:
    return text.count("\n", 0, pos) + 1, pos - (text.rfind("\n", 0, pos) + 1) + 1


def audit_kernel(ctx: Ctx) -> None:
    lay = ctx.layout
    if ctx.mode.flag:
        rel = f"{PKG_DIR}/kernel/{ctx.name}/config.cuh"
        text = ctx.tree.text(rel) if ctx.tree.exists(rel) else ""
        m = _KPAGE.search(text)
        if m is None or int(m.group(1)) != lay.page_bytes:
            got = m.group(1) if m else "no kPageBytes"
            ctx.report_at("engine-kernel", rel, 1, 1, f"kgen's kernel for {ctx.name} in the engine tree has {got} "
                          f"B pages, the spec {lay.page_bytes} B", ctx.patch_fix)
        return
    rel = ctx.tree.pick(KERNELS, "struct FusedNormRopeKernel", "store kernel", contains="FusedNormRopeKernel")
    text = ctx.tree.text(rel)
    key, _ = ctx.native_encoding()
    constant = KERNEL_PAGE_CONSTANT[key]
    found = list(re.finditer(rf"\b{constant}\s*=\s*(\d+)\s*\*\s*kPageSize\b", text))
    if not found and key != "fp8":
        return  # versions that store fp4 keys with another kernel: nothing of this one to check
    if len(found) != 1:
        raise Drift(ctx.tree.path(rel), f"{constant} = <bytes per token> * kPageSize in struct FusedNormRopeKernel",
                    len(found), "store kernel")
    per_token = int(found[0].group(1))
    engine_page = per_token * lay.page_size  # what the kernel's stride check demands, at the spec's page size
    if engine_page != lay.page_bytes:
        line, col = _line_col(text, found[0].start())
        ctx.report_at("engine-kernel", rel, line, col, f"the store kernel checks the indexer cache stride against "
                      f"{constant} = {per_token} * kPageSize = {engine_page} B but {ctx.name} pages are "
                      f"{lay.page_bytes} B: the engine stops at start with '{lay.page_bytes} vs {engine_page}'",
                      ctx.patch_fix)
    assert_bf16 = list(_ASSERT_BF16.finditer(text))
    if ctx.spec.store.dtype == "bf16" and assert_bf16:
        line, col = _line_col(text, assert_bf16[0].start())
        ctx.report_at("engine-kernel", rel, line, col, f"static_assert(!(kIsIndexer && kBf16Store)) refuses a bf16 "
                      f"indexer store when the JIT module compiles, during server start ({ctx.name} is bf16)",
                      ctx.patch_fix)


# ---------------------------------------------------------------------------------------------
# the reader: view width, page size of the view, scorer choice, non-paged fp8 path


def _reader(ctx: Ctx):
    rel = ctx.tree.pick([INDEXER], "class C4IndexerBackendMixin", "indexer reader")
    parsed = ctx.tree.parse(rel)
    cls = find_class(ctx.tree, parsed, "C4IndexerBackendMixin", "indexer reader")
    method = find_method(ctx.tree, parsed, cls, "forward_c4_indexer", "indexer reader")
    return parsed, cls, method


def _view_width(ctx: Ctx):
    parsed, cls, method = _reader(ctx)
    found = assignments(method, "head_dim_with_sf")
    if len(found) != 1:
        raise Drift(ctx.tree.path(parsed.rel), "C4IndexerBackendMixin.forward_c4_indexer: head_dim_with_sf = ...",
                    len(found), "indexer reader view")
    return parsed, cls, method, found[0]


def audit_reader(ctx: Ctx) -> None:
    parsed, cls, method, assign = _view_width(ctx)
    fn = Function(method, parsed.scope, cls)
    lay = ctx.layout
    got = ctx.evaluate("reader view width", parsed, assign.value,
                       lambda: ctx.evaluator().value_at(fn, assign, assign.value))
    if got is not None and got != lay.bytes_per_token:
        ctx.report("engine-reader", parsed, assign.value, f"the indexer reads pages as [pages, P, 1, {got}] "
                   f"({got} B/token, {_mode_text(ctx)}) but {ctx.name} stores {lay.bytes_per_token} B/token",
                   ctx.patch_fix)
    views = [c for c in calls(method, "view") if c.args and dotted(c.args[-1].value) == "head_dim_with_sf"]
    if len(views) != 1:
        raise Drift(ctx.tree.path(parsed.rel), "kv_cache.view(pages, P, 1, head_dim_with_sf) in "
                    "C4IndexerBackendMixin.forward_c4_indexer", len(views), "indexer reader view")
    if len(views[0].args) != 4:
        raise Drift(ctx.tree.path(parsed.rel), "a 4-D reader view (pages, P, 1, width)", 0, "indexer reader view")
    page_arg = views[0].args[1].value
    stmt = next(s for s in collect(method, cst.SimpleStatementLine) if _holds(s, views[0]))
    tokens = ctx.evaluate("reader view page size", parsed, page_arg,
                          lambda: ctx.evaluator().value_at(fn, stmt, page_arg))
    if tokens is not None and tokens != lay.page_size:
        ctx.report("engine-reader", parsed, page_arg, f"the reader view has {tokens} tokens per page but "
                   f"{ctx.name} pages hold {lay.page_size}", "use a spec with the engine's page size")


def patch_reader(ctx: Ctx) -> None:
    parsed, _cls, _method, assign = _view_width(ctx)
    if _kgen_code(ctx, assign, parsed):
        return
    parsed = ensure_import(ctx, parsed)
    parsed, _cls, _method, assign = _view_width(ctx)
    new = expression(f"{PKG}.host.BYTES_PER_TOKEN if {PKG}.enabled() else ({code_of(parsed, assign.value)})")
    replace_node(ctx, parsed, assign.value, new)


def _scorer(ctx: Ctx):
    """The scorer choice: every binding of `fn` in forward_c4_indexer (`fn = X` or
    `from deep_gemm import X as fn`), in source order."""
    parsed, cls, method = _reader(ctx)
    imports = collect(method, cst.ImportFrom, lambda i: not isinstance(i.names, cst.ImportStar) and any(
        a.asname is not None and dotted(a.asname.name) == "fn" for a in i.names))
    found = sorted([*assignments(method, "fn"), *imports], key=lambda n: ctx.tree.location(parsed, n)[1:])
    if not found:
        raise Drift(ctx.tree.path(parsed.rel), "fn = <scorer> in C4IndexerBackendMixin.forward_c4_indexer", 0,
                    "indexer scorer")
    return parsed, cls, method, found


def _scorer_name(parsed, binding: cst.CSTNode) -> str:
    if isinstance(binding, cst.ImportFrom):
        alias = next(a for a in binding.names if a.asname is not None)  # type: ignore[union-attr]
        module = dotted(binding.module) if binding.module is not None else ""
        return f"{module}.{dotted(alias.name)}"
    assert isinstance(binding, cst.Assign)
    return dotted(binding.value) or code_of(parsed, binding.value)


def audit_scorer(ctx: Ctx) -> None:
    parsed, _cls, _method, found = _scorer(ctx)
    ours = [a for a in found if isinstance(a, cst.Assign) and dotted(a.value) == f"{PKG}.logits"]
    if ctx.mode.flag:
        if not ours:
            ctx.report("engine-scorer", parsed, found[0], f"with --{FLAG.replace('_', '-')} the indexer still scores "
                       f"with the engine's kernels, which cannot read {ctx.name}", ctx.patch_fix)
        return
    want = encoding_of(ctx.layout)
    _key, reads = ctx.native_encoding()
    if reads.storage() != want.storage():
        names = sorted({_scorer_name(parsed, a) for a in found if a not in ours})
        ctx.report("engine-scorer", parsed, found[0], f"the indexer scores with {', '.join(names)}, which read "
                   f"{reads} pages ({_mode_text(ctx)}); {ctx.name} stores {want} and needs kgen's scorer",
                   ctx.patch_fix)


def patch_scorer(ctx: Ctx) -> None:
    parsed, _cls, method, found = _scorer(ctx)
    if any(isinstance(a, cst.Assign) and dotted(a.value) == f"{PKG}.logits" for a in found):
        return
    parsed = ensure_import(ctx, parsed)
    parsed, _cls, method, found = _scorer(ctx)
    # right after the if/elif chain (or statement) that makes the engine's last choice, in its block
    holder = chain_statement(method, found[-1])
    stmt = parse_statement(f"if {PKG}.enabled():\n    fn = {PKG}.logits\n")
    around_statement(ctx, parsed, holder, [stmt], "after")


def _nonpaged(ctx: Ctx):
    parsed, cls, _ = _reader(ctx)
    return parsed, cls, find_method(ctx.tree, parsed, cls, "_can_use_nonpaged_indexer", "non-paged fp8 indexer")


def audit_nonpaged(ctx: Ctx) -> None:
    parsed, cls, method = _nonpaged(ctx)
    if encoding_of(ctx.layout).storage() == NATIVE["fp8"].storage():
        return  # the non-paged path reads the fp8 layout: right for an fp8 spec
    try:
        on = bool(ctx.evaluator().call(Function(method, parsed.scope, cls), [], {}))
        why = "" if on else None
    except Unknown:
        on, why = True, " (its condition does not exclude this variant)"
    if on:
        ctx.report("engine-nonpaged", parsed, method.name, f"the non-paged indexer path (fp8 only) can still run "
                   f"for {ctx.name}{why or ''}", ctx.patch_fix)


def patch_nonpaged(ctx: Ctx) -> None:
    parsed, _cls, method = _nonpaged(ctx)
    if _kgen_code(ctx, method, parsed):
        return
    parsed = ensure_import(ctx, parsed)
    parsed, _cls, method = _nonpaged(ctx)
    stmt = parse_statement(f"if {PKG}.enabled():\n    return False\n")
    insert_statements(ctx, parsed, method, _after_docstring(method), [stmt])


# ---------------------------------------------------------------------------------------------
# kgen's files in the engine tree


def _flag_read(ctx: Ctx) -> tuple[str, str]:
    """How SGLang reads a server flag, taken from the pool's own fp4 read: (import line, expression)."""
    parsed, _cls, _init, anchor = _fp4_read(ctx)
    expr = code_of(parsed, anchor.value)
    if not expr.endswith(f".{FP4_FLAG}"):
        raise KgenError([Problem("engine-anchor", f"the indexer pool reads its fp4 flag as '{expr}', not as a server "
                                 "flag attribute: kgen cannot thread its flag the same way",
                                 file=ctx.tree.path(parsed.rel), fix="update kgen/engines/sglang.py")])
    root = expr.split(".")[0].split("(")[0]
    if root not in parsed.scope.imports:
        raise Drift(ctx.tree.path(parsed.rel), f"the import of {root}", 0, "server flag access")
    module, name = parsed.scope.imports[root]
    line = f"from {module} import {name}" + (f" as {root}" if name != root else "")
    return line, expr[: -len(FP4_FLAG)] + FLAG


INIT_TEMPLATE = '''"""kgen variant {name} wired into SGLang's DeepSeek-V4 indexer by `kgen patch`.

Generated by kgen; do not edit (run kgen patch again). host.py holds the byte math, kernel/ the
kernel sources, spec.yaml the spec. The pool, the memory budget, the store and the reader use this
package only under --enable-kgen-indexer; with the flag off the engine runs unchanged.
"""

from __future__ import annotations

import os

{flag_import}

from . import host

SPEC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "spec.yaml")
VARIANT = host.NAME


def enabled() -> bool:
    """--enable-kgen-indexer: store and score the indexer keys as kgen's variant."""
    return bool({flag_expr})


def _ops():
    import torch

    import kgen.ops  # noqa: F401  (registers torch.ops.kgen.*)

    return torch.ops.kgen


def store(x, plan, weight, freqs, out_loc, cache) -> None:
    """The engine's fused norm/RoPE/store call, routed to kgen's op with the engine's own tensors
    and its {plan_kind}."""
    if freqs.is_complex():
        import torch

        freqs = torch.view_as_real(freqs).flatten(-2)  # (cos, sin) pairs: a view, no copy
    _ops().norm_rope_store(SPEC, x, weight, None, freqs, plan, out_loc, cache)


def logits(q, kv_cache, weights, seq_lens, page_table, metadata, max_seq_len, clean_logits):
    """DeepGEMM's paged-logits call, scored by kgen's reader (metadata is DeepGEMM's schedule: unused)."""
    cache = kv_cache.view(kv_cache.shape[0], host.PAGE_BYTES)
    return _ops().indexer_logits(SPEC, q, weights, cache, page_table, seq_lens, max_seq_len)
'''


def bundle(ctx: Ctx) -> dict[str, str]:
    from .bundle import variant_files

    flag_import, flag_expr = _flag_read(ctx)
    from .sites import takes_decode_plan

    plan_kind = ("DecodePlan (the spec reads it directly)" if takes_decode_plan(ctx.spec)
                 else "DecodePlan (the spec must read a DecodePlan: see kgen validate)")
    init = INIT_TEMPLATE.format(name=ctx.name, flag_import=flag_import, flag_expr=flag_expr, plan_kind=plan_kind)
    return {f"{PKG_DIR}/__init__.py": init, **variant_files(ctx, PKG_DIR)}


ADAPTER = Adapter(
    name="sglang",
    markers=("python/sglang/srt",),
    native=NATIVE,
    default_native="fp8",
    package_dir=PKG_DIR,
    package_module="sglang.kgen_indexer",
    package_alias=PKG,
    env=env,
    bundle=bundle,
    sites=(
        Site("server-flag", "engine-flag", f"the class declaring {FP4_FLAG}", audit_flag, patch_flag),
        Site("pool-flag", "engine-flag", "DeepSeekV4IndexerPool.__init__", audit_pool_flag, patch_pool_flag),
        Site("pool-bytes", "engine-pool", "DeepSeekV4IndexerPool.get_bytes_per_token", audit_pool_bytes,
             patch_pool_bytes),
        Site("pool-page", "engine-pool", "DeepSeekV4IndexerPool._create_buffer", audit_pool_page),
        Site("fp8-helpers", "engine-fp8-helper", "DeepSeekV4IndexerPool." + "/".join(FP8_HELPERS),
             audit_fp8_helpers, patch_fp8_helpers),
        Site("page-size", "engine-page-size", "DeepSeekV4TokenToKVPool._make_indexer_pool", audit_page_size),
        Site("budget", "engine-budget", "DSV4PoolConfigurator._get_bytes_per_full_token", audit_budget, patch_budget),
        Site("store", "engine-store", "CompressorBackendMixin._forward_compress_all_in_one", audit_store, patch_store),
        Site("kernel", "engine-kernel", "FusedNormRopeKernel", audit_kernel),
        Site("reader", "engine-reader", "C4IndexerBackendMixin.forward_c4_indexer", audit_reader, patch_reader),
        Site("scorer", "engine-scorer", "C4IndexerBackendMixin.forward_c4_indexer", audit_scorer, patch_scorer),
        Site("nonpaged", "engine-nonpaged", "C4IndexerBackendMixin._can_use_nonpaged_indexer", audit_nonpaged,
             patch_nonpaged),
    ),
)
