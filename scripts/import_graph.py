"""The import graph of kgen/, drawn from the code: every internal import, function-local ones counted.

    python scripts/import_graph.py            # the listing: floors, modules, arrows, problems (exit 1 on any)
    python scripts/import_graph.py --dot      # the same graph for graphviz

One job: read kgen/**/*.py with `ast` (nothing is imported), resolve each `import` / `from ... import`
that names a kgen module (a package's `from . import x` counts as an arrow to `x`), and check the arrows
against FLOORS, the one place the layering is defined. A module may import modules on its own floor
or below; an arrow to a higher floor is an upward import; a cycle anywhere is an import circle. An
import inside a function (or under `if TYPE_CHECKING:`) counts like a top-level one. Imports inside
functions exist only to defer an optional third-party package (OPTIONAL: torch, cuda-python, jinja2,
...): a local import of such a package is allowed, and so is a local import of a kgen module that is
*optional-bound* (it imports one of them at module level, itself or through its module-level kgen
imports: kgen.ops registers torch ops, so `kgen test` defers it to say "no torch" instead of failing);
any other local import of a kgen module is reported (tests/test_layering.py fails on it). A module of
the top floor (the command line, the package's lazy public API) may name modules in a module-level dict
of "kgen.module:attr" strings (kgen.cli.COMMANDS, kgen._API), imported when used: the tool draws each as
a lazy arrow and checks it like any other (downward, no circle). DEFERRED
lists the required packages a module may still import lazily because they are slow to import and one
command needs them (the CLI's start-up: `kgen validate` in an editor hook).
"""

from __future__ import annotations

import ast
import re
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "kgen"

# The floors, lowest first: what each layer of kgen is for, and its modules. A module imports only
# modules of its own floor or of a floor below.
FLOORS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("foundation: models, messages, files", (
        "spec", "diagnostics", "resources", "files", "dtypes", "engines.pyeval")),
    ("input and platform: YAML, documents, a recall keys file, architectures, toolchain, cache", (
        "source", "document", "load", "schema_doc", "arch", "toolchain", "cache", "output", "recall_keys")),
    ("rules and byte math: validation, the page layout, the reader's rules and launch plan", (
        "layout", "reader_layout", "reader_plan", "topk_plan", "rules", "family", "validate", "resolve", "sample",
        "layout_view")),
    ("kernel ABI: the kernel registry", ("abi",)),
    ("code generation and compilation", ("render", "compile", "build", "aot")),
    ("device: the launch stack, tensor maps, the native fast path, loaded kernels", (
        "launcher", "tma", "native", "fastpath", "runtime")),
    ("Torch numerics: the reference, its inputs, the read side's Torch path", ("reference", "inputs", "score")),
    ("ops: torch.ops.kgen.*", ("ops", "ops.registry", "ops.writer", "ops.reader", "ops.topk")),
    ("checks and measurements: kgen test / bench / recall, engines", (
        "compare", "gpurun", "reader_check", "gputest", "timing", "host_cost", "peer_sglang", "peer_sglang_topk",
        "topk_bench", "bench", "recall", "engines", "engines.diff", "engines.pyedit", "engines.tree", "engines.sites",
        "engines.installed", "engines.sglang", "engines.vllm", "engines.vllm_patch", "engines.vllm_bundle",
        "engines.bundle", "engines.commands")),
    ("command line", ("cli", "__main__", "")),  # "" is the package itself (kgen/__init__.py: lazy API)
)

# third-party packages a module may import inside a function (optional at install time, or slow to import)
OPTIONAL = ("torch", "cuda", "jinja2", "matplotlib", "libcst", "numpy", "deep_gemm")  # deep_gemm: the peer
# required packages a function may import lazily (slow imports that one command path needs)
DEFERRED = ("typer", "rich", "ruamel", "platformdirs", "filelock")


LAZY_NAME = re.compile(r"kgen(\.[a-z_][a-z0-9_]*)*(:[A-Za-z_]\w*)?")


@dataclass(frozen=True)
class Arrow:
    source: str  # module name relative to kgen ("ops.reader"; "" for kgen itself)
    target: str
    line: int
    local: bool  # inside a function / class body / TYPE_CHECKING block
    lazy: bool = False  # named in a module-level table of "kgen.module:attr" strings (imported on use)


