"""The `kgen` command line: every command, its options, exit codes and JSON shapes (docs/cli.md).

One small function per command. The body of a command imports the modules it needs when it runs
(jinja2 for render, cuda.core for compile, torch for test/bench), so `kgen --help` and `kgen validate`
never load them. `kgen validate|layout PATH... [--json]` - what editors and pre-commit hooks run -
does not even build the typer app (`main` dispatches it straight from argv); everything else,
usage errors and `--help` included, goes through typer, built on first use (`app`).

Exit codes: 0 ok, 1 a user error (bad spec, failed compile, mismatch), 2 usage errors, missing or
unreadable files, no GPU. A user error prints compiler-style located lines on stderr, never a
traceback; with `--json` the same problems also come as one JSON document on stdout, on every path.

Add a command: write `<name>_command(...) -> int` (or reuse a module's), then declare it in `_build_app`
with its options; keep heavy imports inside the body.
"""

import importlib
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .diagnostics import KgenError, Problem, failure_json, print_json, print_problems, report_each
from .layout_view import layout_json, print_layout
from .validate import validate_path, validate_paths

# What the other commands run, by name: a command's module is imported when the command runs, so
# `kgen --help`, `kgen validate` and `kgen layout` (editors, pre-commit hooks) load only what they use.
# scripts/import_graph.py draws these as the CLI's lazy arrows (checked like any other: downward only).
COMMANDS = {
    "render": "kgen.render:render_paths",
    "cache": "kgen.cache:Cache",
    "cache_limit": "kgen.cache:DEFAULT_MAX_MB",
    "schema": "kgen.schema_doc:field_reference",
    "compile": "kgen.build:compile_command",
    "test": "kgen.gputest:test_command",
    "bench": "kgen.bench:bench_command",
    "recall": "kgen.recall:recall_command",
    "audit": "kgen.engines.commands:audit_command",
    "patch": "kgen.engines.commands:patch_command",
}


def command(name: str) -> Any:
    """The function (or value) COMMANDS names, its module imported now."""
    module, _, attr = COMMANDS[name].partition(":")
    return getattr(importlib.import_module(module), attr)

# ---------------------------------------------------------------------------------------------
# command bodies (no CLI framework): each returns the exit code


def reader_tunes(command: str, texts: list[str] | None) -> tuple:
    """--reader-tune values: JSON objects of int overrides, or null (the shipped tuning); else exit 2."""
    out = []
    for text in texts or []:
        try:
            value = json.loads(text)
        except ValueError as e:
            raise KgenError([Problem("usage", f"kgen {command}: --reader-tune {text!r} is not JSON ({e})")],
                            exit_code=2) from None
        if value is not None and not (isinstance(value, dict) and all(
                isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool) for k, v in value.items())):
            raise KgenError([Problem("usage", f"kgen {command}: --reader-tune {text!r}: expected null or an object "
                                     'of integers, e.g. {"kReaderWgStages": 2}')], exit_code=2)
        out.append(value)
    return tuple(out)


def case_indices(text: str) -> tuple | None:
    """--tune-cases: 'all' (None) or comma-separated indices; else exit 2."""
    if text.strip() == "all":
        return None
    try:
        return tuple(int(x) for x in text.split(","))
    except ValueError:
        raise KgenError([Problem("usage", f"kgen test: --tune-cases {text!r}: expected indices like 2,3 or all")],
                        exit_code=2) from None


def shapes(command: str, option: str, text: str | None) -> tuple | None:
    """B x keys shapes ('1x4096,32x65536'), each at least 1 x 1; else exit 2."""
    if text is None:
        return None
    out = []
    for part in text.split(","):
        b, _, k = part.strip().partition("x")
        if not (b.isdigit() and k.isdigit() and int(b) >= 1 and int(k) >= 1):
            raise KgenError([Problem("usage", f"kgen {command}: {option} {text!r}: expected B x keys shapes like "
                                     "1x4096,32x65536")], exit_code=2)
        out.append((int(b), int(k)))
    return tuple(out)


