"""Reading YAML files into plain data while keeping where every key and item came from.

ruamel.yaml's round-trip loader records `(line, col)` for each key and sequence item; we keep the
loaded tree next to a plain-Python copy (what pydantic validates) and resolve a problem's `loc`
path back to a position with `SourceFile.position`.

Hostile input is refused here, before any model sees it: anything but a regular file (a FIFO, a
device such as /dev/zero, stdin: never read, so never a hang), files that are too large, not UTF-8,
hold tabs in indentation, use anchors/aliases (the "billion laughs" bomb), nest absurdly deep, or
carry control characters, lone surrogates or bidi overrides in a key or value (they would reach C++
sources, paths and terminals).
"""

from __future__ import annotations

import errno
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .diagnostics import KgenError, Loc, Problem

MAX_FILE_BYTES = 1 << 16  # specs are a few hundred bytes, a family of 50 inline specs ~30 KiB
MAX_DEPTH = 16
MAX_EVENTS = 5000  # YAML events in one file (a spec ~60, a family of 50 inline specs ~3000): bounds parse time
# no explicit tags at all (!!binary, !!set, !!python/..., !custom; even !!str, which the round-trip
# loader keeps as a TaggedScalar): a spec holds plain values, quoting does what !!str would
MAX_NUMBER_DIGITS = 100  # 10**100 is already absurd; Python refuses to parse > 4300 digits


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


class NotRegularFile(OSError):
    """The path names a FIFO, a device, a socket or a directory: kgen reads only regular files."""

    def __init__(self, path: Path, kind: str):
        super().__init__(errno.EINVAL, f"is {kind}, not a regular file", str(path))
        self.kind = kind


def file_kind(mode: int) -> str:
    for test, kind in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return kind
    return "a regular file" if stat.S_ISREG(mode) else "a special file"


