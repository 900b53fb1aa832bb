"""SGLang's DeepSeek-V4 C4 indexer keys as a table of sites (facts read from SGLang's releases).

The 132 B/token fact lives in several places that must agree - the pool (through the module helper
`get_dsv4_indexer_bytes_per_token` where the version has one), the memory budget, the store call,
the reader view, the store kernel - plus the page size, the scorer choice, the query path, the
fp8-only non-paged path and the flags. Each site below finds its place by class/function/
assignment/call name, reads what the engine computes there, and (for `kgen patch`) rewrites it
behind one server flag, `--enable-kgen-indexer`.

How the flag travels (so that it reaches the C4 indexer pool and nothing else): the token pool's
factory `_make_indexer_pool` reads it once, at start-up, for the one pool it builds without
`force_fp4` (the C4 pool; DeepSeek-V4.1's low-ratio pools are built with `force_fp4=True` and never
see it), and passes it as the pool's constructor argument `use_kgen_indexer` (default False: a pool
built by anyone else reads no global state). Every consumer then asks that pool
(`kgen_indexer.in_use(token_to_kv_pool)`), and the budget passes the flag to the shared helper.
With the flag off every edited function computes what it computed before.
"""

from __future__ import annotations

import re

import libcst as cst

from ..diagnostics import KgenError, Problem
from .pyedit import LINE, Lines, call, if_block, indent_of, source_lines, span, ternary, text_lines
from .pyeval import UNKNOWN, Function, Returns, Unknown, dotted, methods
from .sites import Adapter, Ctx, Encoding, Site, code_of, encoding_of
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
    one,
    statement_of,
)

POOL = "python/sglang/srt/mem_cache/deepseek_v4_memory_pool.py"
CONFIGURATOR = "python/sglang/srt/model_executor/pool_configurator.py"
COMPRESSOR = "python/sglang/srt/layers/attention/dsv4/compressor_v2.py"
INDEXER = "python/sglang/srt/layers/attention/dsv4/indexer.py"
METADATA = "python/sglang/srt/layers/attention/dsv4/metadata.py"
# the JIT store kernel moved from jit_kernel/ to kernels/jit/ between versions
KERNELS = ("python/sglang/jit_kernel/csrc/deepseek_v4/fused_norm_rope_v2.cuh",
           "python/sglang/kernels/jit/csrc/deepseek_v4/fused_norm_rope_v2.cuh")
# Server flags are annotated fields: on ServerArgs (older trees), or in a per-namespace class of
# arg_groups/fields/ (`ExecKernel` in exec_.py) that ServerArgs collects its fields from.
SERVER_ARGS = "python/sglang/srt/server_args.py"
ARG_FIELDS_DIR = "python/sglang/srt/arg_groups/fields"
# the positional order of ServerArgs' fields: new fields are appended to its tuple
FIELD_ORDER = "python/sglang/srt/arg_groups/field_order.py"
PYPROJECT = "python/pyproject.toml"

HELPER = "get_dsv4_indexer_bytes_per_token"
FP4_FLAG = "enable_deepseek_v4_fp4_indexer"
FLAG = "enable_kgen_indexer"
FLAG_CLI = "--" + FLAG.replace("_", "-")
PARAM = "use_kgen_indexer"  # the pool's constructor argument and the helper's keyword
PKG = "kgen_indexer"
PKG_DIR = "python/sglang/kgen_indexer"
IMPORT = f"from sglang import {PKG}"
# SGLang's default --page-size for DeepSeek-V4; the C4 indexer page holds a quarter of it
DEFAULT_PAGE_SIZE = 256

# The engine's own indexer-key encodings (its JIT store kernel and DeepGEMM's paged logits read
# exactly these): fp8 e4m3 + one fp32 scale per 128, or fp4 e2m1 + one ue8m0 per 32.
NATIVE = {"fp8": Encoding("fp8_e4m3", "fp32", 128), "fp4": Encoding("fp4_e2m1", "ue8m0", 32)}
# which constant of the store kernel gives the page bytes its host side checks, per native mode
# (the fp4 one is a member in some versions, a local of forward_fp4 in others)
KERNEL_PAGE_CONSTANT = {"fp8": ("kIndexerBytes",), "fp4": ("kIndexerFp4Bytes", "kFp4PageBytes")}
# the device function that stores the keys, per native mode: newer versions restate the page bytes
# there as `kPageBytes = <bytes per token>ll << kPageBits` (the addressing of every store)
KERNEL_DEVICE_FUNCTION = {"fp8": "fused_norm_rope_indexer", "fp4": "fused_norm_rope_indexer_fp4"}


def env(ctx: Ctx) -> dict[str, object]:
    """SGLang's configuration in the audited mode, by the spelling its code reads it with. The
    platform is CUDA (kgen's kernels run there; the patch refuses HIP and XPU at start-up)."""
    fp4 = ctx.native_encoding()[0] == "fp4"
    flag = ctx.mode.flag
    h = ctx.spec.head_dim
    return {
        "self.index_head_dim": h, "self.indexer_head_dim": h,
        "self.use_fp4_indexer": fp4, "use_fp4_indexer": fp4, "c4_indexer.use_fp4_indexer": fp4,
        f"get_exec().kernel.{FP4_FLAG}": fp4, f"get_exec().kernel.{FLAG}": flag,
        f"self.{PARAM}": flag, f"{PKG}.enabled()": flag, f"{PKG}.in_use": Returns(flag),
        "_is_hip": False, "_is_npu": False, "_is_xpu": False, "is_hip()": False, "is_xpu()": False,
    }


def _mode_text(ctx: Ctx) -> str:
    if ctx.mode.flag:
        return f"with {FLAG_CLI}"
    key, _ = ctx.native_encoding()
    return "fp4 indexer" if key == "fp4" else "fp8 indexer, the default"


def _holds(stmt: cst.CSTNode, node: cst.CSTNode) -> bool:
    """Whether `node` (by identity) lies inside `stmt`."""
    return any(n is node for n in collect_all(stmt))


def _kgen_code(node: cst.CSTNode, parsed) -> bool:
    return PKG in code_of(parsed, node)


def _statement(fn: cst.CSTNode, node: cst.CSTNode) -> cst.BaseStatement:
    """The statement around `node` that lines can be inserted around (an anchor in an `if` header or a
    one-line suite gives that `if`: kgen.engines.tree.statement_of)."""
    return statement_of(fn, node)


# ---------------------------------------------------------------------------------------------
# edits as whole lines (kgen/engines/pyedit.py): the engine's lines keep their bytes


def _edit(ctx: Ctx, parsed, change) -> None:
    lines = Lines(parsed.text)
    change(lines)
    ctx.tree.write(parsed.rel, lines.apply())


