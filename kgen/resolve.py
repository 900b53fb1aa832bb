"""A variant argument -> its `Spec`: what every op and the Torch paths take as `variant`.

One job: turn a `Spec`, a spec path or "family.yaml::variant_name" into a validated Spec, cached by the
content of every file it was read from (a family's included specs too), never by mtimes, so a process
never re-validates an unchanged file and never keeps a changed one. `spec_digest` is the one hash of a
spec's fields (the op's variant names, the AOT manifest, the loaded-kernel memo key).
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from .diagnostics import ArgumentError, KgenError, Problem
from .spec import Spec
from .validate import validate_or_raise

__all__ = ["forget", "resolve_spec", "spec_digest"]

# (resolved path, variant name) -> (spec, sha256 of every file validating it read). A hit is reused
# only while all of those files keep their content.
_path_cache: dict[tuple[str, str], tuple[Spec, dict[Path, str | None]]] = {}


def spec_digest(spec: Spec) -> str:
    """sha256 of the spec's canonical JSON: every field, defaults included, so any change changes it."""
    return hashlib.sha256(spec.model_dump_json().encode()).hexdigest()


def _sha256(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


def resolve_spec(variant: Spec | str | os.PathLike) -> Spec:
    """A Spec from a Spec, a spec path, or "family.yaml::name" (an ArgumentError naming `variant` for a
    text that names no file; a file's own problems located in it)."""
    if isinstance(variant, Spec):
        return variant
    if not isinstance(variant, (str, os.PathLike)):
        raise ArgumentError(f"variant: expected a spec path, 'family.yaml::name' or a Spec, got "
                            f"{type(variant).__name__}")
    text = os.fspath(variant)
    path_s, _, name = text.partition("::")
    if not path_s.strip():
        raise ArgumentError(f"variant: {text!r} names no spec file",
                            fix="pass a spec path, 'family.yaml::name' or a Spec")
    path = Path(path_s)
    try:
        path.stat()
    except OSError as e:
        raise KgenError([Problem("missing-file", f"{path}: cannot read the spec ({e.strerror})")],
                        exit_code=2) from None
    if path.is_dir():
        raise ArgumentError(f"variant: {path} is a directory, not a spec file",
                            fix="pass a spec path, 'family.yaml::name' or a Spec")
    key = (str(path.resolve()), name)
    hit = _path_cache.get(key)
    if hit is not None and all(_sha256(f) == digest for f, digest in hit[1].items()):
        return hit[0]
    result = validate_or_raise(path)
    specs = [c.spec for c in result.variants]
    if name:
        chosen = [s for s in specs if s.name == name]
        if not chosen:
            raise ArgumentError(f"variant: {path} has no variant named '{name}' (it has: "
                                f"{', '.join(s.name for s in specs)})")
        spec = chosen[0]
    elif len(specs) == 1:
        spec = specs[0]
    else:
        raise ArgumentError(f"variant: {path} is a family of {len(specs)} variants "
                            f"({', '.join(s.name for s in specs)}); pick one",
                            fix=f"pass '{path}::{specs[0].name}' or a Spec")
    read = result.document.includes if result.document is not None else [path]
    _path_cache[key] = (spec, {f: _sha256(f) for f in read})
    return spec


def forget() -> None:
    """Drop every cached resolution (tests; a long process that wants files re-read)."""
    _path_cache.clear()
