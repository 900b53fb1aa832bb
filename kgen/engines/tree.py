"""An engine checkout as kgen reads it: files (on disk, or as a patch would leave them), parsed with
libcst, and anchors found by name and structure (class, function, assignment, call), never by line.

An anchor that matches zero or two places is engine drift: `Drift` names the file and the symbol
looked for, and the audit or patch stops there (exit 1).

Engine files are read as bytes and decoded as UTF-8 with their line endings kept (a CRLF file stays
CRLF when patched). A path that is not a regular file (a directory, FIFO, broken link, link loop) is
one located error (exit 1), an unreadable or non-UTF-8 file exit 2. Before libcst sees a file, a
tokenizer pass screens it (`screen`): its size, how deep brackets, chained operators and blocks nest
(libcst recurses once per level: a few hundred overflow Python's stack, a few thousand brackets its
native one) and how long one statement is; the native parse then runs with SIGTERM and SIGINT at
their default action, so a signal stops kgen at once instead of waiting for the parse.
"""

from __future__ import annotations

import contextlib
import errno
import io
import os
import signal
import threading
import tokenize
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import cast

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

from ..diagnostics import KgenError, Problem
from ..files import JOURNAL, pending
from ..source import NotRegularFile, read_regular
from .diff import with_newlines_of
from .pyeval import Constant, Function, ModuleScope, dotted, methods

MAX_FILE_BYTES = 2 << 20  # SGLang's and vLLM's largest Python files are ~300 KB; libcst reads ~200 KB/s
MAX_NESTING = 100  # brackets + chained operators + blocks in one place; libcst overflows at ~300-400
MAX_IMPORT_HOPS = 8  # modules an imported name is followed through (engines re-export once or twice)
MAX_STATEMENT_TOKENS = 50_000  # one logical line; engine code's longest tables have a few thousand


class Drift(KgenError):
    """An expected anchor is missing or ambiguous in the engine tree."""

    def __init__(self, file: Path | None, symbol: str, found: int, what: str, line: int | None = None):
        where = "found none" if found == 0 else f"found {found}"
        problem = Problem("engine-anchor", f"{what}: looked for {symbol}, {where} (the engine moved it; "
                          "kgen cannot tell which place holds the fact)", file=file, line=line,
                          col=1 if line else None,
                          fix="update the site table in kgen/engines/ for this engine version")
        super().__init__([problem], exit_code=1)


def _unreadable(path: Path, message: str, exit_code: int, line: int | None = None, col: int | None = None,
                rule: str = "engine-file") -> KgenError:
    return KgenError([Problem(rule, message, file=path, line=line or 1, col=col or 1)], exit_code=exit_code)


def read_engine_file(path: Path) -> str | None:
    """The text of one engine file (UTF-8, line endings as they are), None when nothing is there;
    KgenError when something is there that kgen cannot read as a source file."""
    try:
        st = os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as e:
        raise _unreadable(path, f"cannot read the engine file: {e.strerror or e}", 2) from None
    if st.st_mode & 0o170000 == 0o120000:  # a symbolic link: say what is wrong with it
        try:
            os.stat(path)
        except FileNotFoundError:
            raise _unreadable(path, f"is a broken symbolic link (to {os.readlink(path)})", 1, rule="engine-file-kind") \
                from None
        except OSError as e:
            if e.errno == errno.ELOOP:
                raise _unreadable(path, "is a symbolic link loop", 1, rule="engine-file-kind") from None
            raise _unreadable(path, f"cannot read the engine file: {e.strerror or e}", 2) from None
    try:
        raw = read_regular(path, MAX_FILE_BYTES)
    except NotRegularFile as e:
        raise _unreadable(path, f"is {e.kind}, not a source file", 1, rule="engine-file-kind") from None
    except OSError as e:
        if e.errno == errno.EFBIG:
            raise _unreadable(path, f"is larger than kgen reads ({e.strerror}; at most {MAX_FILE_BYTES} bytes)", 1,
                              rule="engine-file-size") from None
        raise _unreadable(path, f"cannot read the engine file: {e.strerror or e}", 2) from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw.count(b"\n", 0, e.start) + 1
        col = e.start - (raw.rfind(b"\n", 0, e.start) + 1) + 1
        raise _unreadable(path, f"byte 0x{raw[e.start]:02x} is not UTF-8: kgen reads engine sources as UTF-8", 2,
                          line, col, rule="engine-file-encoding") from None