def ensure_import(ctx: Ctx, rel: str) -> None:
    """`from sglang import kgen_indexer` where isort (profile black) puts it: first of the module's
    top-level `from sglang...` imports (`sglang` sorts before `sglang.x`), or after its imports."""
    parsed = ctx.tree.parse(rel)
    if IMPORT in text_lines(parsed.text):
        return
    top = [s for s in parsed.module.body if isinstance(s, cst.SimpleStatementLine)
           and any(isinstance(x, (cst.Import, cst.ImportFrom)) for x in s.body)]
    own = [s for s in top for x in s.body if isinstance(x, cst.ImportFrom) and x.module is not None
           and not x.relative and (dotted(x.module) or "").split(".")[0] == "sglang"]
    if any(isinstance(x, cst.ImportFrom) and dotted(x.module) == "sglang" for s in own for x in s.body
           if isinstance(x, cst.ImportFrom) and x.module is not None):
        raise Drift(ctx.tree.path(rel), "no `from sglang import ...` line (kgen adds its own)", 2, "imports")
    if own:
        _edit(ctx, parsed, lambda lines: lines.insert_before(span(parsed, own[0])[0], [IMPORT]))
    elif top:
        _edit(ctx, parsed, lambda lines: lines.insert_after(span(parsed, top[-1])[1], ["", IMPORT]))
    else:
        raise Drift(ctx.tree.path(rel), "a top-level import to place kgen's import after", 0, "imports")


def _args_code(parsed, node: cst.Call) -> list[str]:
    return [code_of(parsed, a).rstrip().rstrip(",").strip() for a in node.args]


def add_keyword(ctx: Ctx, parsed, stmt: cst.BaseStatement, node: cst.Call, keyword: str) -> None:
    """Append `keyword` (`name=value`) to the call `node`, the only call of statement `stmt`'s
    line structure: a call already one argument per line with a trailing comma gets one more line;
    otherwise the statement is rewritten as black writes the longer call."""
    first, last = span(parsed, stmt)
    text = source_lines(parsed, stmt)
    if node.args and node.args[-1].comma is not cst.MaybeSentinel.DEFAULT and len(text) > 2 \
            and text[-2].rstrip().endswith(","):
        arg_line = text[-2]
        indent = arg_line[: len(arg_line) - len(arg_line.lstrip())]
        _edit(ctx, parsed, lambda lines: lines.insert_after(last - 1, [f"{indent}{keyword},"]))
        return
    start = parsed.positions[node].start
    head_line = text[0]
    col = start.column if start.line == first else None
    open_at = head_line.index("(", col or 0) if col is not None else -1
    if col is None or open_at < 0 or not text[-1].rstrip().endswith(")"):
        raise Drift(ctx.tree.path(parsed.rel), f"a call statement kgen can extend with {keyword}", 0, "edit")
    indent = head_line[: len(head_line) - len(head_line.lstrip())]
    head = head_line[len(indent):open_at]
    new = call(indent, head, [*_args_code(parsed, node), keyword])
    _edit(ctx, parsed, lambda lines: lines.replace(first, last, new))


def add_parameter(ctx: Ctx, parsed, fn: cst.FunctionDef, param: str) -> None:
    """Append `param` (`name: type = default`) to a function's parameters, as black writes them."""
    header_first = span(parsed, fn.name)[0]
    body_first = span(parsed, fn.body.body[0])[0] if fn.body.body else header_first + 1
    lines_ = text_lines(parsed.text)[header_first - 1:body_first - 1]
    while lines_ and not lines_[-1].rstrip().endswith(":"):
        lines_.pop()  # comments or a docstring start: the header ends at its colon
    last = header_first + len(lines_) - 1
    params = fn.params
    if params.star_kwarg is not None or params.kwonly_params or params.star_arg is not cst.MaybeSentinel.DEFAULT:
        raise Drift(ctx.tree.path(parsed.rel), f"{fn.name.value}'s parameters without * or ** (kgen appends one)",
                    0, "edit")
    if len(lines_) > 2 and lines_[-2].rstrip().endswith(","):
        arg_line = lines_[-2]
        indent = arg_line[: len(arg_line) - len(arg_line.lstrip())]
        _edit(ctx, parsed, lambda lines: lines.insert_after(last - 1, [f"{indent}{param},"]))
        return
    indent = lines_[0][: len(lines_[0]) - len(lines_[0].lstrip())]
    names = [code_of(parsed, p).rstrip().rstrip(",").strip() for p in params.params]
    returns = f" -> {code_of(parsed, fn.returns.annotation)}" if fn.returns is not None else ""
    new = call(indent, f"def {fn.name.value}", [*names, param], f"{returns}:")
    _edit(ctx, parsed, lambda lines: lines.replace(header_first, last, new))


def guard_first(ctx: Ctx, parsed, fn: cst.FunctionDef, test: str, body) -> None:
    """Put `if test: <body>` first in `fn` (after its docstring); `body` is a list of statements
    or a function of the body's indent returning its lines."""
    statements = fn.body.body
    at = statements[1] if _has_docstring(fn) and len(statements) > 1 else statements[0]
    indent = indent_of(parsed, at)
    lines_ = body(indent + "    ") if callable(body) else [f"{indent}    {b}" for b in body]
    block = if_block(indent, test, lines_)
    _edit(ctx, parsed, lambda lines: lines.insert_before(span(parsed, at)[0], block))


def _has_docstring(fn: cst.FunctionDef) -> bool:
    body = fn.body.body
    return bool(body) and isinstance(body[0], cst.SimpleStatementLine) and isinstance(body[0].body[0], cst.Expr) \
        and isinstance(body[0].body[0].value, (cst.SimpleString, cst.ConcatenatedString))


# ---------------------------------------------------------------------------------------------
# server flag and its registration


def _server_args(ctx: Ctx):
    found = []
    for rel in [SERVER_ARGS, *ctx.tree.files_under(ARG_FIELDS_DIR, ".py")]:
        if ctx.tree.exists(rel):
            parsed = ctx.tree.parse(rel)
            found += [(parsed, cls, field) for cls, field in find_classes_with(parsed, FP4_FLAG)]
    if len(found) != 1:
        raise Drift(ctx.tree.path(found[1][0].rel) if len(found) > 1 else None,
                    f"the class declaring {FP4_FLAG} in {SERVER_ARGS} or {ARG_FIELDS_DIR}/*.py", len(found),
                    "server flags")
    return found[0]


FLAG_HELP = "Store and score the DeepSeek-V4 C4 indexer keys as kgen's variant (kgen patch)."


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
        ctx.report("engine-flag", parsed, cls, f"{FLAG_CLI} exists but kgen's files in {PKG_DIR} hold {held}, "
                   f"not {ctx.name}", ctx.patch_fix)


def patch_flag(ctx: Ctx) -> None:
    parsed, _cls, field = _server_args(ctx)
    if find_classes_with(parsed, FLAG):
        return
    holder = _statement(parsed.module, field)
    indent = indent_of(parsed, holder)
    ann = field.annotation.annotation
    if isinstance(ann, cst.Subscript) and len(ann.slice) >= 2:
        # `A[bool, "help", NS(...)]`: the annotation makes the CLI flag; trailing metadata is kept
        rest = [code_of(parsed, el.slice.value) for el in ann.slice[2:] if isinstance(el.slice, cst.Index)]
        elements = ["bool", f'"{FLAG_HELP}"', *rest]
        new = [f"{indent}{FLAG}: {code_of(parsed, ann.value)}[", *(f"{indent}    {e}," for e in elements),
               f"{indent}] = False"]
    else:
        new = [f"{indent}# {FLAG_HELP}", f"{indent}{FLAG}: bool = False"]
    _edit(ctx, parsed, lambda lines: lines.insert_after(span(parsed, holder)[1], new))


