"""Problems found in specs, and how they are printed.

Every stage (YAML loading, schema, rules) reports a `Problem`: which rule, where (a `loc` path into
the spec plus the file/line/col it resolves to), what is wrong with the numbers that show it, and
how to fix it. Nothing raises on the first problem: callers collect them all.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
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

    @property
    def loc_str(self) -> str:
        return ".".join(str(p) for p in self.loc)

    def located(self, file: Path | None, line: int | None, col: int | None) -> Problem:
        return replace(self, file=file, line=line, col=col)

    def format(self) -> str:
        """Compiler-style line, so editors can jump to it."""
        where = str(self.file) if self.file else "<spec>"
        if self.line is not None:
            where += f":{self.line}:{self.col or 1}"
        text = f"{where}: {self.severity}[{self.rule}]: {self.message}"
        if self.fix:
            text += f" (fix: {self.fix})"
        return text

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
        }


@dataclass
class Problems:
    """An ordered, de-duplicated collection of problems."""

    items: list[Problem] = field(default_factory=list)

    def add(self, problem: Problem) -> None:
        if problem not in self.items:
            self.items.append(problem)

    def extend(self, problems) -> None:
        for p in problems:
            self.add(p)

    @property
    def errors(self) -> list[Problem]:
        return [p for p in self.items if p.severity == "error"]

    @property
    def warnings(self) -> list[Problem]:
        return [p for p in self.items if p.severity == "warning"]

    def __iter__(self):
        return iter(self.items)

    def __len__(self) -> int:
        return len(self.items)


class KgenError(Exception):
    """A user-facing failure: printed as its problems, exit code `exit_code`, never a traceback."""

    def __init__(self, problems: list[Problem], exit_code: int = 1):
        self.problems = problems
        self.exit_code = exit_code
        super().__init__("\n".join(p.format() for p in problems))
