"""From a path to a `Document`: a single spec, or a family with its includes resolved.

Includes are resolved relative to the family file, must stay inside its directory, must exist,
and may themselves be families (their variants are merged); a cycle is an error located at the
include that closes it. Every problem found here is already located (file:line:col).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from pydantic import ValidationError

from .diagnostics import KgenError, Problem
from .document import Document, parse_variant, schema_problems
from .source import SourceFile, load_yaml
from .spec import Family

MAX_INCLUDES = 256


def load_document(path: Path) -> Document:
    """Load `path`. Raises KgenError only for an unreadable top-level file (exit 2 if missing)."""
    source = load_yaml(path)
    doc = Document(path=path, source=source, includes=[path.resolve()])
    if doc.is_family:
        _load_family(doc, source, stack=(path.resolve(),))
    else:
        v = parse_variant(source)
        doc.variants.append(v)
        doc.problems.extend(v.problems)
    return doc


def _family_model(doc: Document, source: SourceFile) -> Family | None:
    try:
        return Family.model_validate(source.data)
    except ValidationError as e:
        doc.problems.extend(source.locate(p) for p in schema_problems(e, source.data))
        return None


def _load_family(doc: Document, source: SourceFile, stack: tuple[Path, ...]) -> None:
    family = _family_model(doc, source)
    if source is doc.source:
        doc.family = family
    entries = source.data.get("variants")
    if not isinstance(entries, list):
        return
    here = source.path.parent
    for i, entry in enumerate(entries):
        loc = ("variants", i)
        if isinstance(entry, dict):
            v = parse_variant(source, base=loc)
            doc.variants.append(v)
            doc.problems.extend(v.problems)
            continue
        if not isinstance(entry, str):
            continue  # the family schema already reported the wrong type
        problem = _check_include(entry, here, loc)
        if problem is not None:
            doc.problems.append(source.locate(problem))
            continue
        target = (here / entry).resolve()
        shown = Path(os.path.normpath(here / entry))  # as the user wrote it, for messages
        doc.links[Path(os.path.abspath(here / entry))] = target
        if target in stack:
            chain = " -> ".join(p.name for p in (*stack, target))
            doc.problems.append(source.locate(Problem(
                "family-include", f"include cycle: {chain}", loc=loc, fix="remove the include that closes the cycle")))
            continue
        if target in doc.includes:
            # read once: a second copy would only repeat its name and dispatch key
            doc.problems.append(source.locate(Problem(
                "family-include", f"'{entry}' is included twice ({target.name} is already part of the family)",
                loc=loc, fix="list each file once")))
            continue
        if len(doc.includes) >= MAX_INCLUDES:
            doc.problems.append(source.locate(Problem(
                "family-include", f"more than {MAX_INCLUDES} included files", loc=loc, fix="split the family")))
            return
        try:
            inc = load_yaml(shown)
        except KgenError as e:
            # the included file's own problem (syntax, encoding...) is located in that file
            doc.problems.extend(e.problems)
            continue
        doc.includes.append(target)
        if "family" in inc.data or "variants" in inc.data:
            _load_family(doc, inc, (*stack, target))
        else:
            v = parse_variant(inc)
            doc.variants.append(v)
            doc.problems.extend(v.problems)


def _check_include(entry: str, here: Path, loc) -> Problem | None:
    """Where an include may point: a path inside the family's directory that exists. What the file
    is (a regular file, not a FIFO or device) is checked when it is read (`source.read_spec_file`)."""
    p = Path(entry)
    if p.is_absolute():
        return Problem("family-include", f"include '{entry}' is an absolute path", loc=loc,
                       fix="write it relative to the family file")
    try:
        target = (here / p).resolve()
        inside = target.is_relative_to(here.resolve())
    except (OSError, RuntimeError) as e:  # a symlink loop, a directory we may not search
        return Problem("family-include", f"include '{entry}' cannot be resolved: {getattr(e, 'strerror', None) or e}",
                       loc=loc, fix="fix the path and its permissions")
    if not inside:
        return Problem("family-include", f"include '{entry}' leaves the family's directory {here}", loc=loc,
                       fix="keep included specs in the family's directory or below it")
    try:
        mode = target.stat().st_mode
    except FileNotFoundError:
        return Problem("family-include", f"include '{entry}' does not exist (looked for {target})", loc=loc,
                       fix="fix the path; it is relative to the family file")
    except OSError as e:
        return Problem("family-include", f"include '{entry}' cannot be read: {e.strerror or e}", loc=loc,
                       fix="fix the path and its permissions")
    if stat.S_ISDIR(mode):
        return Problem("family-include", f"include '{entry}' is a directory", loc=loc, fix="name a .yaml file")
    return None
