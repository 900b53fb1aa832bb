"""The patch as text: a unified diff `git apply` takes, and the line endings each file keeps.

Lines are what git calls lines: text up to and including "\\n". A "\\r" before it, a form feed,
U+2028, "\\x1c" or "\\x85" inside a line are content (Python's `str.splitlines` would split there and
give git a corrupt patch). A path git would quote (a tab, a newline, a quote, a backslash, a
control or non-ASCII character) is C-quoted in the headers as git writes it.

`with_newlines_of(old, new)`: the new text of a file in the line endings of the old one (the patch
edits engine files in "\\n"; a CRLF file stays CRLF, a CR file CR; a file that mixes them is left
as the edit made it).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping

_LONE_LF = re.compile(r"(?<!\r)\n")
_LONE_CR = re.compile(r"\r(?!\n)")
_C_ESCAPES = {"\a": "\\a", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\v": "\\v", "\f": "\\f", "\r": "\\r",
              '"': '\\"', "\\": "\\\\"}


def newline_style(text: str) -> str | None:
    """'\\r\\n', '\\r' or '\\n' when the text ends its lines one way only; None when it mixes them
    (or has no line break)."""
    crlf = text.count("\r\n")
    lf = len(_LONE_LF.findall(text))
    cr = len(_LONE_CR.findall(text))
    kinds = [k for k, n in (("\r\n", crlf), ("\n", lf), ("\r", cr)) if n]
    return kinds[0] if len(kinds) == 1 else None


def with_newlines_of(old: str, new: str) -> str:
    style = newline_style(old)
    if style == "\r\n":
        return _LONE_LF.sub("\r\n", new)
    if style == "\r":
        return new.replace("\r\n", "\n").replace("\n", "\r")
    return new


def git_lines(text: str) -> list[str]:
    """The lines of `text` as git counts them, each with its "\\n"; the last one marked when the
    file does not end in a newline."""
    parts = text.split("\n")
    lines = [p + "\n" for p in parts[:-1]]
    if parts[-1]:
        lines.append(parts[-1] + "\n\\ No newline at end of file\n")
    return lines


def quote_path(path: str) -> str:
    """`path` as git prints it in a diff header: as is, or C-quoted with octal escapes."""
    if not any(c in _C_ESCAPES or ord(c) < 0x20 or ord(c) >= 0x7F for c in path):
        return path
    out = []
    for b in path.encode("utf-8", "surrogateescape"):
        c = chr(b)
        if c in _C_ESCAPES:
            out.append(_C_ESCAPES[c])
        elif b < 0x20 or b >= 0x7F:
            out.append(f"\\{b:03o}")
        else:
            out.append(c)
    return '"' + "".join(out) + '"'


def file_diff(rel: str, old: str | None, new: str | None, mode: str = "100644") -> str:
    """One file's part of a git diff: changed (both texts), created (old None) or deleted (new None)."""
    a, b = quote_path(f"a/{rel}"), quote_path(f"b/{rel}")
    header = f"diff --git {a} {b}\n"
    if old is None:
        header += f"new file mode {mode}\n"
    elif new is None:
        header += f"deleted file mode {mode}\n"
    body = "".join(difflib.unified_diff(git_lines(old or ""), git_lines(new or ""),
                                        fromfile="/dev/null" if old is None else a,
                                        tofile="/dev/null" if new is None else b))
    if not body:  # an empty file created or deleted: the header alone
        return header if old is None or new is None else ""
    return header + body


def unified_diff(tree, changed: Mapping[str, str | None]) -> str:
    """A git-appliable diff (a/ b/ prefixes) of every changed, new or deleted file of an engine
    tree's overlay (`tree.original(rel)` is the file on disk)."""
    out = []
    for rel, new in changed.items():
        old = tree.original(rel)
        mode = "100644"
        if old is not None and new is None:
            try:
                mode = "100755" if (tree.root / rel).stat().st_mode & 0o111 else "100644"
            except OSError:
                pass
        out.append(file_diff(rel, old, new, mode))
    return "".join(out)
