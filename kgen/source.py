"""Reading YAML files into plain data while keeping where every key and item came from.

ruamel.yaml's round-trip loader records `(line, col)` for each key and sequence item; we keep the
loaded tree next to a plain-Python copy (what pydantic validates) and resolve a problem's `loc`
path back to a position with `SourceFile.position`.

Hostile input is refused here, before any model sees it: files that are too large, not UTF-8, hold
tabs in indentation, use anchors/aliases (the "billion laughs" bomb), or nest absurdly deep.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .diagnostics import KgenError, Loc, Problem

MAX_FILE_BYTES = 1 << 20  # specs are a few hundred bytes; a megabyte is already absurd
MAX_DEPTH = 16


@dataclass(frozen=True)
class SourceFile:
    path: Path
    tree: Any  # ruamel CommentedMap/CommentedSeq/scalar: carries positions
    data: Any  # the same content as plain dict/list/str/int/float/bool/None

    def position(self, loc: Loc, base: Loc = ()) -> tuple[int | None, int | None]:
        """1-based (line, col) of the deepest key/item of `loc` that exists in this file.

        `base` is the path, inside this file, of the mapping `loc` is relative to (an inline
        variant of a family lives at ("variants", i)).
        """
        node = self.tree
        line = col = None
        for part in (*base, *loc):
            lc = getattr(node, "lc", None)
            try:
                if isinstance(part, int) and isinstance(node, list):
                    pos = lc.item(part) if lc is not None else None
                    node = node[part]
                elif isinstance(node, dict) and part in node:
                    pos = lc.key(part) if lc is not None else None
                    node = node[part]
                else:
                    break
            except (KeyError, IndexError, TypeError):
                break
            if pos is not None:
                line, col = pos[0] + 1, pos[1] + 1
        if line is None:
            line, col = 1, 1
        return line, col

    def locate(self, problem: Problem, base: Loc = ()) -> Problem:
        line, col = self.position(problem.loc, base)
        return problem.located(self.path, line, col)


def _fail(path: Path, rule: str, message: str, fix: str = "", line: int = 1, col: int = 1, exit_code: int = 1):
    raise KgenError([Problem(rule, message, fix=fix, file=path, line=line, col=col)], exit_code)


def _plain(node: Any, path: Path, depth: int = 0) -> Any:
    """Deep copy of a ruamel tree as builtin types (pydantic's strict mode wants exact types)."""
    if depth > MAX_DEPTH:
        _fail(path, "yaml-syntax", f"nesting deeper than {MAX_DEPTH} levels", "flatten the file")
    if isinstance(node, dict):
        out = {}
        for k, v in node.items():
            if not isinstance(k, str):
                line, col = (node.lc.key(k) if hasattr(node, "lc") else (0, 0))
                _fail(path, "yaml-syntax", f"key {k!r} is not a string", "write keys as plain names",
                      line + 1, col + 1)
            out[str(k)] = _plain(v, path, depth + 1)
        return out
    if isinstance(node, list):
        return [_plain(v, path, depth + 1) for v in node]
    if isinstance(node, bool) or node is None:
        return node
    if isinstance(node, int):
        return int(node)
    if isinstance(node, float):
        return float(node)
    if isinstance(node, str):
        return str(node)
    # timestamps, binary, sets...: nothing a spec uses
    _fail(path, "yaml-syntax", f"unsupported YAML value of type {type(node).__name__}: {node!r}",
          "use strings, numbers, booleans, lists and mappings")


def load_yaml(path: Path) -> SourceFile:
    """Load one YAML file or raise `KgenError` with a located problem (exit 2 if it is missing)."""
    from ruamel.yaml import YAML
    from ruamel.yaml.error import MarkedYAMLError, YAMLError
    from ruamel.yaml.events import AliasEvent

    if not path.exists():
        _fail(path, "file-missing", "no such file", "check the path", exit_code=2)
    if path.is_dir():
        _fail(path, "file-kind", "is a directory, not a spec file", "name a .yaml file inside it", exit_code=2)
    try:
        size = path.stat().st_size
        if size > MAX_FILE_BYTES:
            _fail(path, "file-size", f"{size} bytes; a spec is at most {MAX_FILE_BYTES} bytes", "split the file")
        raw = path.read_bytes()
    except OSError as e:
        _fail(path, "file-read", f"cannot read: {e.strerror}", exit_code=2)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw[: e.start].count(b"\n") + 1
        col = e.start - (raw.rfind(b"\n", 0, e.start) + 1) + 1
        _fail(path, "file-encoding", f"byte 0x{raw[e.start]:02x} is not UTF-8", "save the file as UTF-8", line, col)
    for i, line_text in enumerate(text.splitlines(), 1):
        indent = line_text[: len(line_text) - len(line_text.lstrip(" \t"))]
        if "\t" in indent:
            _fail(path, "yaml-tab", "tab in indentation (YAML allows only spaces)", "indent with spaces",
                  i, indent.index("\t") + 1)
    if not text.strip():
        _fail(path, "yaml-empty", "file is empty", "write a spec (see specs/ for examples)")

    yaml = YAML(typ="rt", pure=True)
    yaml.allow_duplicate_keys = False
    try:
        for event in yaml.parse(text):
            if isinstance(event, AliasEvent):
                m = event.start_mark
                _fail(path, "yaml-alias", "anchors and aliases are not allowed in specs",
                      "write the value out in full", m.line + 1, m.column + 1)
        tree = yaml.load(text)
    except MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        line, col = (mark.line + 1, mark.column + 1) if mark else (1, 1)
        what = " ".join(x for x in (e.context, e.problem) if x) or "malformed YAML"
        _fail(path, "yaml-syntax", what.replace("\n", " "), "fix the YAML syntax", line, col)
    except YAMLError as e:
        _fail(path, "yaml-syntax", str(e).replace("\n", " "), "fix the YAML syntax")
    except RecursionError:
        _fail(path, "yaml-syntax", "nesting too deep", "flatten the file")
    if not isinstance(tree, dict):
        kind = "empty document" if tree is None else f"a {type(tree).__name__}"
        _fail(path, "yaml-shape", f"the top level is {kind}, not a mapping", "write `key: value` lines")
    return SourceFile(path=path, tree=tree, data=_plain(tree, path))