_OPENERS, _CLOSERS = "([{", ")]}"
_RESETS = {",", ";", ":", "=", ":=", "->"}
_WORD_OPERATORS = {"and", "or", "not", "if", "else", "in", "is", "lambda", "await"}


def screen(text: str, path: Path) -> None:
    """Refuse (KgenError, located) a file libcst would crash or hang on: statements nested deeper
    than MAX_NESTING (open brackets, plus operators chained at each bracket level, plus indented
    blocks) or longer than MAX_STATEMENT_TOKENS tokens; unmatched closing brackets and tokenizer
    errors are located here too (libcst puts them at 1:1)."""
    def refuse(message: str, line: int, col: int) -> KgenError:
        return _unreadable(path, message, 1, line, col, rule="engine-syntax")

    levels = [0]  # operators chained so far at each open bracket level
    chained = blocks = tokens = 0
    prev_string = False
    try:
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            kind, s = tok.type, tok.string
            tokens += 1
            if kind == tokenize.NEWLINE:
                levels, chained, tokens = [0], 0, 0
            elif kind == tokenize.INDENT:
                blocks += 1
            elif kind == tokenize.DEDENT:
                blocks -= 1
            elif kind == tokenize.OP:
                if s in _OPENERS:
                    levels.append(0)
                elif s in _CLOSERS:
                    if len(levels) == 1:
                        raise refuse(f"unmatched '{s}'", *_at(tok.start))
                    chained -= levels.pop()
                elif s in _RESETS or (s.endswith("=") and s not in ("==", "<=", ">=", "!=")):
                    chained -= levels[-1]
                    levels[-1] = 0
                else:
                    levels[-1] += 1
                    chained += 1
            elif kind == tokenize.NAME and s in _WORD_OPERATORS:
                levels[-1] += 1
                chained += 1
            elif kind == tokenize.STRING:
                if prev_string:  # "a" "b": libcst nests implicit concatenations pairwise
                    levels[-1] += 1
                    chained += 1
                if "f" in s[:len(s) - len(s.lstrip("rRbBuUfF"))].lower():
                    inner = _bracket_depth(s)  # an f-string's fields are expressions libcst parses
                    if len(levels) + chained + blocks + inner > MAX_NESTING:
                        raise refuse(f"an f-string nests its fields more than {MAX_NESTING} levels deep; kgen "
                                     "reads engine code up to that depth", *_at(tok.start))
            prev_string = kind == tokenize.STRING or (prev_string and kind in (tokenize.NL, tokenize.COMMENT))
            depth = len(levels) + chained + blocks
            if depth > MAX_NESTING:
                raise refuse(f"brackets, chained operators and blocks nest more than {MAX_NESTING} levels deep "
                             "here; kgen reads engine code up to that depth", *_at(tok.start))
            if tokens > MAX_STATEMENT_TOKENS:
                raise refuse(f"one statement of more than {MAX_STATEMENT_TOKENS} tokens; kgen reads engine "
                             "code with shorter statements", *_at(tok.start))
    except tokenize.TokenError as e:
        message, (line, col) = e.args[0], e.args[1]
        raise refuse(f"the engine file does not parse: {message}", line, col + 1) from None
    except (IndentationError, SyntaxError) as e:  # the tokenizer's own (dedent mismatch)
        raise refuse(f"the engine file does not parse: {e.msg}", e.lineno or 1, e.offset or 1) from None


def _at(pos: tuple[int, int]) -> tuple[int, int]:
    return pos[0], pos[1] + 1


