"""An engine checkout as kgen reads it: files (on disk, or as a patch would leave them), parsed with
libcst, and anchors found by name and structure (class, function, assignment, call), never by line.

An anchor that matches zero or two places is engine drift: `Drift` names the file and the symbol
looked for, and the audit or patch stops there (exit 1).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

from ..diagnostics import KgenError, Problem
from .pyeval import ModuleScope, dotted, methods


class Drift(KgenError):
    """An expected anchor is missing or ambiguous in the engine tree."""

    def __init__(self, file: Path | None, symbol: str, found: int, what: str, line: int | None = None):
        where = "found none" if found == 0 else f"found {found}"
        problem = Problem("engine-anchor", f"{what}: looked for {symbol}, {where} (the engine moved it; "
                          "kgen cannot tell which place holds the fact)", file=file, line=line,
                          col=1 if line else None,
                          fix="update the site table in kgen/engines/ for this engine version")
        super().__init__([problem], exit_code=1)


@dataclass
class Parsed:
    rel: str
    text: str
    module: cst.Module
    positions: dict
    scope: ModuleScope


class EngineTree:
    """The files of an engine checkout, with an overlay of rewritten or new files (a patch in
    memory: nothing is written until `--apply`)."""

    def __init__(self, root: Path):
        self.root = Path(root)
        self.overlay: dict[str, str] = {}
        self._parsed: dict[str, Parsed] = {}

    # -- files ---------------------------------------------------------------------------------
    def path(self, rel: str) -> Path:
        """The path diagnostics print: the root as the user gave it, joined with the file."""
        return self.root / rel

    def exists(self, rel: str) -> bool:
        return rel in self.overlay or (self.root / rel).is_file()

    def text(self, rel: str) -> str:
        if rel in self.overlay:
            return self.overlay[rel]
        try:
            return (self.root / rel).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise KgenError([Problem("engine-file", f"cannot read the engine file ({e})", file=self.path(rel))],
                            exit_code=2) from None

    def original(self, rel: str) -> str | None:
        """The file as it is on disk (None when the patch creates it)."""
        p = self.root / rel
        return p.read_text(encoding="utf-8") if p.is_file() else None

    def write(self, rel: str, text: str) -> None:
        self.overlay[rel] = text
        self._parsed.pop(rel, None)

    def files_under(self, rel_dir: str, suffix: str) -> list[str]:
        """Files directly in `rel_dir` ending with `suffix` (on disk or new in the overlay), sorted."""
        found = {f"{rel_dir}/{p.name}" for p in (self.root / rel_dir).glob(f"*{suffix}") if p.is_file()}
        found |= {rel for rel in self.overlay if rel.rpartition("/")[0] == rel_dir and rel.endswith(suffix)}
        return sorted(found)

    def changed(self) -> dict[str, str]:
        """Files whose overlay text differs from the disk, sorted by path."""
        return {rel: text for rel, text in sorted(self.overlay.items()) if self.original(rel) != text}

    # -- parsing -------------------------------------------------------------------------------
    def parse(self, rel: str) -> Parsed:
        hit = self._parsed.get(rel)
        if hit is not None:
            return hit
        text = self.text(rel)
        try:
            module = cst.parse_module(text)
        except cst.ParserSyntaxError as e:
            raise KgenError([Problem("engine-syntax", f"the engine file does not parse: {e.message}",
                                     file=self.path(rel), line=e.raw_line, col=e.raw_column + 1)]) from None
        wrapper = MetadataWrapper(module, unsafe_skip_copy=True)
        positions = wrapper.resolve(PositionProvider)
        parsed = Parsed(rel, text, module, dict(positions), ModuleScope(rel, module, self._resolve_import))
        self._parsed[rel] = parsed
        return parsed

    def _resolve_import(self, module: str, name: str):
        """A function or constant another module of the tree defines (`from sglang.x import f`)."""
        from .pyeval import Function

        for rel in self.module_files(module):
            scope = self.parse(rel).scope
            if name in scope.functions:
                return Function(scope.functions[name], scope)
        return None

    def module_files(self, module: str) -> list[str]:
        """Candidate files of a dotted module name (python/ layout and top-level layout)."""
        base = module.replace(".", "/")
        out = []
        for prefix in ("python/", ""):
            for rel in (f"{prefix}{base}.py", f"{prefix}{base}/__init__.py"):
                if self.exists(rel):
                    out.append(rel)
        return out

    def location(self, parsed: Parsed, node: cst.CSTNode) -> tuple[Path, int, int]:
        pos = parsed.positions.get(node)
        if pos is None:
            return self.path(parsed.rel), 1, 1
        return self.path(parsed.rel), pos.start.line, pos.start.column + 1

    # -- anchors -------------------------------------------------------------------------------
    def pick(self, candidates: Iterable[str], symbol: str, what: str, contains: str | None = None) -> str:
        """The one candidate file that exists (and, when several do, holds `contains`)."""
        candidates = list(candidates)
        present = [rel for rel in candidates if self.exists(rel)]
        if len(present) > 1 and contains is not None:
            present = [rel for rel in present if contains in self.text(rel)]
        if len(present) != 1:
            shown = " or ".join(candidates)
            raise Drift(self.path(present[0]) if len(present) > 1 else None,
                        f"{symbol} in {shown}", len(present), what)
        return present[0]


def one(found: list, tree: EngineTree, parsed: Parsed, symbol: str, what: str):
    """The single match of an anchor, or Drift naming the file and symbol."""
    if len(found) != 1:
        line = tree.location(parsed, found[1])[1] if len(found) > 1 else None
        raise Drift(tree.path(parsed.rel), symbol, len(found), what, line)
    return found[0]


def find_class(tree: EngineTree, parsed: Parsed, name: str, what: str) -> cst.ClassDef:
    found = [s for s in parsed.module.body if isinstance(s, cst.ClassDef) and s.name.value == name]
    return one(found, tree, parsed, f"class {name}", what)


def find_classes_with(parsed: Parsed, field: str) -> list[tuple[cst.ClassDef, cst.AnnAssign]]:
    """Top-level classes that declare an annotated field `field` (dataclass-style server args)."""
    out = []
    for s in parsed.module.body:
        if isinstance(s, cst.ClassDef):
            for stmt in s.body.body:
                if isinstance(stmt, cst.SimpleStatementLine):
                    for small in stmt.body:
                        if isinstance(small, cst.AnnAssign) and dotted(small.target) == field:
                            out.append((s, small))
    return out


def find_method(tree: EngineTree, parsed: Parsed, cls: cst.ClassDef, name: str, what: str) -> cst.FunctionDef:
    found = [m for n, m in methods(cls).items() if n == name]
    return one(found, tree, parsed, f"{cls.name.value}.{name}", what)


def find_function(tree: EngineTree, parsed: Parsed, name: str, what: str) -> cst.FunctionDef:
    found = [s for s in parsed.module.body if isinstance(s, cst.FunctionDef) and s.name.value == name]
    return one(found, tree, parsed, f"function {name}", what)


class _Collect(cst.CSTVisitor):
    """Every node of a type inside a function, not descending into nested functions/classes."""

    def __init__(self, kind: type, predicate) -> None:
        self.kind, self.predicate = kind, predicate
        self.found: list[cst.CSTNode] = []
        self._depth = 0

    def on_visit(self, node: cst.CSTNode) -> bool:
        if isinstance(node, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
            self._depth += 1
            if self._depth > 1:
                return False
        if isinstance(node, self.kind) and self.predicate(node):
            self.found.append(node)
        return True

    def on_leave(self, original_node: cst.CSTNode) -> None:
        if isinstance(original_node, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
            self._depth -= 1


def collect(node: cst.CSTNode, kind: type, predicate=lambda n: True) -> list:
    visitor = _Collect(kind, predicate)
    node.visit(visitor)
    return visitor.found


def assignments(fn: cst.FunctionDef, target: str) -> list[cst.Assign]:
    """Assignments `target = ...` (a name or `self.x`) inside a function."""
    return collect(fn, cst.Assign, lambda a: len(a.targets) == 1 and dotted(a.targets[0].target) == target)


def calls(fn: cst.CSTNode, callee: str) -> list[cst.Call]:
    """Calls whose function is spelled `callee` (`f`, `mod.f`, or just the last part `f`)."""
    def match(c: cst.Call) -> bool:
        name = dotted(c.func)
        return name is not None and (name == callee or name.rsplit(".", 1)[-1] == callee)
    return collect(fn, cst.Call, match)


def collect_all(node: cst.CSTNode) -> list[cst.CSTNode]:
    """Every node under `node` (itself included)."""
    out: list[cst.CSTNode] = []

    class _All(cst.CSTVisitor):
        def on_visit(self, n: cst.CSTNode) -> bool:
            out.append(n)
            return True

    node.visit(_All())
    return out


def parent_map(root: cst.CSTNode) -> dict[cst.CSTNode, cst.CSTNode]:
    """Each node under `root` -> its parent (identity-keyed: libcst nodes hash by identity)."""
    parents: dict[cst.CSTNode, cst.CSTNode] = {}
    stack: list[cst.CSTNode] = []

    class _Parents(cst.CSTVisitor):
        def on_visit(self, n: cst.CSTNode) -> bool:
            if stack:
                parents[n] = stack[-1]
            stack.append(n)
            return True

        def on_leave(self, original_node: cst.CSTNode) -> None:
            stack.pop()

    root.visit(_Parents())
    return parents


def chain_statement(root: cst.CSTNode, node: cst.CSTNode) -> cst.BaseStatement:
    """The statement of its block that holds `node`, an `if`/`elif`/`else` chain counted as one:
    what to insert after so that the new statement runs after every branch of the chain."""
    parents = parent_map(root)
    cur: cst.CSTNode = node
    while cur in parents:
        parent = parents[cur]
        if isinstance(parent, cst.IndentedBlock) and not isinstance(parents.get(parent), (cst.If, cst.Else)) \
                and isinstance(cur, cst.BaseStatement):
            return cur
        if isinstance(parent, cst.IndentedBlock) and isinstance(cur, cst.BaseStatement):
            # inside a branch: the chain is the If that owns this branch, climbed to its first `if`
            owner = parents[parent]
            while owner in parents and isinstance(parents[owner], (cst.If, cst.Else)) and \
                    getattr(parents[owner], "orelse", None) is owner:
                owner = parents[owner]
            if isinstance(owner, cst.Else):
                owner = parents[owner]
            return _outermost_if(parents, owner)
        cur = parent
    raise ValueError("node is not inside a statement block")


def _outermost_if(parents: dict, node: cst.CSTNode) -> cst.BaseStatement:
    """`elif` branches are Ifs nested in `orelse`: climb to the chain's first `if`."""
    while isinstance(parents.get(node), cst.If) and parents[node].orelse is node:
        node = parents[node]
    assert isinstance(node, cst.BaseStatement)
    return node