def _field_order(ctx: Ctx):
    """(parsed, tuple) of the field-order tuple that lists the fp4 flag, or None without the file."""
    if not ctx.tree.exists(FIELD_ORDER):
        return None
    parsed = ctx.tree.parse(FIELD_ORDER)
    found = [v for v in parsed.scope.constants.values() if isinstance(v, (cst.Tuple, cst.List))
             and any(isinstance(e.value, cst.SimpleString) and e.value.evaluated_value == FP4_FLAG
                     for e in v.elements)]
    return parsed, one(found, ctx.tree, parsed, f"the field-order tuple listing '{FP4_FLAG}'", "server field order")


def _lists_flag(value: cst.Tuple | cst.List) -> bool:
    return any(isinstance(e.value, cst.SimpleString) and e.value.evaluated_value == FLAG for e in value.elements)


def audit_field_order(ctx: Ctx) -> None:
    found = _field_order(ctx)
    if found is None or not ctx.mode.flag:
        return
    parsed, value = found
    if not _lists_flag(value):
        ctx.report("engine-flag", parsed, value, f"{FLAG} is not in the field order (ServerArgs' positional "
                   "signature): the field lands after the extension fields", ctx.patch_fix)


def patch_field_order(ctx: Ctx) -> None:
    found = _field_order(ctx)
    if found is None:
        return
    parsed, value = found
    if _lists_flag(value):
        return
    last = value.elements[-1]
    line = text_lines(parsed.text)[span(parsed, last)[0] - 1]
    indent = line[: len(line) - len(line.lstrip())]
    # appended: the tuple is ServerArgs' positional order, and inserting would shift existing calls
    _edit(ctx, parsed, lambda lines: lines.insert_after(span(parsed, last)[1], [f'{indent}"{FLAG}",']))


# ---------------------------------------------------------------------------------------------
# the pool: the shared helper, the flag parameter, bytes per token, page bytes, the factory


def _pool(ctx: Ctx, cls_name: str = "DeepSeekV4IndexerPool"):
    rel = ctx.tree.pick([POOL], f"class {cls_name}", "indexer pool")
    parsed = ctx.tree.parse(rel)
    return parsed, find_class(ctx.tree, parsed, cls_name, "indexer pool")


def _helper(ctx: Ctx):
    """(parsed, def) of the module helper the pool and the budget share, or (parsed, None) in
    versions without one (the pool's method computes the bytes itself)."""
    parsed = ctx.tree.parse(ctx.tree.pick([POOL], f"function {HELPER}", "indexer bytes helper"))
    found = [s for s in parsed.module.body if isinstance(s, cst.FunctionDef) and s.name.value == HELPER]
    return parsed, one(found, ctx.tree, parsed, f"function {HELPER}", "indexer bytes helper") if found else None


def _takes(fn: cst.FunctionDef, name: str) -> bool:
    return any(p.name.value == name for p in [*fn.params.params, *fn.params.kwonly_params])


def audit_helper(ctx: Ctx) -> None:
    parsed, helper = _helper(ctx)
    if helper is not None and ctx.mode.flag and not _takes(helper, PARAM):
        ctx.report("engine-pool", parsed, helper.name, f"{HELPER} has no {PARAM} parameter: the pool and the "
                   f"budget it feeds cannot size {ctx.name}", ctx.patch_fix)


def patch_helper(ctx: Ctx) -> None:
    parsed, helper = _helper(ctx)
    if helper is None or _takes(helper, PARAM):
        return
    ensure_import(ctx, parsed.rel)
    parsed, helper = _helper(ctx)
    assert helper is not None
    add_parameter(ctx, parsed, helper, f"{PARAM}: bool = False")
    parsed, helper = _helper(ctx)
    assert helper is not None
    guard_first(ctx, parsed, helper, PARAM, [f"return {PKG}.host.BYTES_PER_TOKEN"])


def _init(ctx: Ctx):
    parsed, cls = _pool(ctx)
    init = find_method(ctx.tree, parsed, cls, "__init__", "indexer pool flags")
    anchor = one(assignments(init, "self.use_fp4_indexer"), ctx.tree, parsed,
                 "DeepSeekV4IndexerPool.__init__: self.use_fp4_indexer = ...", "indexer pool flags")
    return parsed, cls, init, anchor


def audit_pool_flag(ctx: Ctx) -> None:
    parsed, _cls, init, anchor = _init(ctx)
    if ctx.mode.flag and not (_takes(init, PARAM) and assignments(init, f"self.{PARAM}")):
        ctx.report("engine-flag", parsed, anchor, f"the indexer pool has no {PARAM} argument: it sizes "
                   f"{ctx.name}'s pages from the engine's own flags", ctx.patch_fix)


def patch_pool_flag(ctx: Ctx) -> None:
    parsed, _cls, init, anchor = _init(ctx)
    if _takes(init, PARAM):
        return
    add_parameter(ctx, parsed, init, f"{PARAM}: bool = False")
    parsed, _cls, init, anchor = _init(ctx)
    stmt = _statement(init, anchor)
    indent = indent_of(parsed, stmt)
    _edit(ctx, parsed, lambda lines: lines.insert_after(span(parsed, stmt)[1], [f"{indent}self.{PARAM} = {PARAM}"]))


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
    if _kgen_code(method, parsed) or PARAM in code_of(parsed, method):
        return
    helper_calls = calls(method, HELPER)
    if helper_calls:  # the pool asks the shared helper: it passes its flag on
        (node,) = helper_calls
        add_keyword(ctx, parsed, _statement(method, node), node, f"{PARAM}=self.{PARAM}")
        return
    ensure_import(ctx, parsed.rel)
    parsed, _cls, method = _bytes_method(ctx)
    guard_first(ctx, parsed, method, f"self.{PARAM}", [f"return {PKG}.host.BYTES_PER_TOKEN"])


def audit_pool_page(ctx: Ctx) -> None:
    parsed, cls = _pool(ctx)
    method = find_method(ctx.tree, parsed, cls, "_create_buffer", "indexer pool pages")
    anchor = one(assignments(method, "page_bytes"), ctx.tree, parsed,
                 "DeepSeekV4IndexerPool._create_buffer: page_bytes = ...", "indexer pool pages")
    lay = ctx.layout
    # pages of the spec's size here: a page-size disagreement is the page-size site's finding
    got = ctx.evaluate("indexer page bytes", parsed, anchor, lambda: ctx.evaluator().value_at(
        Function(method, parsed.scope, cls), anchor, anchor.value, {"self.page_size": lay.page_size}))
    if got is not None and got != lay.page_bytes:
        ctx.report("engine-pool", parsed, anchor, f"the indexer pool allocates pages of {got} B "
                   f"({_mode_text(ctx)}) but {ctx.name} pages are {lay.page_bytes} B ({lay.page_bytes_formula()})",
                   ctx.patch_fix)


