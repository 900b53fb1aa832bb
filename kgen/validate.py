"""`kgen validate`: load a path and run every rule; all problems, located, in one result.

`validate_paths` is how every command (compile, render, test, bench, recall, audit/patch) turns the
paths of its command line into validated specs: every path is read and checked, every problem
reported together, and the worst exit code wins (docs/cli.md: 1 invalid, 2 unreadable).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from .diagnostics import KgenError, Problem
from .document import Document
from .family import check_family
from .layout import Layout
from .load import load_document
from .rules import check_variant
from .spec import Spec


@dataclass
class Checked:
    spec: Spec
    layout: Layout | None


@dataclass
class Result:
    path: Path
    document: Document
    variants: list[Checked] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)

    @property
    def errors(self) -> list[Problem]:
        return [p for p in self.problems if p.severity == "error"]

    @property
    def valid(self) -> bool:
        return not self.errors

    def to_json(self) -> dict:
        return {
            "path": str(self.path),
            "valid": self.valid,
            "errors": [p.to_json() for p in self.problems if p.severity == "error"],
            "warnings": [p.to_json() for p in self.problems if p.severity == "warning"],
            "variants": [
                {"name": c.spec.name, "bytes_per_token": c.layout.bytes_per_token, "page_bytes": c.layout.page_bytes}
                for c in self.variants if c.layout is not None
            ],
        }


def validate_path(path: Path) -> Result:
    """Validate one file. A file that cannot be read at all raises KgenError (exit 2 if missing)."""
    doc = load_document(path)
    result = Result(path=path, document=doc, problems=list(doc.problems))
    for v in doc.variants:
        if v.spec is None:
            continue
        lay, problems = check_variant(v.spec)
        result.variants.append(Checked(v.spec, lay))
        result.problems.extend(v.locate(p) for p in problems)
    if doc.family is not None:
        result.problems.extend(_locate_family(doc, p) for p in check_family(doc.family, doc.variants))
    return result


def _locate_family(doc: Document, p: Problem) -> Problem:
    return p if p.file is not None else doc.source.locate(p)


@dataclass
class Paths:
    """What `validate_paths` found: a `Result` for each path without errors, and every error of the rest."""

    results: list[Result] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    exit_code: int = 0  # 0 nothing wrong, 1 a path is invalid, 2 a path cannot be read

    def raise_errors(self) -> None:
        if self.problems:
            raise KgenError(self.problems, max(1, self.exit_code))

    def checked(self) -> list[Checked]:
        """Every variant of every path, in order (KgenError with every error if any path has one)."""
        self.raise_errors()
        return [c for r in self.results for c in r.variants]

    def specs(self) -> list[Spec]:
        return [c.spec for c in self.checked()]


def validate_paths(paths: list[Path], validate: bool = True) -> Paths:
    """Load and validate every path. `validate=False` (`--no-validate`) runs no rule: only what loading
    finds (unreadable files, YAML and schema errors: no spec to use) stops a path; its variants come
    without a layout."""
    found = Paths()
    for path in map(Path, paths):
        try:
            result = validate_path(path) if validate else _loaded(path)
        except KgenError as e:
            found.problems += e.problems
            found.exit_code = max(found.exit_code, e.exit_code)
            continue
        if result.errors:
            found.problems += result.errors
            found.exit_code = max(found.exit_code, 1)
        else:
            found.results.append(result)
    return found


def validate_or_raise(path: Path) -> Result:
    """One path's validated result, or KgenError with every error (kgen.ops loads a spec file so)."""
    found = validate_paths([path])
    found.raise_errors()
    return found.results[0]


def _loaded(path: Path) -> Result:
    doc = load_document(path)
    return Result(path=path, document=doc, problems=list(doc.problems),
                  variants=[Checked(v.spec, None) for v in doc.variants if v.spec is not None])
