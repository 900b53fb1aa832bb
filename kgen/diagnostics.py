"""Problems found in specs, and how they are printed.

Every stage (YAML loading, schema, rules) reports a `Problem`: which rule, where (a `loc` path into
the spec plus the file/line/col it resolves to), what is wrong with the numbers that show it, and
how to fix it. Nothing raises on the first problem: callers collect them all.

The printing helpers live here too (one line per problem on stderr; JSON documents for `--json`), so
library modules (gputest, bench) report without importing the CLI.
"""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

Severity = Literal["error", "warning"]
Loc = tuple[str | int, ...]


@dataclass(frozen=True)
class Problem:
    rule: str  # stable kebab-case id, e.g. "store-scale"
    message: str  # what is wrong, with the byte math that shows it
    loc: Loc = ()  # path of the offending key, e.g. ("store", "scale")
    fix: str = ""  # what to change
    severity: Severity = "error"
    file: Path | None = None
    line: int | None = None  # 1-based
    col: int | None = None  # 1-based
    notes: tuple[str, ...] = ()  # lines printed after it as they are (a compiler's own located errors)

    @property
    def loc_str(self) -> str:
        return ".".join(str(p) for p in self.loc)

    def located(self, file: Path | None, line: int | None, col: int | None) -> Problem:
        return replace(self, file=file, line=line, col=col)

    def format(self) -> str:
        """Compiler-style line, so editors can jump to it."""
        where = str(self.file) if self.file else "kgen"
        if self.line is not None:
            where += f":{self.line}:{self.col or 1}"
        text = f"{where}: {self.severity}[{self.rule}]: {self.message}"
        if self.fix:
            text += f" (fix: {self.fix})"
        return one_line(text)

    def to_json(self) -> dict:
        return {
            "rule": self.rule,
            "severity": self.severity,
            "loc": self.loc_str,
            "file": str(self.file) if self.file else None,
            "line": self.line,
            "col": self.col,
            "message": self.message,
            "fix": self.fix,
            **({"notes": list(self.notes)} if self.notes else {}),
        }


def one_line(text: str) -> str:
    """`text` as one printable line: newlines become spaces, other control characters (ESC...) their
    escapes, so no diagnostic spans lines or drives the terminal."""
    if text.isprintable():
        return text
    text = " ".join(part.strip() for part in text.splitlines() if part.strip())
    return "".join(c if c.isprintable() else c.encode("unicode_escape", "backslashreplace").decode("ascii")
                   for c in text)


def shown(value) -> str:
    """A user's value quoted inside a one-line message: repr-escaped where it holds anything odd
    (control characters, a quote that would end the message's own quotes)."""
    text = str(value)
    return text if text.isprintable() and "'" not in text else repr(text)[1:-1]


class KgenError(Exception):
    """A user-facing failure: printed as its problems, exit code `exit_code`, never a traceback."""

    def __init__(self, problems: list[Problem], exit_code: int = 1):
        self.problems = problems
        self.exit_code = exit_code
        super().__init__("\n".join(p.format() for p in problems))


class ArgumentError(KgenError, ValueError):
    """A kernel or op argument does not match the spec; the message names the argument."""

    def __init__(self, message: str, fix: str = ""):
        super().__init__([Problem("kernel-argument", message, fix=fix)], exit_code=1)
        self.message = message

    def __str__(self) -> str:
        return self.message


_err_lock = threading.Lock()


def err(text: str) -> None:
    """One line to stderr, flushed (progress lines must show while a long run goes on); whole lines
    also from several threads (kgen compile's workers)."""
    with _err_lock:
        sys.stderr.write(text + "\n")
        sys.stderr.flush()


def print_problems(problems: list[Problem]) -> None:
    for p in problems:
        err(p.format())
        for note in p.notes:
            err(note)


def print_json(doc: dict) -> None:
    sys.stdout.write(json.dumps(doc, indent=2) + "\n")
    sys.stdout.flush()


def failure_json(problems: list[Problem], **empty) -> dict:
    """The `--json` document of a command that failed before producing results: the command's own
    keys, empty (`results=[]`, `layouts=[]`), plus every problem."""
    return {**empty, "errors": [p.to_json() for p in problems]}


def report_each(paths: Iterable[Path], one: Callable[[Path], tuple[int, list[dict]]],
                failed: Callable[[Path, list[Problem]], dict], as_json: bool) -> tuple[int, list[dict]]:
    """A command that reports every path on its own (`kgen validate`, `kgen audit`): `one(path)` gives
    its exit code and JSON rows; a path it cannot load (KgenError) becomes the row `failed(path,
    problems)`, its problems printed unless `as_json`. Returns the worst exit code and every row."""
    code, rows = 0, []
    for path in paths:
        try:
            path_code, path_rows = one(path)
        except KgenError as e:
            code = max(code, e.exit_code)
            rows.append(failed(path, e.problems))
            if not as_json:
                print_problems(e.problems)
            continue
        code = max(code, path_code)
        rows += path_rows
    return code, rows