@dataclass(frozen=True)
class LocalImport:
    source: str
    name: str  # the imported top-level package
    line: int
    local: bool = True


def optional_bound(edges: list[Arrow], third: list[LocalImport]) -> set[str]:
    """The kgen modules that import an OPTIONAL package at module level, themselves or through a chain
    of module-level kgen imports."""
    bound = {t.source for t in third if not t.local and t.name in OPTIONAL}
    top = [(a.source, a.target) for a in edges if not a.local]
    grew = True
    while grew:
        grew = False
        for s, t in top:
            if t in bound and s not in bound:
                bound.add(s)
                grew = True
    return bound


def module_name(path: Path) -> str:
    rel = path.relative_to(PACKAGE).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _is_module(name: str, known: dict[str, Path]) -> bool:
    return name in known


def _walk(tree: ast.AST):
    """(node, local) for every import node; local: not at module level (a def, a class, an if
    TYPE_CHECKING, a try at module level counts as module level)."""
    def visit(node: ast.AST, local: bool):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                yield child, local
            inner = local or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda))
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                inner = True
            yield from visit(child, inner)
    yield from visit(tree, False)


def arrows() -> tuple[list[Arrow], list[LocalImport]]:
    known = modules()
    out: list[Arrow] = []
    third: list[LocalImport] = []
    for mod, path in known.items():
        is_pkg = path.name == "__init__.py"
        pkg = mod.split(".") if is_pkg else mod.split(".")[:-1]
        if mod == "":
            pkg = []
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for node, local in _walk(tree):
            targets: list[str] = []
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = pkg[: len(pkg) - (node.level - 1)] if node.level > 1 else list(pkg)
                    base_name = ".".join(base + ([node.module] if node.module else []))
                elif node.module and (node.module == "kgen" or node.module.startswith("kgen.")):
                    base_name = node.module.removeprefix("kgen").removeprefix(".")
                else:
                    if node.module:
                        third.append(LocalImport(mod, node.module.split(".")[0], node.lineno, local))
                    continue
                for a in node.names:
                    sub = f"{base_name}.{a.name}" if base_name else a.name
                    targets.append(sub if _is_module(sub, known) else base_name)
            else:
                for a in node.names:
                    if a.name == "kgen" or a.name.startswith("kgen."):
                        targets.append(a.name.removeprefix("kgen").removeprefix("."))
                    else:
                        third.append(LocalImport(mod, a.name.split(".")[0], node.lineno, local))
            for t in dict.fromkeys(targets):
                if t != mod:
                    out.append(Arrow(mod, t, node.lineno, local))
        for node in tree.body:  # module-level tables of lazily imported names
            if isinstance(node, (ast.Assign, ast.AnnAssign)) and isinstance(node.value, ast.Dict):
                for v in node.value.values:
                    if isinstance(v, ast.Constant) and isinstance(v.value, str) and LAZY_NAME.fullmatch(v.value):
                        target = v.value.split(":")[0].removeprefix("kgen").removeprefix(".")
                        if target in known and target != mod:
                            out.append(Arrow(mod, target, v.lineno, True, lazy=True))
    return out, third


def floor_of() -> dict[str, int]:
    out: dict[str, int] = {}
    for i, (_, mods) in enumerate(FLOORS):
        for m in mods:
            out[m] = i
    return out