def _bracket_depth(s: str) -> int:
    depth = best = 0
    for c in s:
        if c in _OPENERS:
            depth += 1
            best = max(best, depth)
        elif c in _CLOSERS:
            depth = max(0, depth - 1)
    return best


@contextlib.contextmanager
def _signals_stop_at_once() -> Iterator[None]:
    """SIGTERM and SIGINT at their default action while native code runs (Python handlers would
    wait for it to return); nothing is written while an engine file is parsed."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    for sig in saved:
        signal.signal(sig, signal.SIG_DFL)
    try:
        yield
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)


def parse_source(text: str, path: Path) -> cst.Module:
    """libcst's module for an engine file, screened first; KgenError (located) if it does not parse."""
    screen(text, path)
    try:
        with _signals_stop_at_once():
            return cst.parse_module(text)
    except cst.ParserSyntaxError as e:
        line, col, message = e.raw_line, e.raw_column + 1, e.message.splitlines()[0]
        located = _python_error(text)
        if located is not None:
            line, col, message = located
        raise _unreadable(path, f"the engine file does not parse: {message}", 1, line, col,
                          rule="engine-syntax") from None
    except (RecursionError, MemoryError):
        raise _unreadable(path, "the engine file nests too deep for kgen to read", 1, rule="engine-syntax") from None