def _factory(ctx: Ctx):
    """The factory and its pool constructions: (parsed, method, c4 calls, force_fp4 calls). A
    construction inside `if force_fp4:` or passing `use_fp4_indexer=True` is a low-ratio pool."""
    parsed, cls = _pool(ctx, "DeepSeekV4TokenToKVPool")
    method = find_method(ctx.tree, parsed, cls, "_make_indexer_pool", "indexer pool factory")
    built = calls(method, "DeepSeekV4IndexerPool")
    forced = [c for c in built if _forces_fp4(method, c)]
    c4 = [c for c in built if c not in forced]
    if len(c4) != 1:
        raise Drift(ctx.tree.path(parsed.rel), "one DeepSeekV4IndexerPool(...) without force_fp4 in "
                    "DeepSeekV4TokenToKVPool._make_indexer_pool", len(c4), "indexer pool factory")
    return parsed, method, c4[0], forced


def _forces_fp4(method: cst.FunctionDef, node: cst.Call) -> bool:
    if any(a.keyword is not None and a.keyword.value == "use_fp4_indexer" and dotted(a.value) == "True"
           for a in node.args):
        return True
    return any(dotted(i.test) == "force_fp4" and _holds(i.body, node) for i in collect(method, cst.If))


def _passes_flag(node: cst.Call) -> bool:
    return any(a.keyword is not None and a.keyword.value == PARAM for a in node.args)


def audit_factory(ctx: Ctx) -> None:
    parsed, _method, c4, forced = _factory(ctx)
    for node in forced:
        if _passes_flag(node):
            ctx.report("engine-flag", parsed, node, f"a force_fp4 (low-ratio) indexer pool is built with {PARAM}: "
                       f"it would allocate {ctx.layout.bytes_per_token} B/token against its fp4 budget",
                       "pass the flag to the C4 pool only")
    if ctx.mode.flag and not _passes_flag(c4):
        ctx.report("engine-flag", parsed, c4, f"the factory builds the C4 indexer pool without {PARAM}: "
                   f"{FLAG_CLI} never reaches it", ctx.patch_fix)


def patch_factory(ctx: Ctx) -> None:
    parsed, method, c4, _forced = _factory(ctx)
    if _passes_flag(c4):
        return
    ensure_import(ctx, parsed.rel)
    parsed, method, c4, _forced = _factory(ctx)
    add_keyword(ctx, parsed, _statement(method, c4), c4, f"{PARAM}={PKG}.enabled()")


def audit_page_size(ctx: Ctx) -> None:
    """The C4 indexer pages' token count where the token pool builds the C4 pool (at the default
    --page-size). Calls passing force_fp4 build the low-ratio pools and are not this cache; calls
    whose argument the interpreter cannot follow (a comprehension's ratio) are left to the reader
    site, whose view states the page size the scorer assumes."""
    parsed, cls = _pool(ctx, "DeepSeekV4TokenToKVPool")
    find_method(ctx.tree, parsed, cls, "_make_indexer_pool", "indexer pool factory")
    sites = [(method, c) for method in methods(cls).values() for c in calls(method, "self._make_indexer_pool")]
    if not sites:
        raise Drift(ctx.tree.path(parsed.rel), "self._make_indexer_pool(...) in a method of DeepSeekV4TokenToKVPool",
                    0, "indexer pool factory")
    for method, node in sites:
        if any(a.keyword is not None and a.keyword.value == "force_fp4" for a in node.args):
            continue
        fn = Function(method, parsed.scope, cls)
        positional = [a for a in node.args if a.keyword is None]
        arg = next((a for a in node.args if a.keyword is not None and a.keyword.value == "page_size"),
                   positional[1] if len(positional) > 1 else None)
        if arg is None:
            raise Drift(ctx.tree.path(parsed.rel), "self._make_indexer_pool(size, page_size, ...)", 0,
                        "indexer pool factory")
        try:
            got = ctx.evaluator().value_at(fn, _statement(method, node), arg.value,
                                           {"page_size": DEFAULT_PAGE_SIZE, "self.page_size": DEFAULT_PAGE_SIZE})
        except Unknown:
            continue
        if got != ctx.layout.page_size:
            ctx.report("engine-page-size", parsed, arg.value, f"indexer pages hold {got} tokens (at the default "
                       f"--page-size {DEFAULT_PAGE_SIZE}) but {ctx.name} pages hold {ctx.layout.page_size}",
                       "use a spec with the engine's page size")


# The pool's helpers for the engine's own layouts (fp8 quantize-and-store, split pages into keys and
# scales, the fp4 store): right for those layouts only. Which of them a version has varies; each one
# present is guarded.
FP8_HELPERS = ("set_index_fused", "set_index_k_scale_buffer", "get_index_k_scale_buffer", "set_index_fp4")


def _fp8_helpers(ctx: Ctx):
    parsed, cls = _pool(ctx)
    return parsed, [m for name, m in methods(cls).items() if name in FP8_HELPERS]


def audit_fp8_helpers(ctx: Ctx) -> None:
    if not ctx.mode.flag:
        return
    parsed, helpers = _fp8_helpers(ctx)
    for m in helpers:
        if f"self.{PARAM}" not in code_of(parsed, m):
            ctx.report("engine-fp8-helper", parsed, m.name, f"DeepSeekV4IndexerPool.{m.name.value} reads or writes "
                       f"the engine's own (fp8/fp4) layout and stays callable with {FLAG_CLI} ({ctx.name})",
                       ctx.patch_fix)


def patch_fp8_helpers(ctx: Ctx) -> None:
    for name in FP8_HELPERS:
        parsed, helpers = _fp8_helpers(ctx)
        m = next((h for h in helpers if h.name.value == name), None)
        if m is None or f"self.{PARAM}" in code_of(parsed, m):
            continue
        message = f'"{name}: the keys are kgen\'s ({FLAG_CLI})"'
        guard_first(ctx, parsed, m, f"self.{PARAM}",
                    lambda inner, message=message: call(inner, "raise NotImplementedError", [message]))


def _pd_layout(ctx: Ctx):
    """(parsed, method) of DeepSeekV4TokenToKVPool.pd_kv_layout, or None in versions without it."""
    parsed, cls = _pool(ctx, "DeepSeekV4TokenToKVPool")
    found = methods(cls).get("pd_kv_layout")
    return (parsed, found) if found is not None else None


def audit_pd_layout(ctx: Ctx) -> None:
    found = _pd_layout(ctx)
    if found is None or not ctx.mode.flag:
        return
    parsed, method = found
    if not _kgen_code(method, parsed):
        ctx.report("engine-pd", parsed, method.name, "the PD handshake (pd_kv_layout) does not name the indexer "
                   f"layout: a prefill peer without {FLAG_CLI} would send fp8 keys to a {ctx.name} decode peer",
                   ctx.patch_fix)


def patch_pd_layout(ctx: Ctx) -> None:
    found = _pd_layout(ctx)
    if found is None or _kgen_code(found[1], found[0]):
        return
    parsed, method = found
    final = [s for s in method.body.body if isinstance(s, cst.SimpleStatementLine)
             and isinstance(s.body[0], cst.Return)]
    if not final or final[-1] is not method.body.body[-1]:
        raise Drift(ctx.tree.path(parsed.rel), "pd_kv_layout ending in `return <layout string>`", 0, "PD handshake")
    ensure_import(ctx, parsed.rel)
    found = _pd_layout(ctx)
    assert found is not None
    parsed, method = found
    ret = method.body.body[-1]
    indent = indent_of(parsed, ret)
    value = " ".join(part.strip() for part in code_of(parsed, ret.body[0].value).splitlines())
    inner = indent + "    "
    ours = [f"{inner}return {PKG}.pd_layout({value})"]
    if len(ours[0]) > LINE:
        ours = [f"{inner}layout = {value}", f"{inner}return {PKG}.pd_layout(layout)"]
    new = if_block(indent, f"{PKG}.in_use(self)", ours)
    _edit(ctx, parsed, lambda lines: lines.insert_before(span(parsed, ret)[0], new))