def run_reporting(body: Callable[[], int], as_json: bool = False, **empty) -> int:
    """Run a command body; a KgenError becomes its located lines on stderr (and, with --json, a
    JSON document with the command's keys left empty, e.g. results=[], plus `errors`)."""
    try:
        return body()
    except KgenError as e:
        if as_json:
            print_json(failure_json(e.problems, **empty))
        print_problems(e.problems)
        return e.exit_code


def validate_command(paths: list[Path], as_json: bool = False) -> int:
    """`kgen validate`: every problem of every path; exit 0 all valid, 1 any invalid, 2 unreadable."""

    def one(path: Path) -> tuple[int, list[dict]]:
        r = validate_path(path)
        if not as_json:
            print_problems(r.problems)
            summary = ", ".join(f"{c.spec.name} {c.layout.bytes_per_token} B/token, {c.layout.page_bytes} B/page"
                                for c in r.variants if c.layout is not None)
            state = "ok" if r.valid else f"{len(r.errors)} error(s)"
            print(f"{path}: {state}" + (f" ({summary})" if summary else ""))
        return (0 if r.valid else 1), [r.to_json()]

    def failed(path: Path, problems: list[Problem]) -> dict:
        return {"path": str(path), "valid": False, "errors": [p.to_json() for p in problems], "warnings": [],
                "variants": []}

    code, results = report_each(paths, one, failed, as_json)
    if as_json:
        print_json({"results": results})
    return code


def layout_command(paths: list[Path], as_json: bool = False) -> int:
    """`kgen layout`: the byte map of every variant; every path must validate (else exit 1/2, and
    with --json `{"layouts": [], "errors": [...]}`)."""

    laid = [c.layout for c in validate_paths(paths).checked() if c.layout is not None]
    if as_json:
        print_json(layout_json(laid))
    else:
        for lay in laid:
            print_layout(lay)
    return 0


def render_command(paths: list[Path], out: Path, validate: bool = True) -> int:
    """`kgen render`: all files or none; prints the path of every file of the output."""

    for f in command("render")(paths, out, validate=validate):
        print(f)
    return 0


def cache_command(action: str, max_mb: float | None = None, as_json: bool = False) -> int:
    """`kgen cache info|prune|clean`: the compile cache's size, its bound, its removal."""

    cache = command("cache")(timeout=0)
    removed: list = []
    if action == "prune":
        limit = command("cache_limit") if max_mb is None else max_mb
        if not limit >= 0:
            raise KgenError([Problem("usage", f"--max-mb {limit}: give a size in MiB, >= 0")], exit_code=2)
        removed, _ = cache.prune(int(limit * (1 << 20)))
    elif action == "clean":
        removed = [cache.root] if cache.root.exists() else []
        cache.clean()
    info = {**cache.info(), "removed": [str(p) for p in removed]}
    if as_json:
        print_json(info)
    else:
        print(f"{info['root']}: {info['entries']} entries, {info['bytes'] / (1 << 20):.1f} MiB"
              + (f" ({len(removed)} removed)" if action != "info" else ""))
    return 0


def schema_command() -> int:

    sys.stdout.write(command("schema")())
    return 0


# ---------------------------------------------------------------------------------------------
# the fast path and the entry point

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
    as_json = "--json" in rest
    return run_reporting(lambda: FAST_COMMANDS[argv[0]]([Path(p) for p in paths], as_json), as_json,
                         **({"layouts": []} if argv[0] == "layout" else {"results": []}))


def main(argv: list[str] | None = None) -> None:
    """The console script (`kgen`, `python -m kgen`, `python -m kgen.cli`)."""
    import signal

    def terminate(signum, _frame):  # unwind (temp dirs, locks) as on Ctrl-C, then exit 128 + signal
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, terminate)
    argv = sys.argv[1:] if argv is None else list(argv)
    code = fast_path(argv)
    if code is None:
        code = _run_app(argv)
    sys.stdout.flush()
    sys.exit(code)


