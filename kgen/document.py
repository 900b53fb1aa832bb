"""A loaded file: its variants (each a `Spec` or the schema problems that kept it from being one)
and, for a family, the `Family` model; every problem located in the YAML it came from.

`parse_variant` turns one mapping of a `SourceFile` into a `Variant`; `schema_problems` turns
pydantic's errors into one located-to-be `Problem` per offending field.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from pydantic import ValidationError

from .diagnostics import Loc, Problem
from .source import SourceFile
from .spec import Family, Spec


@dataclass
class Variant:
    """One variant as loaded: the model (None when its schema is broken) and where it came from."""

    source: SourceFile
    base: Loc = ()  # path of the spec mapping inside `source` (inline family entries)
    spec: Spec | None = None
    problems: list[Problem] = field(default_factory=list)

    @property
    def name(self) -> str | None:
        if self.spec is not None:
            return self.spec.name
        data = self.data
        return data.get("name") if isinstance(data, dict) and isinstance(data.get("name"), str) else None

    @property
    def data(self):
        node = self.source.data
        for part in self.base:
            node = node[part]
        return node

    def locate(self, problem: Problem) -> Problem:
        return self.source.locate(problem, self.base)


@dataclass
class Document:
    """What one path on the command line holds: a single variant or a family of them."""

    path: Path
    source: SourceFile
    family: Family | None = None
    variants: list[Variant] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)  # located; file-level and schema problems
    includes: list[Path] = field(default_factory=list)  # every file read, for cache keys
    # each include as written (made absolute, links kept) -> the file it resolved to: a memo of this
    # document is stale once one of them resolves elsewhere (a symlinked directory retargeted)
    links: dict[Path, Path] = field(default_factory=dict)

    @property
    def is_family(self) -> bool:
        return "family" in self.source.data or "variants" in self.source.data


def _real_loc(loc: tuple, data, keep_last: bool) -> tuple:
    """`loc` without pydantic's union tags ('str', 'int', 'dict[any,any]'...): keep the parts that
    exist in the data (and the last one of a missing/unknown-key error, which names the key)."""
    out, node = [], data
    for i, part in enumerate(loc):
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
            node = node[part]
        elif data is None and not (isinstance(part, str) and "[" in part):
            pass  # no data to compare with: keep all but the obvious tags
        elif keep_last and i == len(loc) - 1:
            pass
        else:
            continue
        out.append(part)
    return tuple(out)


def _got(value) -> str:
    if isinstance(value, (dict, list)):
        return type(value).__name__
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def schema_problems(error: ValidationError, data=None) -> list[Problem]:
    """pydantic errors as (unlocated) problems, one per offending field.

    A value that fails every member of a union (e.g. `variants: [5]`) gives pydantic one error per
    member; they are merged into one problem ("a valid string or a valid dictionary")."""
    out: list[Problem] = []
    merged: dict[tuple, int] = {}
    for e in error.errors(include_url=False):
        kind = e["type"]
        loc = _real_loc(tuple(e["loc"]), data, keep_last=kind in ("missing", "extra_forbidden"))
        if kind == "extra_forbidden":
            rule, msg, fix = "schema-unknown-key", f"unknown key '{loc[-1]}'", "remove it or fix its spelling"
        elif kind == "missing":
            rule, msg, fix = "schema-missing", f"required key '{loc[-1]}' is missing", f"add '{loc[-1]}:'"
        else:
            rule, fix = "schema-type", "see docs/spec.md (kgen schema) for the field"
            want = e["msg"]
            if (rule, loc) in merged:  # another member of the same union
                i = merged[(rule, loc)]
                prev = out[i]
                head, _, tail = prev.message.rpartition(" (got ")
                want = want.removeprefix("Input should be ")
                if want not in head:
                    out[i] = Problem(rule, f"{head} or {want} (got {tail}", loc=loc, fix=fix)
                continue
            msg = f"{want} (got {_got(e.get('input'))})"
            merged[(rule, loc)] = len(out)
        out.append(Problem(rule, msg, loc=loc, fix=fix))
    return out


def parse_variant(source, base: Loc = ()) -> Variant:
    v = Variant(source=source, base=base)
    data = v.data
    if not isinstance(data, dict):
        v.problems.append(v.locate(Problem("schema-type", "a variant must be a mapping",
                                           fix="write `key: value` lines")))
        return v
    try:
        v.spec = Spec.model_validate(data)
    except ValidationError as e:
        v.problems.extend(v.locate(p) for p in schema_problems(e, data))
    return v