# ---------------------------------------------------------------------------------------------
# the memory budget


def _budget(ctx: Ctx):
    """The budget's indexer bytes: `self.indexer_bytes_per_token = get_dsv4_indexer_bytes_per_token(
    ...)` in DSV4PoolConfigurator.__init__ (versions with the helper), else `indexer_bytes = ...` in
    its _get_bytes_per_full_token. Returns (parsed, cls, method, assignment, helper call or None)."""
    parsed = ctx.tree.parse(ctx.tree.pick([CONFIGURATOR], "class DSV4PoolConfigurator", "memory budget"))
    cls = find_class(ctx.tree, parsed, "DSV4PoolConfigurator", "memory budget")
    shapes: list[tuple[cst.FunctionDef, cst.Assign, cst.Call | None]] = []
    init = methods(cls).get("__init__")
    if init is not None:
        for a in assignments(init, "self.indexer_bytes_per_token"):
            helper_calls = calls(a.value, HELPER)
            if len(helper_calls) == 1:
                shapes.append((init, a, helper_calls[0]))
    per_token = methods(cls).get("_get_bytes_per_full_token")
    if per_token is not None:
        shapes += [(per_token, a, None) for a in assignments(per_token, "indexer_bytes")]
    if len(shapes) != 1:
        raise Drift(ctx.tree.path(parsed.rel), f"DSV4PoolConfigurator.__init__: self.indexer_bytes_per_token = "
                    f"{HELPER}(...), or DSV4PoolConfigurator._get_bytes_per_full_token: indexer_bytes = ...",
                    len(shapes), "memory budget")
    method, assign, helper_call = shapes[0]
    return parsed, cls, method, assign, helper_call


def audit_budget(ctx: Ctx) -> None:
    parsed, cls, method, assign, _ = _budget(ctx)
    got = ctx.evaluate("memory budget", parsed, assign.value, lambda: ctx.evaluator().value_at(
        Function(method, parsed.scope, cls), assign, assign.value))
    bpt = ctx.layout.bytes_per_token
    # The engine may reserve more than its own pool takes (CUDA's fp4 pool is budgeted at the fp8
    # bytes by design); with kgen's flag the budget must be exact, and never below the pool.
    if got is not None and (got < bpt or (got != bpt and ctx.mode.native is None)):
        effect = "under-budgets the indexer pool: OOM at load" if got < bpt else "over-reserves memory"
        ctx.report("engine-budget", parsed, assign.value, f"the memory budget counts {got} B/token for the indexer "
                   f"but {ctx.name} stores {bpt} B/token ({effect})", ctx.patch_fix)


def patch_budget(ctx: Ctx) -> None:
    parsed, cls, method, assign, helper_call = _budget(ctx)
    if _kgen_code(assign, parsed):
        return
    ensure_import(ctx, parsed.rel)
    parsed, cls, method, assign, helper_call = _budget(ctx)
    stmt = _statement(method, assign)
    if helper_call is not None:
        add_keyword(ctx, parsed, stmt, helper_call, f"{PARAM}={PKG}.enabled()")
        return
    indent = indent_of(parsed, stmt)
    value = assign.value
    inner = value.with_changes(lpar=(), rpar=()) if value.lpar else value
    engine = cst.Module(body=[]).code_for_node(inner)
    if "\n" in engine:
        engine = " ".join(part.strip() for part in engine.splitlines())
    target = code_of(parsed, assign.targets[0].target)
    new = ternary(indent, f"{target} = ", f"{PKG}.host.BYTES_PER_TOKEN", f"{PKG}.enabled()", engine)
    _edit(ctx, parsed, lambda lines: lines.replace(*span(parsed, stmt), new))


def audit_low_ratio_budget(ctx: Ctx) -> None:
    """The V4.1 low-ratio pools' budget (`self.low_ratio_index_bytes = helper(..., use_fp4_indexer=True)`)
    must not take kgen's flag: those pools never see it."""
    parsed = ctx.tree.parse(ctx.tree.pick([CONFIGURATOR], "class DSV4PoolConfigurator", "memory budget"))
    cls = find_class(ctx.tree, parsed, "DSV4PoolConfigurator", "memory budget")
    for method in methods(cls).values():
        for a in assignments(method, "self.low_ratio_index_bytes"):
            if PARAM in code_of(parsed, a):
                ctx.report("engine-budget", parsed, a, f"the low-ratio indexer budget passes {PARAM}: those pools "
                           "are fp4 whatever the flag", "pass the flag to the C4 budget only")


# ---------------------------------------------------------------------------------------------
# the store


def _store(ctx: Ctx):
    parsed = ctx.tree.parse(ctx.tree.pick([COMPRESSOR], "class CompressorBackendMixin", "indexer store"))
    cls = find_class(ctx.tree, parsed, "CompressorBackendMixin", "indexer store")
    method = find_method(ctx.tree, parsed, cls, "_forward_compress_all_in_one", "indexer store")
    node = one(calls(method, "compress_norm_rope_store"), ctx.tree, parsed,
               "compress_norm_rope_store(...) in CompressorBackendMixin._forward_compress_all_in_one", "indexer store")
    return parsed, cls, method, node


def audit_store(ctx: Ctx) -> None:
    parsed, _cls, method, node = _store(ctx)
    routed = calls(method, f"{PKG}.store")
    if ctx.mode.flag:
        if not routed:
            ctx.report("engine-store", parsed, node, f"with {FLAG_CLI} the indexer store still calls the engine's "
                       f"kernel, not kgen's op for {ctx.name}", ctx.patch_fix)
        elif not any(a.keyword is None and "eps" in code_of(parsed, a) for a in routed[0].args):
            ctx.report("engine-store", parsed, routed[0], "kgen's store is not given the model's norm eps",
                       ctx.patch_fix)
        return
    _key, written = ctx.native_encoding()
    want = encoding_of(ctx.layout)
    if written != want:
        ctx.report("engine-store", parsed, node, f"the indexer store (compress_norm_rope_store, the engine's JIT "
                   f"kernel) writes {written} ({_mode_text(ctx)}) but {ctx.name} stores {want}", ctx.patch_fix)


def _kwarg(node: cst.Call, name: str, parsed, ctx: Ctx) -> str:
    arg = next((a for a in node.args if a.keyword is not None and a.keyword.value == name), None)
    if arg is None:
        raise Drift(ctx.tree.path(parsed.rel), f"compress_norm_rope_store(..., {name}=...)", 0, "indexer store")
    return code_of(parsed, arg.value)


