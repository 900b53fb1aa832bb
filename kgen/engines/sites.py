"""Engine adapters as tables of sites.

A `Site` is one fact of the indexer-key cache ABI in an engine: where it lives (file candidates
across engine versions + a libcst anchor by class/function/assignment/call), how to read the
engine's value there, what the spec says it must be (from `kgen.layout` and the generated host
constants), and how to rewrite it behind kgen's server flag. `audit` reads every site; `patch`
rewrites the same sites and then audits its own result, so the two can never disagree.

The audit evaluates the engine's code in the *mode* that would serve the spec: the engine's own
layouts (SGLang: fp8 or fp4 indexer keys) when the spec's encoding is one of them, kgen's flag on
when the tree carries kgen's files for exactly this variant, else the engine's default mode (whose
disagreements with the spec are then the findings).
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import libcst as cst

from ..diagnostics import KgenError, Problem
from ..layout import Layout
from ..spec import Spec
from .pyeval import Evaluator, Unknown
from .tree import Drift, EngineTree, Parsed


@dataclass(frozen=True)
class Encoding:
    """How a key is encoded (not how many bytes: that is kgen.layout's job)."""

    dtype: str
    scale: str
    block: int  # elements per scale (0 when unscaled)

    def storage(self) -> tuple[str, str, int]:
        """What a reader sees: a power-of-two fp32 scale is stored as any fp32 scale."""
        return self.dtype, "fp32" if self.scale.startswith("fp32") else self.scale, self.block

    def __str__(self) -> str:
        if self.scale == "none":
            return f"{self.dtype} without scales"
        return f"{self.dtype} + {self.scale} scale per {self.block}"


def encoding_of(lay: Layout) -> Encoding:
    s = lay.spec.store
    return Encoding(s.dtype, s.scale, lay.block if lay.scale_unit else 0)


@dataclass(frozen=True)
class Mode:
    flag: bool  # kgen's server flag on: the engine runs kgen's variant
    native: str | None  # the engine's own layout that equals the spec's encoding, if any
    installed: str | None  # the variant kgen's files in the tree hold (None: not patched)


@dataclass
class Ctx:
    """One audit (or the self-check of a patch): an engine tree against one spec."""

    tree: EngineTree
    spec: Spec
    layout: Layout
    spec_path: Path
    adapter: Adapter
    mode: Mode
    problems: list[Problem] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.spec.name

    def native_encoding(self) -> tuple[str, Encoding]:
        """The engine's own layout active in this mode (its default when the spec is not native)."""
        key = self.mode.native or self.adapter.default_native
        return key, self.adapter.native[key]

    def env(self) -> dict[str, object]:
        return self.adapter.env(self)

    def evaluator(self) -> Evaluator:
        return Evaluator(self.env(), self.generated_attribute)

    def generated_attribute(self, name: str):
        """`kgen_indexer.host.PAGE_BYTES`: a constant of the generated host module in the tree."""
        prefix = f"{self.adapter.package_alias}.host."
        if not name.startswith(prefix):
            return None
        return generated_constants(self.tree, self.adapter).get(name[len(prefix):])

    def evaluate(self, what: str, parsed: Parsed, node: cst.CSTNode, thunk: Callable[[], object]):
        """Run `thunk`; an Unknown becomes a located problem (and None)."""
        try:
            return thunk()
        except Unknown as e:
            self.report("engine-unreadable", parsed, node, f"{what}: kgen cannot compute the engine's value here "
                        f"({e})", "simplify the expression or update kgen's site table")
            return None

    def report(self, rule: str, parsed: Parsed, node: cst.CSTNode, message: str, fix: str = "") -> None:
        path, line, col = self.tree.location(parsed, node)
        self.problems.append(Problem(rule, message, fix=fix, file=path, line=line, col=col))

    def report_at(self, rule: str, rel: str, line: int, col: int, message: str, fix: str = "") -> None:
        self.problems.append(Problem(rule, message, fix=fix, file=self.tree.path(rel), line=line, col=col))

    @property
    def patch_fix(self) -> str:
        return f"kgen patch --engine {self.adapter.name} --root {self.tree.root} {self.spec_path}"


@dataclass(frozen=True)
class Site:
    """One fact of the cache ABI in an engine. `audit` reads it and appends problems to the
    context; `patch` rewrites it in the tree's overlay behind the flag (idempotent: a site that
    already carries the change is left alone). Both find the place with the same `anchor`."""

    name: str
    rule: str
    symbol: str  # what the anchor looks for, for humans (and drift messages)
    audit: Callable[[Ctx], None]
    patch: Callable[[Ctx], None] | None = None


@dataclass(frozen=True)
class Adapter:
    name: str
    markers: tuple[str, ...]  # paths (relative to the root) that make a directory this engine's checkout
    native: dict[str, Encoding]  # the engine's own indexer-key layouts, by mode name
    default_native: str
    package_dir: str  # kgen-owned directory in the engine tree
    package_module: str  # its import name
    package_alias: str  # the name engine modules bind it to
    sites: tuple[Site, ...]
    env: Callable[[Ctx], dict[str, object]]
    bundle: Callable[[Ctx], dict[str, str]] | None = None  # kgen's generated files for the variant
    no_patch: str = ""  # why `kgen patch` cannot wire this engine yet (when bundle is None)
    key_head_dim: int = 128  # DeepSeek-V4's index_head_dim (model config): the cache these sites describe
    option: str = "--enable-kgen-indexer"  # how a user selects kgen's variant (the PR summary names it)

    def is_checkout(self, root: Path) -> bool:
        return all((root / m).exists() for m in self.markers)


def generated_constants(tree: EngineTree, adapter: Adapter) -> dict[str, object]:
    """The literal constants of the generated host module in the engine tree ({} when absent)."""
    rel = f"{adapter.package_dir}/host.py"
    if not tree.exists(rel):
        return {}
    try:
        module = ast.parse(tree.text(rel))
    except SyntaxError:
        return {}
    out: dict[str, object] = {}
    for node in module.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            try:
                out[node.targets[0].id] = ast.literal_eval(node.value)
            except ValueError:
                continue
    return out


def mode_for(tree: EngineTree, adapter: Adapter, lay: Layout) -> Mode:
    enc = encoding_of(lay)
    native = next((k for k, e in adapter.native.items() if e.storage() == enc.storage()), None)
    installed = generated_constants(tree, adapter).get("NAME")
    installed = installed if isinstance(installed, str) else None
    return Mode(flag=native is None and installed == lay.spec.name, native=native, installed=installed)


def run_audit(tree: EngineTree, adapter: Adapter, spec: Spec, lay: Layout, spec_path: Path) -> list[Problem]:
    """Every disagreement between the engine tree and the spec. Raises Drift (exit 1) when an
    anchor is missing or ambiguous."""
    if not adapter.sites:
        raise KgenError([Problem("engine", f"kgen audit has no site table for {adapter.name} yet",
                                 fix="audit sglang, or add the sites to kgen/engines/")])
    if spec.head_dim != adapter.key_head_dim:
        return [Problem("engine-variant", f"{spec.name} is not an indexer-key variant (head_dim {spec.head_dim}; "
                        f"DeepSeek-V4's indexer keys have {adapter.key_head_dim}): the {adapter.name} sites describe "
                        "the indexer cache", file=spec_path, fix="audit the indexer variants of the family")]
    ctx = Ctx(tree, spec, lay, spec_path, adapter, mode_for(tree, adapter, lay))
    for site in adapter.sites:
        _site_step(ctx, site.audit)
    return ctx.problems


def _site_step(ctx: Ctx, step: Callable[[Ctx], None]) -> bool:
    """Run one site's audit or patch; engine drift there becomes its located problem and the other
    sites still run (one run names every anchor that moved). False when the site drifted."""
    try:
        step(ctx)
    except Drift as e:
        ctx.problems.extend(e.problems)
        return False
    return True


def run_patch(tree: EngineTree, adapter: Adapter, spec: Spec, lay: Layout, spec_path: Path) -> None:
    """Rewrite every site into the tree's overlay (nothing on disk), then audit the result: a patch
    that would not audit clean is refused with the audit's problems."""
    if adapter.bundle is None:
        why = f": {adapter.no_patch}" if adapter.no_patch else ""
        raise KgenError([Problem("engine-patch", f"kgen patch does not support {adapter.name} yet (kgen audit "
                                 f"does){why}", file=spec_path,
                                 fix="patch the engine by hand; audit it with kgen audit")])
    refused = [] if spec.head_dim == adapter.key_head_dim else run_audit(tree, adapter, spec, lay, spec_path)
    if refused:
        raise KgenError(refused)
    # the generated files first: the self-check reads their constants
    mode = Mode(flag=True, native=None, installed=spec.name)
    ctx = Ctx(tree, spec, lay, spec_path, adapter, mode)
    tree.write_dir(adapter.package_dir, adapter.bundle(ctx))  # an earlier variant's files go
    for site in adapter.sites:
        if site.patch is not None:
            _site_step(ctx, site.patch)
    if ctx.problems:  # an anchor the patch needs moved: nothing is written
        raise KgenError(ctx.problems)
    check = Ctx(tree, spec, lay, spec_path, adapter, mode)
    for site in adapter.sites:
        site.audit(check)
    if check.problems:
        raise KgenError([Problem("engine-patch", f"the patched tree would still disagree with {spec.name} "
                                 f"({len(check.problems)} problem(s) follow); nothing written",
                                 file=spec_path, fix="see the problems below")] + check.problems)


# ---------------------------------------------------------------------------------------------
# helpers the site tables share


def parse_statement(code: str) -> cst.BaseStatement:
    return cst.parse_statement(code)


def expression(code: str) -> cst.BaseExpression:
    return cst.parse_expression(code)


def code_of(parsed: Parsed, node: cst.CSTNode) -> str:
    return parsed.module.code_for_node(node)


def replace_node(ctx: Ctx, parsed: Parsed, old: cst.CSTNode, new: cst.CSTNode) -> Parsed:
    """Replace one node of a module in the overlay; returns the re-parsed module."""
    module = parsed.module.deep_replace(old, new)
    assert isinstance(module, cst.Module)
    ctx.tree.write(parsed.rel, module.code)
    return ctx.tree.parse(parsed.rel)


def insert_statements(ctx: Ctx, parsed: Parsed, block_owner: cst.CSTNode, index: int,
                      statements: list[cst.BaseStatement]) -> Parsed:
    """Insert statements into the indented block of `block_owner` (a def/if/class) at `index`."""
    body = block_owner.body  # type: ignore[attr-defined]
    lines = list(body.body) if isinstance(body, cst.IndentedBlock) else [cst.SimpleStatementLine(list(body.body))]
    new_body = cst.IndentedBlock([*lines[:index], *statements, *lines[index:]])  # a one-line suite is unfolded
    if isinstance(body, cst.IndentedBlock):
        new_body = body.with_changes(body=new_body.body)
    return replace_node(ctx, parsed, body, new_body)


def ensure_import(ctx: Ctx, parsed: Parsed) -> Parsed:
    """`from <engine package> import <kgen package>` after the module's last top-level import."""
    adapter = ctx.adapter
    parent, _, leaf = adapter.package_module.rpartition(".")
    line = f"from {parent} import {leaf}" + (f" as {adapter.package_alias}" if leaf != adapter.package_alias else "")
    if line in parsed.text.splitlines():
        return parsed
    body = list(parsed.module.body)
    last = -1
    for i, stmt in enumerate(body):
        if isinstance(stmt, cst.SimpleStatementLine) and any(isinstance(s, (cst.Import, cst.ImportFrom))
                                                             for s in stmt.body):
            last = i
        elif not (isinstance(stmt, cst.SimpleStatementLine) and i == 0) and last >= 0:  # a docstring may come first
            break
    stmt = cst.parse_statement(line + "\n")
    body.insert(last + 1, stmt)
    module = parsed.module.with_changes(body=body)
    ctx.tree.write(parsed.rel, module.code)
    return ctx.tree.parse(parsed.rel)


class _InsertAround(cst.CSTTransformer):
    """Insert statements before/after, or in place of, one statement wherever its block is."""

    def __init__(self, target: cst.CSTNode, new: list[cst.BaseStatement], where: str):
        self.target, self.new, self.where, self.done = target, new, where, False

    def leave_IndentedBlock(self, original_node: cst.IndentedBlock, updated_node: cst.IndentedBlock):
        for i, stmt in enumerate(original_node.body):
            if stmt is self.target:
                self.done = True
                body = list(updated_node.body)
                if self.where == "after":
                    body[i + 1:i + 1] = self.new
                elif self.where == "before":
                    body[i:i] = self.new
                else:
                    body[i:i + 1] = self.new
                return updated_node.with_changes(body=body)
        return updated_node


def around_statement(ctx: Ctx, parsed: Parsed, target: cst.CSTNode, new: list[cst.BaseStatement],
                     where: str) -> Parsed:
    """Insert `new` after/before `target` (a statement of some indented block), or replace it."""
    t = _InsertAround(target, new, where)
    module = parsed.module.visit(t)
    if not t.done:  # e.g. the anchor is on the line of a one-line `def`: no block to insert into
        path, line, col = ctx.tree.location(parsed, target)
        raise Drift(path, "the anchor's statement in an indented block", 0, "patch", line)
    ctx.tree.write(parsed.rel, module.code)
    return ctx.tree.parse(parsed.rel)


def takes_decode_plan(spec: Spec) -> bool:
    """Whether the spec's kernel reads the engine's 16-byte DecodePlan rather than positions."""
    return spec.positions.source == "decode_plan"
