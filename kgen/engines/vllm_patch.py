"""`kgen patch --engine vllm`: the line edits that wire kgen's variant into vLLM's DeepSeek-V4 indexer,
and what the audit checks of them once the tree carries kgen's package (kgen/engines/vllm.py's
sites call both).

One option selects the variant: `--attention-config '{"indexer_kv_dtype": "kgen"}'` (vLLM's field
takes any string). Three engine files change, each edit a guarded branch whose test is false with
the option off (then every edited function computes what it computed before, and no edited hot
path reads new state):

- `dsa_indexer_uses_fp4` (the indexer backend's dtype gate) admits the value through
  `kgen_indexer.enabled(vllm_config)`, which also refuses it at start-up where kgen's kernels
  cannot run (ROCm/HIP, XPU, CPU) and outside DeepSeek-V4;
- `DeepseekV4Attention._get_indexer_cls` (vLLM's platform hook) returns kgen's indexer, whose own
  hooks give kgen's cache (page bytes from the generated constants), compressor (vLLM's
  compress_pool, then kgen's store) and scoring layer (kgen_bundle's layers.py);
- the `sparse_attn_indexer` custom op and its fake take `kgen_variant` (None: vLLM's path); with a
  variant the prefill and the decode scorer calls go to kgen's reader and the fp8 gather is
  skipped; SparseAttnIndexer passes its class attribute `kgen_variant` (kgen's layer sets it).
"""

from __future__ import annotations

import libcst as cst

from .pyedit import LINE, Lines, call, indent_of, span, text_lines
from .pyeval import dotted
from .sglang import add_keyword, add_parameter, guard_first
from .sites import Ctx, code_of
from .tree import Drift, calls, collect, find_class, find_function, find_method, parent_map

PKG = "kgen_indexer"
IMPORT = f"from vllm import {PKG}"
PKG_DIR = "vllm/kgen_indexer"
PARAM = "kgen_variant"
OPTION_TEXT = "indexer_kv_dtype=\"kgen\" (--attention-config '{\"indexer_kv_dtype\": \"kgen\"}')"

GATE_FILE = "vllm/v1/attention/backends/mla/indexer.py"
GATE = "dsa_indexer_uses_fp4"
ATTENTION = ("vllm/models/deepseek_v4/attention.py", "vllm/model_executor/models/deepseek_v4/attention.py")
INDEXER_HOOK = "_get_indexer_cls"
OP_FILE = "vllm/model_executor/layers/sparse_attn_indexer.py"
OP, FAKE, LAYER = "sparse_attn_indexer", "sparse_attn_indexer_fake", "SparseAttnIndexer"
GATHER = "cp_gather_indexer_k_quant_cache"  # vLLM's fp8-layout gather of the prefill keys
PREFILL_SCORER, DECODE_SCORER = "fp8_fp4_mqa_logits", "fp8_fp4_paged_mqa_logits"
# vLLM's locals the routed scorer calls read, as sparse_attn_indexer binds them
PREFILL_ARGS = [PARAM, "q_slice", "weights[row_start:row_end]", "kv_cache", "chunk", "cu_seqlen_ks", "cu_seqlen_ke"]
DECODE_ARGS = [PARAM, "padded_q_quant_cast", "kv_cache", "weights[:num_padded_tokens]", "seq_lens",
               "decode_metadata.block_table", "max_model_len"]


def _edit(ctx: Ctx, parsed, change) -> None:
    lines = Lines(parsed.text)
    change(lines)
    ctx.tree.write(parsed.rel, lines.apply())


def _kgen(parsed, node: cst.CSTNode) -> bool:
    return PKG in code_of(parsed, node) or PARAM in code_of(parsed, node)


def ensure_import(ctx: Ctx, rel: str) -> None:
    """`from vllm import kgen_indexer` where ruff's isort puts it: among the module's top-level
    `from vllm import ...` lines by name, else before its first `from vllm.x import ...`."""
    parsed = ctx.tree.parse(rel)
    if IMPORT in text_lines(parsed.text):
        return
    froms = [(s, x, dotted(x.module)) for s in parsed.module.body if isinstance(s, cst.SimpleStatementLine)
             for x in s.body if isinstance(x, cst.ImportFrom) and x.module is not None and not x.relative]
    top = [(s, x) for s, x, module in froms if module == "vllm"]
    below = [s for s, _x, module in froms if (module or "").startswith("vllm.")]
    after = [s for s, x in top if not isinstance(x.names, cst.ImportStar)
             and (dotted(x.names[0].name) or "").lower() > PKG]
    if after:
        _edit(ctx, parsed, lambda lines: lines.insert_before(span(parsed, after[0])[0], [IMPORT]))
    elif top:
        _edit(ctx, parsed, lambda lines: lines.insert_after(span(parsed, top[-1][0])[1], [IMPORT]))
    elif below:
        _edit(ctx, parsed, lambda lines: lines.insert_before(span(parsed, below[0])[0], [IMPORT]))
    else:
        raise Drift(ctx.tree.path(rel), "a top-level `from vllm... import` to place kgen's import by", 0, "imports")


