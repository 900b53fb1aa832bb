"""Command bodies that need no CLI framework: `kgen validate` and `kgen layout`, and the fast path
that runs them straight from `sys.argv`.

They are the commands people run in editors and pre-commit hooks, so they start without typer/click
(~30 ms) and without the heavy modules of the other commands; `kgen.cli` wraps the same functions.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from .diagnostics import KgenError, Problem


def err(text: str) -> None:
    """One line to stderr, flushed (progress lines must show while a long run goes on)."""
    sys.stderr.write(text + "\n")
    sys.stderr.flush()


def print_problems(problems: list[Problem]) -> None:
    for p in problems:
        err(p.format())


def validate_command(paths: list[Path], as_json: bool) -> int:
    """`kgen validate` without typer (also the fast path of `main`); returns the exit code."""
    from .validate import validate_path

    code, results = 0, []
    for path in paths:
        try:
            r = validate_path(path)
        except KgenError as e:
            code = max(code, e.exit_code)
            results.append({"path": str(path), "valid": False, "errors": [p.to_json() for p in e.problems],
                            "warnings": [], "variants": []})
            if not as_json:
                print_problems(e.problems)
            continue
        results.append(r.to_json())
        code = max(code, 0 if r.valid else 1)
        if not as_json:
            print_problems(r.problems)
            summary = ", ".join(f"{c.spec.name} {c.layout.bytes_per_token} B/token, {c.layout.page_bytes} B/page"
                                for c in r.variants if c.layout is not None)
            state = "ok" if r.valid else f"{len(r.errors)} error(s)"
            print(f"{path}: {state}" + (f" ({summary})" if summary else ""))
    if as_json:
        print(json.dumps({"results": results}, indent=2))
    return code


def layout_command(paths: list[Path], as_json: bool) -> int:
    """`kgen layout` without typer; every path must validate (else its errors print, exit 1)."""
    from .layout_view import layout_json, print_layout
    from .validate import validate_path

    laid, code = [], 0
    for path in paths:
        try:
            r = validate_path(path)
        except KgenError as e:
            print_problems(e.problems)
            code = max(code, e.exit_code)
            continue
        if not r.valid:
            print_problems(r.problems)
            code = max(code, 1)
            continue
        laid += [c.layout for c in r.variants if c.layout is not None]
    if code:
        return code
    if as_json:
        print(json.dumps(layout_json(laid), indent=2))
    else:
        for lay in laid:
            print_layout(lay)
    return 0


FAST_COMMANDS = {"validate": validate_command, "layout": layout_command}


def fast_path(argv: list[str]) -> int | None:
    """`kgen validate|layout PATH... [--json]` run without building the typer app (its click
    adapters cost ~60 ms of a ~200 ms run). Anything else (help, other options, no paths) returns
    None and goes through typer, which owns usage errors."""
    if not argv or argv[0] not in FAST_COMMANDS:
        return None
    rest = argv[1:]
    paths = [a for a in rest if not a.startswith("-")]
    if not paths or any(a != "--json" for a in rest if a.startswith("-")):
        return None
    return FAST_COMMANDS[argv[0]]([Path(p) for p in paths], "--json" in rest)