def _python_error(text: str) -> tuple[int, int, str] | None:
    """Where CPython's parser puts the syntax error (libcst's PEG parser reports where it gave up,
    often a line later)."""
    import ast

    try:
        ast.parse(text)
    except SyntaxError as e:
        return e.lineno or 1, e.offset or 1, e.msg
    except (ValueError, RecursionError, MemoryError):
        return None
    return None


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

        if pending(root):  # a half-written tree would be audited (or diffed) as if it were the engine's
            raise KgenError([Problem("engine-write", "an interrupted `kgen patch --apply` left this tree half-written",
                                     file=Path(root) / JOURNAL,
                                     fix="run kgen patch --apply again: it finishes or undoes that write first")])
        self.root = Path(root)
        self.overlay: dict[str, str | None] = {}  # None: the patch deletes the file
        self._parsed: dict[str, Parsed] = {}
        self._disk: dict[str, str | None] = {}

    # -- files ---------------------------------------------------------------------------------
    def path(self, rel: str) -> Path:
        """The path diagnostics print: the root as the user gave it, joined with the file."""
        return self.root / rel

    def disk_path(self, rel: str) -> Path:
        """Where the file of checkout path `rel` lies on disk (an installed package maps it)."""
        return self.root / rel

    def original(self, rel: str) -> str | None:
        """The file as it is on disk (None when the patch creates it), read once per run."""
        if rel not in self._disk:
            self._disk[rel] = read_engine_file(self.disk_path(rel))
        return self._disk[rel]

    def exists(self, rel: str) -> bool:
        if rel in self.overlay:
            return self.overlay[rel] is not None
        return self.original(rel) is not None

    def text(self, rel: str) -> str:
        text = self.overlay[rel] if rel in self.overlay else self.original(rel)
        if text is None:
            raise KgenError([Problem("engine-file", "no such engine file", file=self.path(rel))], exit_code=2)
        return text

    def write(self, rel: str, text: str) -> None:
        """Put `text` in the overlay, in the line endings the file on disk uses (CRLF stays CRLF)."""
        old = self.original(rel)
        self.overlay[rel] = text if old is None else with_newlines_of(old, text)
        self._parsed.pop(rel, None)

    def remove(self, rel: str) -> None:
        self.overlay[rel] = None
        self._parsed.pop(rel, None)

    def write_dir(self, rel_dir: str, files: dict[str, str]) -> None:
        """Make the kgen-owned directory `rel_dir` hold exactly `files` (paths relative to the root):
        each is written, and every other source file under it (an earlier variant's kernel sources)
        is removed; caches (`__pycache__`), hidden and non-UTF-8 files stay."""
        for rel, text in files.items():
            self.write(rel, text)
        top = self.disk_path(rel_dir)
        if not top.is_dir() or top.is_symlink():
            return
        for dirpath, dirnames, filenames in os.walk(top):
            dirnames[:] = [d for d in dirnames if not d.startswith(".") and d != "__pycache__"
                           and not os.path.islink(os.path.join(dirpath, d))]
            for name in filenames:
                rel = f"{rel_dir}/{Path(dirpath, name).relative_to(top).as_posix()}"
                if name.startswith(".") or rel in files:
                    continue
                try:
                    if self.original(rel) is None:
                        continue
                except KgenError:  # not a text file kgen wrote: left alone
                    continue
                self.remove(rel)

    def files_under(self, rel_dir: str, suffix: str) -> list[str]:
        """Files directly in `rel_dir` ending with `suffix` (on disk or new in the overlay), sorted."""
        found = {f"{rel_dir}/{p.name}" for p in self.disk_path(rel_dir).glob(f"*{suffix}") if p.is_file()}
        found |= {rel for rel, text in self.overlay.items() if text is not None and rel.rpartition("/")[0] == rel_dir
                  and rel.endswith(suffix)}
        return sorted(rel for rel in found if self.overlay.get(rel, "") is not None)

    def changed(self) -> dict[str, str | None]:
        """Files whose overlay differs from the disk (None: deleted), sorted by path."""
        return {rel: text for rel, text in sorted(self.overlay.items()) if self.original(rel) != text}

    # -- parsing -------------------------------------------------------------------------------
    def parse(self, rel: str) -> Parsed:
        hit = self._parsed.get(rel)
        if hit is not None:
            return hit
        text = self.text(rel)
        module = parse_source(text, self.path(rel))
        try:
            positions = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
        except RecursionError:
            raise _unreadable(self.path(rel), "the engine file nests too deep for kgen to read", 1,
                              rule="engine-syntax") from None
        parsed = Parsed(rel, text, module, dict(positions), ModuleScope(rel, module, self._resolve_import))
        self._parsed[rel] = parsed
        return parsed

    def _resolve_import(self, module: str, name: str):
        """A function or module constant another module of the tree defines (`from sglang.x import
        f`), followed through absolute re-imports (`from vllm.a import X` in vllm/b.py) at most
        MAX_IMPORT_HOPS modules deep, so that an import cycle ends; None when the tree has none."""
        for _hop in range(MAX_IMPORT_HOPS):
            onward = None
            for rel in self.module_files(module):
                scope = self.parse(rel).scope
                if name in scope.functions:
                    return Function(scope.functions[name], scope)
                if name in scope.constants:
                    return Constant(name, scope.constants[name], scope)
                onward = onward or scope.imports.get(name)
            if onward is None:
                return None
            module, name = onward
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
        if not parsed.text.strip():  # not drift: the file itself is gone; one line, not one per site
            raise _unreadable(tree.path(parsed.rel), f"the file is empty ({what}: kgen looks for {symbol} in it)", 1)
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


def statement_of(scope: cst.CSTNode, node: cst.CSTNode) -> cst.BaseStatement:
    """The statement of `scope` that holds `node` and that code can be inserted around (it sits in an
    indented block): the line itself, or the `if`/`while`/`with`... whose header or one-line suite
    holds it. A node in a one-line `def` gives its small statement (the evaluator can stop there)."""
    parents = parent_map(scope)
    cur: cst.CSTNode | None = node
    innermost: cst.CSTNode | None = None
    while cur is not None and cur is not scope:
        parent = parents.get(cur)
        if isinstance(cur, (cst.BaseStatement, cst.BaseSmallStatement)):
            innermost = innermost or cur
            if isinstance(parent, cst.IndentedBlock) and isinstance(cur, cst.BaseStatement):
                return cur
        cur = parent
    if innermost is None:
        raise ValueError("node is not inside a statement of scope")
    return cast(cst.BaseStatement, innermost)  # a one-line def's small statement: a stop, not an insertion point


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
