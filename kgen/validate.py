"""`kgen validate`: load a path and run every rule; all problems, located, in one result."""

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
    document: Document | None
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


def validate_or_raise(path: Path) -> Result:
    """For render/compile: the validated result, or KgenError with every error."""
    result = validate_path(path)
    if not result.valid:
        raise KgenError(result.errors)
    return result