def patch_store(ctx: Ctx) -> None:
    parsed, _cls, method, node = _store(ctx)
    if calls(method, f"{PKG}.store"):
        return
    bound = {p.name.value for p in [*method.params.params, *method.params.kwonly_params]}
    for needed in ("is_indexer", "compress_ratio"):
        if needed not in bound:
            raise Drift(ctx.tree.path(parsed.rel), f"parameter {needed} of CompressorBackendMixin."
                        "_forward_compress_all_in_one", 0, "indexer store")
    positional = [a for a in node.args if a.keyword is None]
    if len(positional) < 2:
        raise Drift(ctx.tree.path(parsed.rel), "compress_norm_rope_store(kv, plan, ...)", 0, "indexer store")
    args = [code_of(parsed, positional[0].value), code_of(parsed, positional[1].value),
            _kwarg(node, "norm_weight", parsed, ctx), _kwarg(node, "norm_eps", parsed, ctx),
            _kwarg(node, "freq_cis", parsed, ctx), _kwarg(node, "out_loc", parsed, ctx),
            _kwarg(node, "kvcache", parsed, ctx)]
    ensure_import(ctx, parsed.rel)
    parsed, _cls, method, node = _store(ctx)
    stmt = _statement(method, node)
    indent = indent_of(parsed, stmt)
    test = f"is_indexer and {PKG}.in_use(self.token_to_kv_pool, compress_ratio)"
    routed = call(indent + "    ", f"{PKG}.store", args)
    if method.body.body[-1] is stmt:  # the store ends the method: the kgen branch returns early
        new = if_block(indent, test, [*routed, f"{indent}    return"])
        _edit(ctx, parsed, lambda lines: lines.insert_before(span(parsed, stmt)[0], new))
        return
    body = [f"    {ln}" if ln.strip() else ln for ln in source_lines(parsed, stmt)]
    new = [*if_block(indent, test, routed), f"{indent}else:", *body]
    _edit(ctx, parsed, lambda lines: lines.replace(*span(parsed, stmt), new))


# ---------------------------------------------------------------------------------------------
# the store kernel (C++: its page-byte constant and the static_assert that refuses bf16 indexers)
# and, with the flag, kgen's own files in the tree

_ASSERT_BF16 = re.compile(r"static_assert\(\s*!\(\s*kIsIndexer\s*&&\s*kBf16Store\s*\)")
# `kPageBytes = 132ll << kPageBits` inside the named device function (not crossing into the next one)
_DEVICE_PAGE = {key: re.compile(rf"\bvoid\s+{name}\s*\((?:(?!\bvoid\b).)*?\bkPageBytes\s*=\s*(\d{{1,30}})(?:ll)?"
                                rf"\s*<<\s*kPageBits\b", re.S) for key, name in KERNEL_DEVICE_FUNCTION.items()}


def _line_col(text: str, pos: int) -> tuple[int, int]:
    return text.count("\n", 0, pos) + 1, pos - (text.rfind("\n", 0, pos) + 1) + 1


def audit_kernel(ctx: Ctx) -> None:
    lay = ctx.layout
    if ctx.mode.flag:
        audit_bundle(ctx)
        return
    rel = ctx.tree.pick(KERNELS, "struct FusedNormRopeKernel", "store kernel", contains="FusedNormRopeKernel")
    text = ctx.tree.text(rel)
    key, _ = ctx.native_encoding()
    names = KERNEL_PAGE_CONSTANT[key]
    found = list(re.finditer(rf"\b({'|'.join(names)})\s*=\s*(\d{{1,30}})\s*\*\s*kPageSize\b", text))
    if not found and key != "fp8":
        return  # versions that store fp4 keys with another kernel: nothing of this one to check
    if len(found) != 1:
        raise Drift(ctx.tree.path(rel), f"{' or '.join(names)} = <bytes per token> * kPageSize in struct "
                    "FusedNormRopeKernel", len(found), "store kernel")
    constant, per_token = found[0].group(1), int(found[0].group(2))
    engine_page = per_token * lay.page_size  # what the kernel's stride check demands, at the spec's page size
    if engine_page != lay.page_bytes:
        line, col = _line_col(text, found[0].start())
        ctx.report_at("engine-kernel", rel, line, col, f"the store kernel checks the indexer cache stride against "
                      f"{constant} = {per_token} * kPageSize = {engine_page} B but {ctx.name} pages are "
                      f"{lay.page_bytes} B: the engine stops at start with '{lay.page_bytes} vs {engine_page}'",
                      ctx.patch_fix)
    device = _DEVICE_PAGE[key].search(text)
    if device is not None and int(device.group(1)) * lay.page_size != lay.page_bytes:
        line, col = _line_col(text, device.start(1))
        per = int(device.group(1))
        ctx.report_at("engine-kernel", rel, line, col, f"the store kernel {KERNEL_DEVICE_FUNCTION[key]} addresses "
                      f"the indexer cache in pages of {per} << kPageBits = {per * lay.page_size} B but {ctx.name} "
                      f"pages are {lay.page_bytes} B", ctx.patch_fix)
    assert_bf16 = list(_ASSERT_BF16.finditer(text))
    if ctx.spec.store.dtype == "bf16" and assert_bf16:
        line, col = _line_col(text, assert_bf16[0].start())
        ctx.report_at("engine-kernel", rel, line, col, f"static_assert(!(kIsIndexer && kBf16Store)) refuses a bf16 "
                      f"indexer store when the JIT module compiles, during server start ({ctx.name} is bf16)",
                      ctx.patch_fix)


def audit_bundle(ctx: Ctx) -> None:
    """kgen's files in the tree are this variant's: the spec kgen's ops resolve (spec.yaml) is one
    variant with the spec's layout, and the host constants the pool and budget read are its numbers."""
    from .bundle import bundle_problems

    for rel, line, message in bundle_problems(ctx, PKG_DIR):
        ctx.report_at("engine-kernel", rel, line, 1, message, ctx.patch_fix)


# ---------------------------------------------------------------------------------------------
# the reader: view width, page size of the view, query path, scorer choice, metadata, non-paged path


def _reader_method(ctx: Ctx, name: str, what: str):
    parsed = ctx.tree.parse(ctx.tree.pick([INDEXER], "class C4IndexerBackendMixin", what))
    cls = find_class(ctx.tree, parsed, "C4IndexerBackendMixin", what)
    return parsed, cls, find_method(ctx.tree, parsed, cls, name, what)


def _reader(ctx: Ctx):
    return _reader_method(ctx, "forward_c4_indexer", "indexer reader")


def _view_width(ctx: Ctx):
    parsed, cls, method = _reader(ctx)
    anchor = one(assignments(method, "head_dim_with_sf"), ctx.tree, parsed,
                 "C4IndexerBackendMixin.forward_c4_indexer: head_dim_with_sf = ...", "indexer reader view")
    return parsed, cls, method, anchor


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
    stmt = _statement(method, views[0])
    tokens = ctx.evaluate("reader view page size", parsed, page_arg,
                          lambda: ctx.evaluator().value_at(fn, stmt, page_arg))
    if tokens is not None and tokens != lay.page_size:
        ctx.report("engine-reader", parsed, page_arg, f"the reader view has {tokens} tokens per page but "
                   f"{ctx.name} pages hold {lay.page_size}", "use a spec with the engine's page size")