def _run_app(argv: list[str]) -> int:
    """Everything but the fast path. Usage errors are exit 2; under a `--json` that selects JSON
    output (not bench's `--json FILE`) they are a JSON document too."""
    import typer
    from typer._click.exceptions import NoArgsIsHelpError, UsageError  # typer vendors click (pinned)

    wants_json = "--json" in argv and (not argv or argv[0] != "bench")
    try:
        result = _build_app()(args=argv, prog_name="kgen", standalone_mode=False)
    except NoArgsIsHelpError:  # `kgen` alone: typer printed the help; exit 2 as for any usage error
        return 2
    except UsageError as e:
        problem = Problem("usage", e.format_message(), fix=f"see kgen {argv[0] if argv else ''} --help".rstrip())
        if wants_json:
            print_json(failure_json([problem]))
        print_problems([problem])
        return 2
    except typer.Abort:
        print_problems([Problem("interrupted", "interrupted")])
        return 130
    except KgenError as e:  # every command body reports its own; this is the last net
        print_problems(e.problems)
        return e.exit_code
    return result if isinstance(result, int) else 0


# ---------------------------------------------------------------------------------------------
# the typer app (declarations only: the bodies are the functions above or in their modules)

_APP = None


def __getattr__(name: str):
    """`kgen.cli.app`: the typer app, built on first use (tests drive it with typer's CliRunner)."""
    if name == "app":
        return _build_app()
    raise AttributeError(name)