def read_regular(path: Path | str, limit: int) -> bytes:
    """At most `limit` bytes of a regular file (OSError if larger, or NotRegularFile).

    Opened non-blocking, so a FIFO without a writer cannot hang the open, and checked with fstat on
    the open descriptor, so the file read is the file checked (no stat-then-open race)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotRegularFile(Path(path), file_kind(st.st_mode))
        if st.st_size > limit:
            raise OSError(errno.EFBIG, f"{st.st_size} bytes", str(path))
        chunks, left = [], limit + 1
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        data = b"".join(chunks)
        if len(data) > limit:  # grew while we read it
            raise OSError(errno.EFBIG, f"more than {limit} bytes (it grew while read)", str(path))
        return data
    finally:
        os.close(fd)


# characters no spec string may hold: C0/C1 controls (NUL, newline, tab, ESC...), DEL, lone surrogates
# and the bidi overrides of "trojan source" (they reach C++ sources, paths and terminals)
_BAD_CHAR_RE = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\udfff\u202a-\u202e\u2066-\u2069]")
_CHAR_NAMES = {"\x00": "NUL", "\n": "a newline", "\r": "a carriage return", "\t": "a tab", "\x1b": "ESC",
               "\x7f": "DEL"}


def bad_char(text: str) -> tuple[int, str] | None:
    """(index, name) of the first character a spec string must not hold, or None."""
    m = _BAD_CHAR_RE.search(text)
    if m is None:
        return None
    c = m.group()
    name = _CHAR_NAMES.get(c) or ("a lone surrogate" if "\ud800" <= c <= "\udfff" else
                                  "a bidi control" if c >= "\u202a" else "a control character")
    return m.start(), f"{name} (U+{ord(c):04X})"


def _fail(path: Path, rule: str, message: str, fix: str = "", line: int = 1, col: int = 1, exit_code: int = 1):
    raise KgenError([Problem(rule, message, fix=fix, file=path, line=line, col=col)], exit_code)


def _pos(node: Any, key: Any, fallback: tuple[int, int]) -> tuple[int, int]:
    """1-based (line, col) of `key` (a mapping key or list index) inside a ruamel node."""
    lc = getattr(node, "lc", None)
    try:
        if lc is not None:
            line, col = lc.key(key) if isinstance(node, dict) else lc.item(key)
            return line + 1, col + 1
    except (KeyError, IndexError, TypeError, AttributeError):
        pass
    return fallback


def _plain(node: Any, path: Path, depth: int = 0, where: tuple[int, int] = (1, 1)) -> Any:
    """Deep copy of a ruamel tree as builtin types (pydantic's strict mode wants exact types).

    `where` is the position of the key or item that holds `node`, for located errors."""
    if depth > MAX_DEPTH:
        _fail(path, "yaml-syntax", f"nesting deeper than {MAX_DEPTH} levels", "flatten the file", *where)
    if isinstance(node, dict):
        out = {}
        for k, v in node.items():
            at = _pos(node, k, where)
            if not isinstance(k, str):
                shown = type(k).__name__ if isinstance(k, (dict, list, tuple)) else repr(k)
                _fail(path, "yaml-syntax", f"key {shown} is not a string", "write keys as plain names", *at)
            _check_text(str(k), "a key", path, at)
            out[str(k)] = _plain(v, path, depth + 1, at)
        return out
    if isinstance(node, list):
        return [_plain(v, path, depth + 1, _pos(node, i, where)) for i, v in enumerate(node)]
    if isinstance(node, bool) or node is None:
        return node
    if isinstance(node, int):
        return int(node)
    if isinstance(node, float):
        return float(node)
    if isinstance(node, str):
        _check_text(str(node), "a value", path, where)
        return str(node)
    # timestamps, binary, sets, tagged values...: nothing a spec uses
    tag = getattr(getattr(node, "tag", None), "value", None) or getattr(node, "tag", None)
    what = f"tag {tag}" if isinstance(tag, str) and tag else type(node).__name__
    _fail(path, "yaml-type", f"unsupported YAML value ({what}): {_short(repr(node))}",
          "use plain strings (quote dates), numbers, booleans, lists and mappings", *where)


def _check_text(text: str, what: str, path: Path, where: tuple[int, int]) -> None:
    bad = bad_char(text)
    if bad is not None:
        i, name = bad
        shown = _short(text.encode("unicode_escape", "backslashreplace").decode("ascii"), 60)
        _fail(path, "yaml-text", f"{what} holds {name} at character {i + 1} ('{shown}'); spec strings are one "
              "line of printable text", "remove the character (quote the value; no escapes such as \\n)", *where)


def _short(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _flow_depth_problem(text: str) -> tuple[int, int] | None:
    """Position of the first `[`/`{` nested deeper than MAX_DEPTH, found without the YAML scanner
    (ruamel's scanner is quadratic in flow nesting: a few KB of `[[[[` would take seconds).
    Brackets in quoted scalars, comments and block-context plain scalars (`description: a[[[`: a
    bracket after the first character of a plain value is text) are skipped; elsewhere this
    over-approximates, which only matters for 17 unclosed brackets in a row."""
    depth, line, col, quote = 0, 1, 0, ""
    prev = "\n"  # previous non-space character
    plain = False  # inside a block-context plain scalar: brackets are text until ": ", " #" or the line's end
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        col += 1
        if c == "\n":
            line, col, prev, plain = line + 1, 0, "\n", False
            i += 1
            continue
        if quote:
            if quote == '"' and c == "\\":
                i += 2
                col += 1
                continue
            if c == quote:
                if quote == "'" and text.startswith("''", i):
                    i += 2
                    col += 1
                    continue
                quote = ""
            i += 1
            continue
        if c == "#" and (prev == "\n" or text[i - 1] in " \t"):
            j = text.find("\n", i)
            i = n if j < 0 else j
            col -= 1
            continue
        follows_space = i + 1 >= n or text[i + 1] in " \t\r\n"
        if plain:
            if c == ":" and follows_space:
                plain = False  # a key ended; its value starts after the space
        elif c in "'\"" and prev in "\n:-[{,?":
            quote = c
        elif c in "[{":
            depth += 1
            if depth > MAX_DEPTH:
                return line, col
        elif c in "]}":
            depth = max(0, depth - 1)
        elif depth == 0 and c not in " \t\r" and not (c in "-?:" and follows_space):
            plain = True  # a plain scalar starts: its later brackets and quotes are text
        if c not in " \t":
            prev = c
        i += 1
    return None


_NUMBER_RE = None


def _number_too_long(value: str) -> bool:
    """A plain scalar that YAML would read as a number, with absurdly many digits."""
    global _NUMBER_RE
    if len(value) <= MAX_NUMBER_DIGITS:
        return False
    if _NUMBER_RE is None:
        import re

        _NUMBER_RE = re.compile(r"[-+]?(0x[0-9a-fA-F_]+|0o[0-7_]+|[0-9][0-9_]*(\.[0-9_]*)?([eE][-+]?[0-9]+)?"
                                r"|\.[0-9_]+([eE][-+]?[0-9]+)?)")
    return _NUMBER_RE.fullmatch(value) is not None


def read_spec_file(path: Path) -> bytes:
    """The bytes of a spec or family file, or KgenError: missing/unreadable is exit 2 (a usage
    problem), a directory, FIFO, device or oversized file is exit 1."""
    try:
        return read_regular(path, MAX_FILE_BYTES)
    except NotRegularFile as e:
        hint = "name a .yaml file inside it" if e.kind == "a directory" else "name a regular .yaml file"
        what = "spec file" if e.kind == "a directory" else "regular file (kgen never reads pipes or devices)"
        _fail(path, "file-kind", f"is {e.kind}, not a {what}", hint)
    except OSError as e:
        if e.errno == errno.EFBIG:
            _fail(path, "file-size", f"{e.strerror}; a spec or family file is at most {MAX_FILE_BYTES} bytes",
                  "split the file")
        if e.errno in (errno.ENOENT, errno.ENOTDIR):
            _fail(path, "file-missing", "no such file", "check the path", exit_code=2)
        _fail(path, "file-read", f"cannot read: {e.strerror or e}", "check the path and its permissions",
              exit_code=2)
    raise AssertionError("unreachable")


def load_yaml(path: Path) -> SourceFile:
    """Load one YAML file or raise `KgenError` with a located problem (exit 2 if it is missing)."""
    from ruamel.yaml import YAML
    from ruamel.yaml.constructor import DuplicateKeyError
    from ruamel.yaml.error import MarkedYAMLError, YAMLError
    from ruamel.yaml.events import AliasEvent, CollectionEndEvent, CollectionStartEvent, ScalarEvent
    from ruamel.yaml.reader import ReaderError

    raw = read_spec_file(path)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw[: e.start].count(b"\n") + 1
        col = e.start - (raw.rfind(b"\n", 0, e.start) + 1) + 1
        _fail(path, "file-encoding", f"byte 0x{raw[e.start]:02x} is not UTF-8", "save the file as UTF-8", line, col)
    text = text.removeprefix("\ufeff")  # a UTF-8 byte-order mark is harmless
    for i, line_text in enumerate(text.splitlines(), 1):
        indent = line_text[: len(line_text) - len(line_text.lstrip(" \t"))]
        if "\t" in indent:
            _fail(path, "yaml-tab", "tab in indentation (YAML allows only spaces)", "indent with spaces",
                  i, indent.index("\t") + 1)
    if not text.strip():
        _fail(path, "yaml-empty", "file is empty", "write a spec (see specs/ for examples)")
    deep = _flow_depth_problem(text)
    if deep is not None:
        _fail(path, "yaml-syntax", f"nesting deeper than {MAX_DEPTH} levels", "flatten the file", *deep)

    from ruamel.yaml.parser import Parser

    state = {"count": 0, "depth": 0}

    def check(event) -> None:
        """Every event, as the composer consumes it: one parse, refused before anything is built."""
        m = event.start_mark
        if isinstance(event, AliasEvent):
            _fail(path, "yaml-alias", "anchors and aliases are not allowed in specs",
                  "write the value out in full", m.line + 1, m.column + 1)
        state["count"] += 1
        if state["count"] > MAX_EVENTS:
            _fail(path, "file-size", f"more than {MAX_EVENTS} YAML nodes; a spec has about 60",
                  "split the file", m.line + 1, m.column + 1)
        tag = getattr(event, "tag", None)
        if tag is not None and not isinstance(event, CollectionEndEvent):
            tag = getattr(tag, "value", tag)  # ruamel wraps tags in a Tag object
            if tag is not None:
                _fail(path, "yaml-type", f"explicit tag {tag} is not allowed in specs",
                      "remove the tag (quote a value to make it a string)", m.line + 1, m.column + 1)
        if isinstance(event, CollectionStartEvent):
            state["depth"] += 1
            if state["depth"] > MAX_DEPTH:
                _fail(path, "yaml-syntax", f"nesting deeper than {MAX_DEPTH} levels", "flatten the file",
                      m.line + 1, m.column + 1)
        elif isinstance(event, CollectionEndEvent):
            state["depth"] -= 1
        elif isinstance(event, ScalarEvent) and event.style is None and _number_too_long(event.value):
            _fail(path, "yaml-type", f"a number with {len(event.value)} characters; a spec's numbers "
                  f"have at most {MAX_NUMBER_DIGITS} digits", "write a sensible number", m.line + 1, m.column + 1)

    class CheckingParser(Parser):
        def get_event(self):
            event = super().get_event()
            check(event)
            return event

    yaml = YAML(typ="rt", pure=True)
    yaml.Parser = CheckingParser
    yaml.allow_duplicate_keys = False
    try:
        tree = yaml.load(text)
    except DuplicateKeyError as e:
        mark = e.problem_mark or e.context_mark
        line, col = (mark.line + 1, mark.column + 1) if mark else (1, 1)
        what = (e.problem or "duplicate key").replace("\n", " ").replace("found ", "")
        _fail(path, "yaml-duplicate-key", what, "keep one of them", line, col)
    except MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        line, col = (mark.line + 1, mark.column + 1) if mark else (1, 1)
        what = " ".join(x for x in (e.context, e.problem) if x) or "malformed YAML"
        _fail(path, "yaml-syntax", what.replace("\n", " "), "fix the YAML syntax", line, col)
    except ReaderError as e:
        line = text.count("\n", 0, e.position) + 1
        col = e.position - (text.rfind("\n", 0, e.position) + 1) + 1
        code = ord(e.character) if isinstance(e.character, str) else e.character
        _fail(path, "yaml-syntax", f"character U+{code:04X} is not allowed in YAML", "remove it", line, col)
    except YAMLError as e:
        _fail(path, "yaml-syntax", _short(str(e).replace("\n", " "), 200), "fix the YAML syntax")
    except RecursionError:
        _fail(path, "yaml-syntax", "nesting too deep", "flatten the file")
    except ValueError as e:  # e.g. an integer beyond Python's digit limit, past the check above
        _fail(path, "yaml-type", _short(str(e), 200), "write a sensible value")
    if not isinstance(tree, dict):
        kind = "an empty document" if tree is None else ("a list" if isinstance(tree, list) else "a scalar")
        _fail(path, "yaml-shape", f"the top level is {kind}, not a mapping", "write `key: value` lines")
    return SourceFile(path=path, tree=tree, data=_plain(tree, path))