def patch_reader(ctx: Ctx) -> None:
    parsed, _cls, method, assign = _view_width(ctx)
    if _kgen_code(assign, parsed):
        return
    ensure_import(ctx, parsed.rel)
    parsed, _cls, method, assign = _view_width(ctx)
    stmt = _statement(method, assign)
    value = assign.value
    engine = code_of(parsed, value)
    engine = engine if value.lpar or not isinstance(value, cst.IfExp) else f"({engine})"
    new = ternary(indent_of(parsed, stmt), "head_dim_with_sf = ", f"{PKG}.host.BYTES_PER_TOKEN",
                  f"{PKG}.in_use(self.token_to_kv_pool)", engine)
    _edit(ctx, parsed, lambda lines: lines.replace(*span(parsed, stmt), new))


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


def _scorer_name(parsed, binding: cst.CSTNode) -> str | None:
    if isinstance(binding, cst.ImportFrom):
        alias = next(a for a in binding.names if a.asname is not None)  # type: ignore[union-attr]
        module = dotted(binding.module) if binding.module is not None else ""
        return f"{module}.{dotted(alias.name)}"
    assert isinstance(binding, cst.Assign)
    if dotted(binding.value) == "None":
        return None  # a branch that scores with no `fn` (HIP's fp4 path calls its kernel directly)
    return dotted(binding.value) or code_of(parsed, binding.value)


def audit_scorer(ctx: Ctx) -> None:
    parsed, _cls, _method, found = _scorer(ctx)
    ours = [a for a in found if isinstance(a, cst.Assign) and dotted(a.value) == f"{PKG}.logits"]
    if ctx.mode.flag:
        if not ours:
            ctx.report("engine-scorer", parsed, found[0], f"with {FLAG_CLI} the indexer still scores with the "
                       f"engine's kernels, which cannot read {ctx.name}", ctx.patch_fix)
        return
    want = encoding_of(ctx.layout)
    _key, reads = ctx.native_encoding()
    if reads.storage() != want.storage():
        names = sorted({n for a in found if a not in ours for n in [_scorer_name(parsed, a)] if n is not None})
        ctx.report("engine-scorer", parsed, found[0], f"the indexer scores with {', '.join(names)}, which read "
                   f"{reads} pages ({_mode_text(ctx)}); {ctx.name} stores {want} and needs kgen's scorer",
                   ctx.patch_fix)


def patch_scorer(ctx: Ctx) -> None:
    parsed, _cls, method, found = _scorer(ctx)
    if any(isinstance(a, cst.Assign) and dotted(a.value) == f"{PKG}.logits" for a in found):
        return
    ensure_import(ctx, parsed.rel)
    parsed, _cls, method, found = _scorer(ctx)
    # right after the if/elif chain (or statement) that makes the engine's last choice, in its block
    holder = chain_statement(method, found[-1])
    indent = indent_of(parsed, holder)
    new = if_block(indent, f"{PKG}.in_use(self.token_to_kv_pool)", [f"{indent}    fn = {PKG}.logits"])
    _edit(ctx, parsed, lambda lines: lines.insert_after(span(parsed, holder)[1], new))


QUERY_METHODS = ("_forward_prepare_normal", "_forward_prepare_multi_stream")


def _query_methods(ctx: Ctx) -> list[str]:
    """The query-preparation methods this version has (the multi-stream one is newer)."""
    _parsed, cls, _ = _reader(ctx)
    return [name for name in QUERY_METHODS if name in methods(cls)]


def _queries(ctx: Ctx):
    """Every `q, weights = c4_indexer.compute_q(...)` of the indexer's query preparation."""
    out = []
    for name in _query_methods(ctx):
        parsed, _cls, method = _reader_method(ctx, name, "indexer query")
        out += [(name, c) for c in calls(method, "c4_indexer.compute_q")]
    if not out:
        raise Drift(ctx.tree.path(INDEXER), "c4_indexer.compute_q(...) in C4IndexerBackendMixin."
                    f"{' / '.join(QUERY_METHODS)}", 0, "indexer query")
    return out


def audit_query(ctx: Ctx) -> None:
    """With the flag the query must reach kgen's scorer unquantized: the engine's compute_q makes an
    fp8 (or fp4) q for DeepGEMM; kgen's bf16-key scorer needs a bf16 q. (Without kgen's files the
    query holds no fact of the spec: the engine's q matches the engine's scorer.)"""
    if not ctx.mode.flag:
        return
    _queries(ctx)
    for name in _query_methods(ctx):
        parsed, _cls, method = _reader_method(ctx, name, "indexer query")
        for node in calls(method, "c4_indexer.compute_q"):
            if not calls(method, f"{PKG}.query"):
                ctx.report("engine-query", parsed, node, f"with {FLAG_CLI} the indexer query is still quantized "
                           f"for DeepGEMM (compute_q), and {ctx.name}'s scorer takes a bf16 q", ctx.patch_fix)


def patch_query(ctx: Ctx) -> None:
    _queries(ctx)
    for name in _query_methods(ctx):
        parsed, _cls, method = _reader_method(ctx, name, "indexer query")
        if calls(method, f"{PKG}.query") or not calls(method, "c4_indexer.compute_q"):
            continue
        ensure_import(ctx, parsed.rel)
        while True:
            parsed, _cls, method = _reader_method(ctx, name, "indexer query")
            todo = [c for c in calls(method, "c4_indexer.compute_q")
                    if f"{PKG}.query" not in code_of(parsed, chain_statement(method, c))]
            if not todo:
                break
            node = todo[0]
            stmt = _statement(method, node)
            indent = indent_of(parsed, stmt)
            target = code_of(parsed, stmt.body[0].targets[0].target)  # type: ignore[attr-defined]
            ours = call(indent + "    ", f"{target} = {PKG}.query", ["c4_indexer", *_args_code(parsed, node)])
            body = [f"    {ln}" if ln.strip() else ln for ln in source_lines(parsed, stmt)]
            new = [*if_block(indent, f"{PKG}.in_use(self.token_to_kv_pool)", ours), f"{indent}else:", *body]
            where = span(parsed, stmt)
            _edit(ctx, parsed, lambda lines, where=where, new=new: lines.replace(*where, new))


def _metadata(ctx: Ctx):
    """PagedIndexerMetadata.__post_init__'s first `if ...: self.deep_gemm_metadata = None`."""
    parsed = ctx.tree.parse(ctx.tree.pick([METADATA], "class PagedIndexerMetadata", "indexer metadata"))
    cls = find_class(ctx.tree, parsed, "PagedIndexerMetadata", "indexer metadata")
    post = find_method(ctx.tree, parsed, cls, "__post_init__", "indexer metadata")
    return parsed, cls, post


def audit_metadata(ctx: Ctx) -> None:
    if not ctx.mode.flag:
        return
    parsed, _cls, post = _metadata(ctx)
    if not _kgen_code(post, parsed):
        ctx.report("engine-metadata", parsed, post.name, f"with {FLAG_CLI} the indexer metadata still builds "
                   "DeepGEMM's schedule (import deep_gemm), which kgen's scorer does not read", ctx.patch_fix)