# ---------------------------------------------------------------------------------------------
# the dtype gate: dsa_indexer_uses_fp4 admits the option (and refuses it where it cannot run)


def _gate(ctx: Ctx):
    parsed = ctx.tree.parse(ctx.tree.pick([GATE_FILE], f"function {GATE}", "indexer dtype gate"))
    return parsed, find_function(ctx.tree, parsed, GATE, "indexer dtype gate")


def gate_param(ctx: Ctx, parsed, fn: cst.FunctionDef) -> str:
    params = fn.params.params
    if not params:
        raise Drift(ctx.tree.path(parsed.rel), f"{GATE}(vllm_config)", 0, "indexer dtype gate")
    return params[0].name.value


def audit_gate(ctx: Ctx) -> None:
    parsed, fn = _gate(ctx)
    if not calls(fn, f"{PKG}.enabled"):
        ctx.report("engine-dtype", parsed, fn.name, f"{GATE} refuses indexer_kv_dtype='kgen' ({ctx.name}): "
                   "vLLM stops at start", ctx.patch_fix)


def patch_gate(ctx: Ctx) -> None:
    parsed, fn = _gate(ctx)
    if calls(fn, f"{PKG}.enabled"):
        return
    ensure_import(ctx, parsed.rel)
    parsed, fn = _gate(ctx)
    guard_first(ctx, parsed, fn, f"{PKG}.enabled({gate_param(ctx, parsed, fn)})", ["return False"])


# ---------------------------------------------------------------------------------------------
# the indexer: DeepseekV4Attention._get_indexer_cls returns kgen's (its hooks do the rest)


def _hook(ctx: Ctx):
    rel = ctx.tree.pick(ATTENTION, "class DeepseekV4Attention", "indexer class", contains="class DeepseekV4Attention")
    parsed = ctx.tree.parse(rel)
    cls = find_class(ctx.tree, parsed, "DeepseekV4Attention", "indexer class")
    return parsed, find_method(ctx.tree, parsed, cls, INDEXER_HOOK, "indexer class")


def audit_hook(ctx: Ctx) -> None:
    parsed, fn = _hook(ctx)
    if not calls(fn, f"{PKG}.indexer_cls"):
        ctx.report("engine-pool", parsed, fn.name, f"with indexer_kv_dtype='kgen' DeepSeek-V4 still builds vLLM's "
                   f"indexer (its cache, writer and scorer), not {ctx.name}'s", ctx.patch_fix)


def patch_hook(ctx: Ctx) -> None:
    parsed, fn = _hook(ctx)
    if calls(fn, f"{PKG}.indexer_cls"):
        return
    params = [p.name.value for p in fn.params.params]
    if len(params) != 2:
        raise Drift(ctx.tree.path(parsed.rel), f"DeepseekV4Attention.{INDEXER_HOOK}(self, vllm_config)", 0,
                    "indexer class")
    ensure_import(ctx, parsed.rel)
    parsed, fn = _hook(ctx)
    guard_first(ctx, parsed, fn, f"{PKG}.enabled({params[1]})", [f"return {PKG}.indexer_cls()"])


# ---------------------------------------------------------------------------------------------
# the scorer: the sparse_attn_indexer custom op, its fake and the layer that calls it


def _op(ctx: Ctx):
    parsed = ctx.tree.parse(ctx.tree.pick([OP_FILE], f"function {OP}", "indexer scorer"))
    return parsed, find_function(ctx.tree, parsed, OP, "indexer scorer")


def _fake(ctx: Ctx):
    parsed = ctx.tree.parse(ctx.tree.pick([OP_FILE], f"function {FAKE}", "indexer scorer"))
    return parsed, find_function(ctx.tree, parsed, FAKE, "indexer scorer")


