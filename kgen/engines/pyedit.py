"""Line edits of an engine's Python file, written in the engine formatter's style (black, line 88).

A patch a maintainer merges leaves the formatter nothing to do: the statements kgen adds are
emitted the way black would write them (a call on one line if it fits, else its arguments on one
indented line, else one per line with a trailing comma; a conditional expression split at `if` and
`else` inside parentheses), and they are spliced in as whole lines, so the engine's own lines keep
their bytes. Nodes are located by libcst positions (kgen/engines/tree.py's `Parsed`).
"""

from __future__ import annotations

import libcst as cst

LINE = 88  # SGLang's black line length


def text_lines(text: str, keepends: bool = False) -> list[str]:
    """The lines of `text` as libcst's positions and git count them: split at "\n" only (a form
    feed, U+2028 or \x1c in a comment breaks no line there, whatever `str.splitlines` says)."""
    parts = text.split("\n")
    if keepends:
        lines = [p + "\n" for p in parts[:-1]]
        return [*lines, parts[-1]] if parts[-1] else lines
    lines = [p[:-1] if p.endswith("\r") else p for p in parts]
    return lines if parts[-1] else lines[:-1]


def fits(text: str) -> bool:
    return all(len(line) <= LINE for line in text.splitlines())


def call(indent: str, head: str, args: list[str], tail: str = "") -> list[str]:
    """`head(args)tail` as black writes it at `indent` (head ends before the parenthesis)."""
    one = f"{indent}{head}({', '.join(args)}){tail}"
    if len(one) <= LINE:
        return [one]
    inner = f"{indent}    {', '.join(args)}"
    if len(inner) <= LINE:
        return [f"{indent}{head}(", inner, f"{indent}){tail}"]
    return [f"{indent}{head}(", *(f"{indent}    {a}," for a in args), f"{indent}){tail}"]


def ternary(indent: str, head: str, body: str, test: str, orelse: str) -> list[str]:
    """`head(body if test else orelse)` where head is `name = ` or `return `."""
    one = f"{indent}{head}{body} if {test} else {orelse}"
    if len(one) <= LINE:
        return [one]
    inner = indent + "    "
    return [f"{indent}{head}(", f"{inner}{body}", f"{inner}if {test}", f"{inner}else {orelse}", f"{indent})"]


def if_block(indent: str, test: str, body: list[str]) -> list[str]:
    """`if test:` and its body lines (already indented one level deeper than `indent`)."""
    head = f"{indent}if {test}:"
    if len(head) > LINE:
        head_lines = [f"{indent}if (", f"{indent}    {test}", f"{indent}):"]
    else:
        head_lines = [head]
    return [*head_lines, *body]


class Lines:
    """The text of one file as lines, edited by line numbers from one parse (edits are applied
    bottom-up by the caller: `apply` sorts them)."""

    def __init__(self, text: str):
        self.text = text
        self.edits: list[tuple[int, int, list[str]]] = []  # (first line, last line, replacement); 1-based

    def insert_after(self, line: int, new: list[str]) -> None:
        self.edits.append((line + 1, line, new))

    def insert_before(self, line: int, new: list[str]) -> None:
        self.edits.append((line, line - 1, new))

    def replace(self, first: int, last: int, new: list[str]) -> None:
        self.edits.append((first, last, new))

    def apply(self) -> str:
        ending = "\r\n" if "\r\n" in self.text else "\n"
        lines = text_lines(self.text, keepends=True)
        for first, last, new in sorted(self.edits, key=lambda e: (e[0], e[1]), reverse=True):
            lines[first - 1:last] = [f"{ln}{ending}" for ln in new]
        return "".join(lines)


def span(parsed, node: cst.CSTNode) -> tuple[int, int]:
    """First and last line of a node."""
    pos = parsed.positions[node]
    return pos.start.line, pos.end.line


def indent_of(parsed, node: cst.CSTNode) -> str:
    line = text_lines(parsed.text)[span(parsed, node)[0] - 1]
    return line[: len(line) - len(line.lstrip())]


def source_lines(parsed, node: cst.CSTNode) -> list[str]:
    first, last = span(parsed, node)
    return text_lines(parsed.text)[first - 1:last]