def patch_metadata(ctx: Ctx) -> None:
    parsed, _cls, post = _metadata(ctx)
    if _kgen_code(post, parsed):
        return
    ensure_import(ctx, parsed.rel)
    parsed, _cls, post = _metadata(ctx)
    first = post.body.body[0]
    if not (isinstance(first, cst.If) and "self.deep_gemm_metadata = None" in code_of(parsed, first.body)):
        raise Drift(ctx.tree.path(parsed.rel), "PagedIndexerMetadata.__post_init__ starting with `if ...: "
                    "self.deep_gemm_metadata = None`", 0, "indexer metadata")
    indent = indent_of(parsed, first)
    # the `if` becomes an `elif` of kgen's branch: same body, same order, nothing re-indented
    head = text_lines(parsed.text)[span(parsed, first)[0] - 1]
    if not head.startswith(f"{indent}if "):
        raise Drift(ctx.tree.path(parsed.rel), "an `if` statement opening __post_init__", 0, "indexer metadata")
    block = [*if_block(indent, f"{PKG}.skips_deep_gemm(self)", [f"{indent}    self.deep_gemm_metadata = None"]),
             f"{indent}el{head[len(indent):]}"]
    line = span(parsed, first)[0]
    _edit(ctx, parsed, lambda lines: lines.replace(line, line, block))


def _nonpaged(ctx: Ctx):
    return _reader_method(ctx, "_can_use_nonpaged_indexer", "non-paged fp8 indexer")


def audit_nonpaged(ctx: Ctx) -> None:
    parsed, cls, method = _nonpaged(ctx)
    if encoding_of(ctx.layout).storage() == NATIVE["fp8"].storage():
        return  # the non-paged path reads the fp8 layout: right for an fp8 spec
    # every way through the guard (environment switches and GPU checks taken both ways): the path
    # is off for this variant only when no outcome can be true
    try:
        outcomes = ctx.evaluator().outcomes(Function(method, parsed.scope, cls), [], {})
    except Unknown:
        outcomes = [UNKNOWN]
    if any(o is UNKNOWN or bool(o) for o in outcomes):
        why = "" if all(o is not UNKNOWN for o in outcomes) else " (its condition does not exclude this variant)"
        ctx.report("engine-nonpaged", parsed, method.name, f"the non-paged indexer path (fp8 only) can still run "
                   f"for {ctx.name}{why}", ctx.patch_fix)


def patch_nonpaged(ctx: Ctx) -> None:
    parsed, _cls, method = _nonpaged(ctx)
    if _kgen_code(method, parsed):
        return
    ensure_import(ctx, parsed.rel)
    parsed, _cls, method = _nonpaged(ctx)
    guard_first(ctx, parsed, method, f"{PKG}.in_use(self.token_to_kv_pool)", ["return False"])


# ---------------------------------------------------------------------------------------------
# kgen declared as the engine's optional dependency (a checkout's python/pyproject.toml)


def patch_dependency(ctx: Ctx) -> None:
    if not ctx.tree.exists(PYPROJECT):
        return  # an installed package has no pyproject: the PR summary says so
    text = ctx.tree.text(PYPROJECT)
    if re.search(r"(?m)^kgen\s*=", text):
        return
    m = re.search(r"(?m)^\[project\.optional-dependencies\]\s*$", text)
    if m is None:
        raise Drift(ctx.tree.path(PYPROJECT), "[project.optional-dependencies]", 0, "optional dependency")
    line = 'kgen = ["kgen"]  # --enable-kgen-indexer\n'
    ctx.tree.write(PYPROJECT, text[: m.end() + 1] + line + text[m.end() + 1:])


# ---------------------------------------------------------------------------------------------
# kgen's files in the engine tree


def _flag_read(ctx: Ctx) -> tuple[str, str, str]:
    """How SGLang reads a server flag, taken from the pool's own fp4 read: (import line, kgen's flag
    expression, the fp4 flag's expression)."""
    parsed, _cls, init, anchor = _init(ctx)
    expr = code_of(parsed, anchor.value)
    if expr == "use_fp4_indexer":  # `self.use_fp4_indexer = use_fp4_indexer`: its default's read, above
        reads = [a for a in collect(init, cst.Assign) if dotted(a.targets[0].target) == "use_fp4_indexer"]
        expr = code_of(parsed, reads[0].value) if reads else expr
    if not expr.endswith(f".{FP4_FLAG}"):
        raise KgenError([Problem("engine-anchor", f"the indexer pool reads its fp4 flag as '{expr}', not as a server "
                                 "flag attribute: kgen cannot thread its flag the same way",
                                 file=ctx.tree.path(parsed.rel), fix="update kgen/engines/sglang.py")])
    root = expr.split(".")[0].split("(")[0]
    if root not in parsed.scope.imports:
        raise Drift(ctx.tree.path(parsed.rel), f"the import of {root}", 0, "server flag access")
    module, name = parsed.scope.imports[root]
    line = f"from {module} import {name}" + (f" as {root}" if name != root else "")
    return line, expr[: -len(FP4_FLAG)] + FLAG, expr


def bundle(ctx: Ctx) -> dict[str, str]:
    from .bundle import sglang_files

    return sglang_files(ctx, PKG_DIR, *_flag_read(ctx))


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
        Site("field-order", "engine-flag", "arg_groups/field_order.py", audit_field_order, patch_field_order),
        Site("bytes-helper", "engine-pool", HELPER, audit_helper, patch_helper),
        Site("pool-flag", "engine-flag", "DeepSeekV4IndexerPool.__init__", audit_pool_flag, patch_pool_flag),
        Site("pool-bytes", "engine-pool", "DeepSeekV4IndexerPool.get_bytes_per_token", audit_pool_bytes,
             patch_pool_bytes),
        Site("pool-page", "engine-pool", "DeepSeekV4IndexerPool._create_buffer", audit_pool_page),
        Site("factory", "engine-flag", "DeepSeekV4TokenToKVPool._make_indexer_pool", audit_factory, patch_factory),
        Site("page-size", "engine-page-size", "DeepSeekV4TokenToKVPool._make_indexer_pool", audit_page_size),
        Site("fp8-helpers", "engine-fp8-helper", "DeepSeekV4IndexerPool." + "/".join(FP8_HELPERS),
             audit_fp8_helpers, patch_fp8_helpers),
        Site("pd-layout", "engine-pd", "DeepSeekV4TokenToKVPool.pd_kv_layout", audit_pd_layout, patch_pd_layout),
        Site("budget", "engine-budget", "DSV4PoolConfigurator", audit_budget, patch_budget),
        Site("low-ratio-budget", "engine-budget", "DSV4PoolConfigurator.low_ratio_index_bytes",
             audit_low_ratio_budget),
        Site("store", "engine-store", "CompressorBackendMixin._forward_compress_all_in_one", audit_store, patch_store),
        Site("kernel", "engine-kernel", "FusedNormRopeKernel / kgen_indexer", audit_kernel),
        Site("reader", "engine-reader", "C4IndexerBackendMixin.forward_c4_indexer", audit_reader, patch_reader),
        Site("query", "engine-query", "C4IndexerBackendMixin._forward_prepare_*", audit_query, patch_query),
        Site("scorer", "engine-scorer", "C4IndexerBackendMixin.forward_c4_indexer", audit_scorer, patch_scorer),
        Site("metadata", "engine-metadata", "PagedIndexerMetadata.__post_init__", audit_metadata, patch_metadata),
        Site("nonpaged", "engine-nonpaged", "C4IndexerBackendMixin._can_use_nonpaged_indexer", audit_nonpaged,
             patch_nonpaged),
        Site("dependency", "engine-dependency", "python/pyproject.toml", lambda ctx: None, patch_dependency),
    ),
)
