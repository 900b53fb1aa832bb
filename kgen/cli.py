"""The `kgen` command line (contract: shared docs/contract.md).

Each command is a thin shell over a module with one job; heavy modules (jinja2, cuda.core, torch)
are imported inside the command that needs them, so `kgen --help` and `kgen validate` stay fast
and never load CUDA or torch. User errors print compiler-style lines and exit 1 (2 for usage,
missing files, no GPU); they never print a traceback.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from .diagnostics import KgenError, Problem

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Turn YAML kernel specs into verified fused norm/RoPE/quantize/paged-store CUDA.")

Paths = Annotated[list[Path], typer.Argument(help="spec or family files", show_default=False)]
JsonFlag = Annotated[bool, typer.Option("--json", help="print one JSON object instead of text")]
NoValidate = Annotated[bool, typer.Option("--no-validate", help="skip kgen's checks: the kernel's "
                                          "static_assert twins speak instead")]


def _err(text: str) -> None:
    sys.stderr.write(text + "\n")


def _print_problems(problems: list[Problem]) -> None:
    for p in problems:
        _err(p.format())


def _exit_for(problems: list[Problem]) -> int:
    return max((1 for p in problems if p.severity == "error"), default=0)


@app.command()
def validate(paths: Paths, as_json: JsonFlag = False) -> None:
    """Load and check specs or families; report every problem, located."""
    raise typer.Exit(validate_command(paths, as_json))


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
                _print_problems(e.problems)
            continue
        results.append(r.to_json())
        code = max(code, 0 if r.valid else 1)
        if not as_json:
            _print_problems(r.problems)
            summary = ", ".join(f"{c.spec.name} {c.layout.bytes_per_token} B/token, {c.layout.page_bytes} B/page"
                                for c in r.variants if c.layout is not None)
            state = "ok" if r.valid else f"{len(r.errors)} error(s)"
            print(f"{path}: {state}" + (f" ({summary})" if summary else ""))
    if as_json:
        print(json.dumps({"results": results}, indent=2))
    return code


@app.command()
def layout(paths: Annotated[list[Path], typer.Argument(help="spec files, or families (every variant)",
                                                       show_default=False)],
           as_json: JsonFlag = False) -> None:
    """Print the byte map of one page: rows, scale region, padding, offsets and sizes."""
    raise typer.Exit(layout_command(paths, as_json))


def layout_command(paths: list[Path], as_json: bool) -> int:
    """`kgen layout` without typer; every path must validate (else its errors print, exit 1)."""
    from .layout_view import layout_json, print_layout
    from .validate import validate_path

    laid, code = [], 0
    for path in paths:
        try:
            r = validate_path(path)
        except KgenError as e:
            _print_problems(e.problems)
            code = max(code, e.exit_code)
            continue
        if not r.valid:
            _print_problems(r.problems)
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


@app.command()
def render(paths: Paths,
           out: Annotated[Path, typer.Option("-o", "--out", help="output directory")] = Path("generated"),
           no_validate: NoValidate = False) -> None:
    """Write kernel sources, the select_kernel table and host constants (C++ and Python)."""
    from .render import render_paths

    written = _run(lambda: render_paths(paths, out, validate=not no_validate))
    for f in written:
        print(f)
    raise typer.Exit(0)


@app.command()
def compile(paths: Paths,
            arch: Annotated[Optional[list[str]], typer.Option("--arch", help="override the spec's targets")] = None,
            no_validate: NoValidate = False, as_json: JsonFlag = False) -> None:
    """NVRTC-compile every variant for its targets (or --arch), through the content-hash cache."""
    from .compile import compile_command

    raise typer.Exit(_run(lambda: compile_command(paths, arch or None, validate=not no_validate, as_json=as_json)))


@app.command()
def test(paths: Annotated[Optional[list[Path]], typer.Argument(help="spec or family files")] = None,
         as_json: JsonFlag = False,
         tokens: Annotated[Optional[list[int]], typer.Option("--tokens", help="token counts to test")] = None,
         sample: Annotated[int, typer.Option("--sample", help="also test K random specs the validator "
                                             "accepts")] = 0,
         seed: Annotated[int, typer.Option("--seed", help="seed of the --sample draw")] = 0) -> None:
    """Run each variant on the GPU against the Torch reference, byte for byte."""
    from .gputest import test_command

    raise typer.Exit(_run(lambda: test_command(paths or [], tokens or None, as_json=as_json,
                                               sample=sample, seed=seed)))


@app.command()
def bench(paths: Paths,
          tokens: Annotated[Optional[list[int]], typer.Option("--tokens", help="token counts")] = None,
          json_file: Annotated[Optional[Path], typer.Option("--json", help="write results here")] = None) -> None:
    """Kernel bandwidth vs device copy vs torch eager/compile, in one run."""
    from .bench import bench_command

    raise typer.Exit(_run(lambda: bench_command(paths, tokens or None, json_file)))


def _run(fn):
    """Run a command body; user errors become located lines and an exit code."""
    try:
        return fn()
    except KgenError as e:
        _print_problems(e.problems)
        raise typer.Exit(e.exit_code) from None


FAST_COMMANDS = {"validate": validate_command, "layout": layout_command}


def _fast_path(argv: list[str]) -> int | None:
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


def main() -> None:
    code = _fast_path(sys.argv[1:])
    if code is not None:
        sys.stdout.flush()
        sys.exit(code)
    try:
        app()
    except KgenError as e:  # pragma: no cover - _run catches these; this is the last net
        _print_problems(e.problems)
        sys.exit(e.exit_code)


if __name__ == "__main__":
    main()