def cycles(edges: list[Arrow]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), each sorted."""
    graph: dict[str, set[str]] = {}
    for a in edges:
        graph.setdefault(a.source, set()).add(a.target)
        graph.setdefault(a.target, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    comps: list[list[str]] = []
    counter = [0]

    def strong(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                comps.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(graph):
        if v not in index:
            strong(v)
    return sorted(comps)


@dataclass
class Report:
    modules: list[str]
    arrows: list[Arrow]
    local_third: list[LocalImport]
    unplaced: list[str]  # modules FLOORS does not name
    stale: list[str]  # names in FLOORS that are no module
    upward: list[Arrow]
    circles: list[list[str]]
    local_internal: list[Arrow]  # function-local imports of kgen modules that defer no optional package
    local_disallowed: list[LocalImport]  # function-local imports of packages not in OPTIONAL or DEFERRED
    deferred: list[Arrow]  # function-local imports of optional-bound kgen modules (allowed)

    @property
    def ok(self) -> bool:
        return not (self.unplaced or self.stale or self.upward or self.circles or self.local_internal
                    or self.local_disallowed)


def report() -> Report:
    mods = sorted(modules())
    edges, third = arrows()
    floors = floor_of()
    unplaced = [m for m in mods if m not in floors]
    stale = [m for m in floors if m not in mods]
    upward = [a for a in edges if a.source in floors and a.target in floors and floors[a.target] > floors[a.source]]
    top = len(FLOORS) - 1
    bound = optional_bound(edges, third)
    local_third = [t for t in third if t.local]
    return Report(mods, edges, local_third, unplaced, stale, upward, cycles(edges),
                  [a for a in edges if a.local and a.target not in bound
                   and not (a.lazy and floors.get(a.source) == top)],
                  [t for t in local_third if t.name not in OPTIONAL + DEFERRED and t.name not in sys.stdlib_module_names
                   and t.name != "__future__"],
                  [a for a in edges if a.local and a.target in bound])


def _name(m: str) -> str:
    return f"kgen.{m}" if m else "kgen"


def listing(r: Report) -> str:
    floors = floor_of()
    lines = [f"kgen import graph (scripts/import_graph.py): {len(r.modules)} modules on {len(FLOORS)} floors, "
             f"{len({(a.source, a.target) for a in r.arrows})} internal arrows "
             f"({len({(a.source, a.target) for a in r.deferred})} function-local, each deferring an optional "
             f"package; {len({(a.source, a.target) for a in r.local_internal})} other function-local), "
             f"{len(r.upward)} upward, {len(r.circles)} circles", ""]
    for i in reversed(range(len(FLOORS))):
        title, mods = FLOORS[i]
        lines.append(f"floor {i}: {title}")
        for m in mods:
            if m not in r.modules:
                continue
            deps = sorted({a.target for a in r.arrows if a.source == m})
            shown = [_name(d) + ("" if floors.get(d, -1) < i else " (same floor)") for d in deps]
            lines.append(f"  {_name(m):24} -> {', '.join(shown) or '(nothing of kgen)'}")
        lines.append("")
    local = sorted({(t.source, t.name) for t in r.local_third if t.name not in sys.stdlib_module_names})
    lines.append("function-local imports of third-party packages: " + ", ".join(f"{_name(s)}: {n}" for s, n in local))
    lines.append("function-local imports of optional-bound kgen modules: "
                 + ", ".join(sorted({f"{_name(a.source)} -> {_name(a.target)}" for a in r.deferred})))
    for what, items in (("modules no floor names", r.unplaced), ("floor names that are no module", r.stale)):
        if items:
            lines.append(f"{what}: {', '.join(items)}")
    for a in r.upward:
        lines.append(f"UPWARD: {_name(a.source)}:{a.line} imports {_name(a.target)} (floor {floors[a.source]} -> "
                     f"{floors[a.target]})")
    for c in r.circles:
        lines.append(f"CIRCLE: {' <-> '.join(_name(m) for m in c)}")
    for a in r.local_internal:
        lines.append(f"LOCAL: {_name(a.source)}:{a.line} imports {_name(a.target)} inside a function")
    for t in r.local_disallowed:
        lines.append(f"LOCAL: {_name(t.source)}:{t.line} imports {t.name} inside a function (not optional)")
    return "\n".join(lines) + "\n"


def dot(r: Report) -> str:
    floors = floor_of()
    out = ["digraph kgen {", "  rankdir=BT; node [shape=box, fontsize=10];"]
    for i, (title, mods) in enumerate(FLOORS):
        out.append(f'  subgraph cluster_{i} {{ label="{i}: {title.split(":")[0]}"; rank=same;')
        out += [f'    "{_name(m)}";' for m in mods if m in r.modules]
        out.append("  }")
    for s, t in sorted({(a.source, a.target) for a in r.arrows}):
        bad = floors.get(t, 0) > floors.get(s, 0)
        out.append(f'  "{_name(s)}" -> "{_name(t)}"{" [color=red]" if bad else ""};')
    return "\n".join(out + ["}"]) + "\n"


def main(argv: list[str]) -> int:
    r = report()
    sys.stdout.write(dot(r) if "--dot" in argv else listing(r))
    return 0 if r.ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