def _build_app():
    global _APP
    if _APP is not None:
        return _APP
    from typing import Annotated  # noqa: UP035 - typer reads these annotations at runtime

    import typer

    app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                      help="Turn YAML kernel specs into verified fused norm/RoPE/quantize/paged-store CUDA.")
    Paths = Annotated[list[Path], typer.Argument(help="spec or family files", show_default=False)]
    JsonFlag = Annotated[bool, typer.Option("--json", help="print one JSON object instead of text")]
    NoValidate = Annotated[bool, typer.Option("--no-validate", help="skip kgen's checks: the kernel's "
                                              "static_assert twins speak instead")]
    Tokens = Annotated[list[int] | None, typer.Option("--tokens", help="token counts, one per option (default: "
                                                      "1 to 1M)", show_default=False)]  # test, bench

    def done(code: int):
        raise typer.Exit(code)

    @app.command()
    def validate(paths: Paths, as_json: JsonFlag = False) -> None:
        """Load and check specs or families; report every problem, located."""
        done(run_reporting(lambda: validate_command(paths, as_json), as_json, results=[]))

    @app.command()
    def layout(paths: Annotated[list[Path], typer.Argument(help="spec files, or families (every variant)",
                                                           show_default=False)],
               as_json: JsonFlag = False) -> None:
        """Print the byte map of one page: rows, scale region, padding, offsets and sizes."""
        done(run_reporting(lambda: layout_command(paths, as_json), as_json, layouts=[]))

    @app.command()
    def render(paths: Paths,
               out: Annotated[Path, typer.Option("-o", "--out", help="output directory")] = Path("generated"),
               no_validate: NoValidate = False) -> None:
        """Write kernel sources, the select_kernel table and host constants (C++ and Python)."""
        done(run_reporting(lambda: render_command(paths, out, validate=not no_validate)))

    @app.command()
    def compile(paths: Paths,
                arch: Annotated[list[str] | None, typer.Option("--arch", help="override the spec's targets")] = None,
                no_validate: NoValidate = False, as_json: JsonFlag = False,
                out: Annotated[Path | None, typer.Option(
                    "--out", help="also write every cubin + a manifest here (an AOT directory kgen.ops loads "
                    "without NVRTC)")] = None) -> None:
        """NVRTC-compile every variant for its targets (or --arch), through the content-hash cache."""

        done(run_reporting(lambda: command("compile")(paths, arch or None, validate=not no_validate, as_json=as_json,
                                                   out=out), as_json, results=[]))

    ReadersOnly = Annotated[bool, typer.Option("--readers-only", help="only the read side (indexer_logits)")]
    ReaderTune = Annotated[list[str] | None, typer.Option(
        "--reader-tune", help="a reader tuning as JSON (READER_TUNING_DEFAULTS overrides; null: the shipped one); "
        "repeat to compare")]

    @app.command()
    def test(paths: Annotated[list[Path] | None, typer.Argument(help="spec or family files")] = None,
             as_json: JsonFlag = False,
             tokens: Tokens = None,
             sample: Annotated[int, typer.Option("--sample", help="also test K random specs the validator "
                                                 "accepts")] = 0,
             seed: Annotated[int, typer.Option("--seed", help="seed of the --sample draw")] = 0,
             readers_only: ReadersOnly = False, reader_tune: ReaderTune = None,
             tune_cases: Annotated[str, typer.Option(
                 "--tune-cases", help="the reader's correctness cases each --reader-tune runs (indices, or all)")]
             = "2,3") -> None:
        """Run each variant on the GPU against the Torch reference, byte for byte (the reader against kgen.score)."""

        def body() -> int:
            tunes, cases = reader_tunes("test", reader_tune), case_indices(tune_cases)
            return command("test")(paths or [], tokens or None, as_json=as_json, sample=sample, seed=seed,
                                readers_only=readers_only, reader_tunes=tunes, tune_cases=cases)

        done(run_reporting(body, as_json, ok=False, results=[]))

    @app.command()
    def bench(paths: Paths,
              tokens: Tokens = None,
              json_file: Annotated[Path | None, typer.Option("--json", help="write results here")] = None,
              use_compile: Annotated[bool | None, typer.Option(
                  "--compile/--no-compile", help="also time torch.compile of the reference (default: on unless "
                  "KGEN_BENCH_COMPILE=0)")] = None,
              compile_budget: Annotated[float | None, typer.Option(
                  "--compile-budget", help="seconds torch.compile may spend compiling")] = None,
              positions: Annotated[str, typer.Option(
                  "--positions", help="random (decode: a DRAM freqs row per token) or consecutive (prefill of a "
                  "long sequence), in a 2^20-row table")] = "random",
              readers_only: ReadersOnly = False, reader_tune: ReaderTune = None,
              reader_shapes: Annotated[str | None, typer.Option(
                  "--reader-shapes", help="the reader's B x keys shapes, e.g. 1x4096,32x65536 (default: "
                  "kgen.reader_check.BENCH_SHAPES)")] = None,
              profile: Annotated[str | None, typer.Option(
                  "--profile", help="B x keys shapes: one reader launch each after a warm-up, nothing timed "
                  "(for ncu -c)")] = None) -> None:
        """Kernel bandwidth vs device copy vs torch eager/compile, in one run (the reader's too)."""

        def body() -> int:
            tunes = reader_tunes("bench", reader_tune) or (None,)
            return command("bench")(paths, tokens or None, json_file, use_compile=use_compile,
                                 compile_budget_s=compile_budget, positions=positions, readers_only=readers_only,
                                 reader_tunes=tunes, reader_shapes=shapes("bench", "--reader-shapes", reader_shapes),
                                 profile=shapes("bench", "--profile", profile))

        done(run_reporting(body))

    EngineName = Annotated[str, typer.Option("--engine", help="sglang or vllm", show_default=False)]
    EngineRoot = Annotated[Path | None, typer.Option("--root", help="the engine's repository root or installed "
                                                     "package directory (default: the importable package)",
                                                     show_default=False)]

    @app.command()
    def audit(paths: Paths, engine: EngineName, root: EngineRoot = None, as_json: JsonFlag = False) -> None:
        """Compare every place an engine checkout hard-codes the cache ABI with the specs."""
        done(run_reporting(lambda: command("audit")(engine, root, paths, as_json), as_json, results=[]))

    @app.command()
    def patch(path: Annotated[Path, typer.Argument(help="spec file of the variant", show_default=False)],
              engine: EngineName, root: EngineRoot = None,
              out: Annotated[Path | None, typer.Option("-o", "--out", help="write the diff here")] = None,
              apply: Annotated[bool, typer.Option("--apply", help="write the patch into the engine tree")] = False,
              as_json: JsonFlag = False) -> None:
        """A unified diff that wires the variant into the engine behind one server flag."""
        done(run_reporting(lambda: command("patch")(engine, root, path, out, apply, as_json), as_json))

    @app.command()
    def recall(paths: Annotated[list[Path], typer.Argument(help="spec or family files (a .json path after --json: "
                                                           "where the JSON goes)", show_default=False)],
               contexts: Annotated[str | None, typer.Option(
                   "--contexts", help="key counts, comma-separated (4096, 64K, 1M); default 4K..1M on a GPU, "
                   "4K..64K on CPU")] = None,
               topk: Annotated[int, typer.Option(
                   "--topk", help="k of the top-k (512: DeepSeek V4; 2048: V3.2)")] = 512,
               queries: Annotated[int, typer.Option(
                   "--queries", help="queries per context (and as many needles)")] = 32,
               keys: Annotated[Path | None, typer.Option(
                   "--keys", help="keys [N, head_dim] (optional queries, weights) from a .safetensors or torch .pt "
                   "file")] = None,
               as_json: Annotated[bool, typer.Option(
                   "--json", help="print one JSON object (--json FILE.json: write it there and print the "
                   "table)")] = False,
               plot: Annotated[Path | None, typer.Option(
                   "--plot", help="PNG: agreement and needle recall against context")] = None,
               heads: Annotated[int, typer.Option("--heads", help="query heads of the synthetic queries")] = 64,
               margin: Annotated[float, typer.Option(
                   "--margin", help="needles beat the k-th best other key by this many std of the scores")] = 0.1,
               seed: Annotated[int, typer.Option("--seed", help="seed of every draw")] = 0,
               device: Annotated[str, typer.Option("--device", help="auto, cpu or cuda")] = "auto",
               toggle_hadamard: Annotated[bool, typer.Option(
                   "--toggle-hadamard", help="also measure each variant with its Hadamard setting flipped")] = False,
               ) -> None:
        """Top-k agreement and needle recall of each indexer-key variant against full-precision scores."""

        done(run_reporting(lambda: command("recall")(paths, contexts=contexts, topk=topk, queries=queries, heads=heads,
                                                  margin=margin, seed=seed, keys=keys, as_json=as_json, plot=plot,
                                                  device=device, toggle_hadamard=toggle_hadamard)))

    cache_app = typer.Typer(no_args_is_help=True, help="The compile cache: size, bound, removal.")
    app.add_typer(cache_app, name="cache")

    @cache_app.command("info")
    def cache_info(as_json: JsonFlag = False) -> None:
        """Where the cache is, how many entries, how large."""
        done(run_reporting(lambda: cache_command("info", as_json=as_json), as_json))

    @cache_app.command("prune")
    def cache_prune(max_mb: Annotated[float | None, typer.Option(
                        "--max-mb", help="keep the cache under this many MiB (default 2048)")] = None,
                    as_json: JsonFlag = False) -> None:
        """Remove failed compiles, leftovers and the least recently used entries down to --max-mb."""
        done(run_reporting(lambda: cache_command("prune", max_mb, as_json), as_json))

    @cache_app.command("clean")
    def cache_clean(as_json: JsonFlag = False) -> None:
        """Remove everything kgen put in the cache."""
        done(run_reporting(lambda: cache_command("clean", as_json=as_json), as_json))

    @app.command()
    def schema() -> None:
        """Print the reference of every spec field (type, default, meaning) as Markdown."""
        done(schema_command())

    _APP = app
    return app


if __name__ == "__main__":
    main()