def _layer(ctx: Ctx):
    parsed = ctx.tree.parse(ctx.tree.pick([OP_FILE], f"class {LAYER}", "indexer scorer"))
    cls = find_class(ctx.tree, parsed, LAYER, "indexer scorer")
    forward = find_method(ctx.tree, parsed, cls, "forward_cuda", "indexer scorer")
    found = calls(forward, f"torch.ops.vllm.{OP}")
    if len(found) != 1:
        raise Drift(ctx.tree.path(parsed.rel), f"torch.ops.vllm.{OP}(...) in {LAYER}.forward_cuda", len(found),
                    "indexer scorer")
    return parsed, cls, forward, found[0]


def _takes(fn: cst.FunctionDef) -> bool:
    return any(p.name.value == PARAM for p in fn.params.params)


def _one(ctx: Ctx, parsed, fn: cst.CSTNode, callee: str, what: str) -> cst.Call:
    found = calls(fn, callee)
    if len(found) != 1:
        raise Drift(ctx.tree.path(parsed.rel), f"{callee}(...) in {OP}", len(found), what)
    return found[0]


def _branch_else(ctx: Ctx, parsed, fn: cst.FunctionDef, node: cst.Call, what: str) -> tuple[cst.If, cst.Else]:
    """The innermost `if ...: ... else: <node>` around the scorer call (`if is_xpu(): ... else:`)."""
    parents = parent_map(fn)
    cur: cst.CSTNode = node
    while cur in parents:
        parent = parents[cur]
        if isinstance(parent, cst.Else):
            owner = parents[parent]
            assert isinstance(owner, cst.If)
            return owner, parent
        cur = parent
    raise Drift(ctx.tree.path(parsed.rel), f"an `if ...: ... else:` around {dotted(node.func)}(...) in {OP}", 0, what)


def _routed(parsed, fn: cst.FunctionDef, callee: str) -> bool:
    return bool(calls(fn, f"{PKG}.{callee}"))


def _gather_if(ctx: Ctx, parsed, fn: cst.FunctionDef) -> cst.If:
    node = _one(ctx, parsed, fn, GATHER, "prefill gather")
    parents = parent_map(fn)
    cur: cst.CSTNode = node
    while cur in parents and not isinstance(cur, cst.If):
        cur = parents[cur]
    if not isinstance(cur, cst.If):
        raise Drift(ctx.tree.path(parsed.rel), f"`if ...: ops.{GATHER}(...)` in {OP}", 0, "prefill gather")
    return cur


def audit_scorer(ctx: Ctx) -> None:
    parsed, fn = _op(ctx)
    missing = []
    if not _takes(fn):
        missing.append(f"{OP} takes no {PARAM}")
    else:
        if not _routed(parsed, fn, "prefill_logits"):
            missing.append(f"its prefill scorer ({PREFILL_SCORER}) is not routed")
        if not _routed(parsed, fn, "logits"):
            missing.append(f"its decode scorer ({DECODE_SCORER}) is not routed")
        if PARAM not in code_of(parsed, _gather_if(ctx, parsed, fn).test):
            missing.append(f"its fp8 key gather ({GATHER}) still runs")
    _pf, fake = _fake(ctx)
    if not _takes(fake):
        missing.append(f"its fake {FAKE} takes no {PARAM}")
    _pl, cls, _forward, op_call = _layer(ctx)
    if not any(a.keyword is not None and a.keyword.value == PARAM for a in op_call.args):
        missing.append(f"{LAYER}.forward_cuda does not pass {PARAM}")
    if missing:
        ctx.report("engine-scorer", parsed, fn.name, f"the indexer op cannot score {ctx.name}'s keys: "
                   f"{'; '.join(missing)}", ctx.patch_fix)


def patch_scorer(ctx: Ctx) -> None:
    ensure_import(ctx, OP_FILE)
    parsed, fn = _op(ctx)
    if not _takes(fn):
        add_parameter(ctx, parsed, fn, f"{PARAM}: str | None = None")
    parsed, fake = _fake(ctx)
    if not _takes(fake):
        add_parameter(ctx, parsed, fake, f"{PARAM}: str | None = None")
    parsed, fn = _op(ctx)
    _bound(ctx, parsed, fn)
    gather = _gather_if(ctx, parsed, fn)
    if PARAM not in code_of(parsed, gather.test):
        _extend_test(ctx, parsed, gather, f"{PARAM} is None")
    for callee, scorer, args, pre in (("prefill_logits", PREFILL_SCORER, PREFILL_ARGS,
                                       ["row_ends = cu_seqlen_ke - cu_seqlen_ks"]),
                                      ("logits", DECODE_SCORER, DECODE_ARGS, [])):
        parsed, fn = _op(ctx)
        if _routed(parsed, fn, callee):
            continue
        node = _one(ctx, parsed, fn, scorer, "indexer scorer")
        _if, orelse = _branch_else(ctx, parsed, fn, node, "indexer scorer")
        at = span(parsed, orelse)[0]
        head = text_lines(parsed.text)[at - 1]
        indent = head[: len(head) - len(head.lstrip())]
        if not head.strip().startswith("else"):
            raise Drift(ctx.tree.path(parsed.rel), f"`else:` around {scorer}(...) in {OP}", 0, "indexer scorer")
        inner = indent + "    "
        body = [*(inner + p for p in pre), *call(inner, f"logits = {PKG}.{callee}", args)]
        new = [f"{indent}elif {PARAM} is not None:", *body]
        _edit(ctx, parsed, lambda lines, at=at, new=new: lines.insert_before(at, new))
    parsed, cls, _forward, _call = _layer(ctx)
    if PARAM not in {dotted(t.target) for s in cls.body.body if isinstance(s, cst.SimpleStatementLine)
                     for t in s.body if isinstance(t, cst.AnnAssign)}:
        first = cls.body.body[0]
        indent = indent_of(parsed, first)
        doc = isinstance(first, cst.SimpleStatementLine) and isinstance(first.body[0], cst.Expr)
        attr = [f"{indent}# kgen's indexer-key variant: set by kgen's layer (kgen patch)",
                f"{indent}{PARAM}: str | None = None"]
        if doc:
            _edit(ctx, parsed, lambda lines: lines.insert_after(span(parsed, first)[1], ["", *attr]))
        else:
            _edit(ctx, parsed, lambda lines: lines.insert_before(span(parsed, first)[0], [*attr, ""]))
    parsed, cls, forward, op_call = _layer(ctx)
    if not any(a.keyword is not None and a.keyword.value == PARAM for a in op_call.args):
        from .tree import statement_of

        add_keyword(ctx, parsed, statement_of(forward, op_call), op_call, f"{PARAM}=self.{PARAM}")


def _bound(ctx: Ctx, parsed, fn: cst.FunctionDef) -> None:
    """The vLLM locals the routed calls read are bound in the op (else vLLM renamed them)."""
    names = {p.name.value for p in fn.params.params}
    names |= {dotted(t.target) or "" for a in collect(fn, cst.Assign) for t in a.targets}
    names |= {dotted(e.value) or "" for a in collect(fn, cst.Assign) for t in a.targets
              if isinstance(t.target, cst.Tuple) for e in t.target.elements}
    names |= {dotted(f.target) or "" for f in collect(fn, cst.For)}
    for arg in [*PREFILL_ARGS, *DECODE_ARGS, "row_ends"]:
        root = arg.split("[")[0].split(".")[0]
        if root not in names:
            raise Drift(ctx.tree.path(parsed.rel), f"the local `{root}` of {OP} (kgen's scorer reads it)", 0,
                        "indexer scorer")


def _extend_test(ctx: Ctx, parsed, node: cst.If, extra: str) -> None:
    """`if a and b:` -> `if a and b and <extra>:`, as ruff format writes it."""
    first = span(parsed, node)[0]
    last = span(parsed, node.test)[1]
    head = text_lines(parsed.text)[first - 1]
    indent = head[: len(head) - len(head.lstrip())]
    test = node.test
    parts = [code_of(parsed, v) for v in _and_chain(test)]
    parts = [" ".join(p.split()) for p in [*parts, extra]]
    one = f"{indent}if {' and '.join(parts)}:"
    if len(one) <= LINE:
        new = [one]
    elif len(f"{indent}    {' and '.join(parts)}") <= LINE:
        new = [f"{indent}if (", f"{indent}    {' and '.join(parts)}", f"{indent}):"]
    else:
        new = [f"{indent}if (", f"{indent}    {parts[0]}", *(f"{indent}    and {p}" for p in parts[1:]), f"{indent}):"]
    end = text_lines(parsed.text)[last - 1]
    if not end.rstrip().endswith(":"):
        raise Drift(ctx.tree.path(parsed.rel), "an `if` header kgen can extend", 0, "prefill gather")
    _edit(ctx, parsed, lambda lines: lines.replace(first, last, new))


def _and_chain(test: cst.BaseExpression) -> list[cst.BaseExpression]:
    """The operands of `a and b and c` (libcst nests it to the left); [test] for anything else."""
    if not isinstance(test, cst.BooleanOperation) or not isinstance(test.operator, cst.And) or test.lpar:
        return [test]
    return [*_and_chain(test.left), test.right]
