"""The `kgen` command line (contract: shared docs/contract.md).

Each command is a thin shell over a module with one job; heavy modules (jinja2, cuda.core, torch)
are imported inside the command that needs them, so `kgen --help` and `kgen validate` stay fast
and never load CUDA or torch. User errors print compiler-style lines and exit 1 (2 for usage,
missing files, no GPU); they never print a traceback.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from .commands import layout_command, print_problems, validate_command
from .diagnostics import KgenError

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Turn YAML kernel specs into verified fused norm/RoPE/quantize/paged-store CUDA.")

Paths = Annotated[list[Path], typer.Argument(help="spec or family files", show_default=False)]
JsonFlag = Annotated[bool, typer.Option("--json", help="print one JSON object instead of text")]
NoValidate = Annotated[bool, typer.Option("--no-validate", help="skip kgen's checks: the kernel's "
                                          "static_assert twins speak instead")]


@app.command()
def validate(paths: Paths, as_json: JsonFlag = False) -> None:
    """Load and check specs or families; report every problem, located."""
    raise typer.Exit(validate_command(paths, as_json))


@app.command()
def layout(paths: Annotated[list[Path], typer.Argument(help="spec files, or families (every variant)",
                                                       show_default=False)],
           as_json: JsonFlag = False) -> None:
    """Print the byte map of one page: rows, scale region, padding, offsets and sizes."""
    raise typer.Exit(layout_command(paths, as_json))


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
            no_validate: NoValidate = False, as_json: JsonFlag = False,
            out: Annotated[Optional[Path], typer.Option(
                "--out", help="also write every cubin + a manifest here (an AOT directory kgen.ops loads "
                "without NVRTC)")] = None) -> None:
    """NVRTC-compile every variant for its targets (or --arch), through the content-hash cache."""
    from .compile import compile_command

    code = _run(lambda: compile_command(paths, arch or None, validate=not no_validate, as_json=as_json))
    if code == 0 and out is not None:
        from .aot import write_command

        code = _run(lambda: write_command(paths, arch or None, out, validate=not no_validate))
    raise typer.Exit(code)


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
          json_file: Annotated[Optional[Path], typer.Option("--json", help="write results here")] = None,
          use_compile: Annotated[Optional[bool], typer.Option("--compile/--no-compile", help="also time torch.compile "
                                                              "of the reference (default: on unless KGEN_BENCH_COMPILE=0)")] = None,
          compile_budget: Annotated[Optional[float], typer.Option("--compile-budget", help="seconds torch.compile may "
                                                                  "spend compiling")] = None,
          positions: Annotated[str, typer.Option("--positions", help="random (decode: a DRAM freqs row per token) "
                                                 "or consecutive (prefill of a long sequence), in a 2^20-row "
                                                 "table")] = "random") -> None:
    """Kernel bandwidth vs device copy vs torch eager/compile, in one run."""
    from .bench import bench_command

    raise typer.Exit(_run(lambda: bench_command(paths, tokens or None, json_file, use_compile=use_compile,
                                                compile_budget_s=compile_budget, positions=positions)))


EngineName = Annotated[str, typer.Option("--engine", help="sglang or vllm", show_default=False)]
EngineRoot = Annotated[Path, typer.Option("--root", help="the engine's repository root", show_default=False)]


@app.command()
def audit(paths: Paths, engine: EngineName, root: EngineRoot, as_json: JsonFlag = False) -> None:
    """Compare every place an engine checkout hard-codes the cache ABI with the specs."""
    from .engines.commands import audit_command

    raise typer.Exit(audit_command(engine, root, paths, as_json))


@app.command()
def patch(path: Annotated[Path, typer.Argument(help="spec file of the variant", show_default=False)],
          engine: EngineName, root: EngineRoot,
          out: Annotated[Optional[Path], typer.Option("-o", "--out", help="write the diff here")] = None,
          apply: Annotated[bool, typer.Option("--apply", help="write the patch into the engine tree")] = False,
          as_json: JsonFlag = False) -> None:
    """A unified diff that wires the variant into the engine behind one server flag."""
    from .engines.commands import patch_command

    raise typer.Exit(patch_command(engine, root, path, out, apply, as_json))


@app.command()
def recall(paths: Annotated[list[Path], typer.Argument(help="spec or family files (a .json path after --json: "
                                                       "where the JSON goes)", show_default=False)],
           contexts: Annotated[str | None, typer.Option("--contexts", help="key counts, comma-separated (4096, 64K, "
                                                           "1M); default 4K..1M on a GPU, 4K..64K on CPU")] = None,
           topk: Annotated[int, typer.Option("--topk", help="k of the top-k (512: DeepSeek V4; 2048: V3.2)")] = 512,
           queries: Annotated[int, typer.Option("--queries", help="queries per context (and as many needles)")] = 32,
           keys: Annotated[Path | None, typer.Option("--keys", help="keys [N, head_dim] (optional queries, "
                                                        "weights) from a .safetensors or torch .pt file")] = None,
           as_json: Annotated[bool, typer.Option("--json", help="print one JSON object (--json FILE.json: write it "
                                                 "there and print the table)")] = False,
           plot: Annotated[Path | None, typer.Option("--plot", help="PNG: agreement and needle recall against "
                                                        "context")] = None,
           heads: Annotated[int, typer.Option("--heads", help="query heads of the synthetic queries")] = 64,
           margin: Annotated[float, typer.Option("--margin", help="needles beat the k-th best other key by this "
                                                 "many std of the scores")] = 0.1,
           seed: Annotated[int, typer.Option("--seed", help="seed of every draw")] = 0,
           device: Annotated[str, typer.Option("--device", help="auto, cpu or cuda")] = "auto",
           toggle_hadamard: Annotated[bool, typer.Option("--toggle-hadamard", help="also measure each variant with "
                                                         "its Hadamard setting flipped")] = False) -> None:
    """Top-k agreement and needle recall of each indexer-key variant against full-precision scores."""
    from .recall import recall_command

    raise typer.Exit(_run(lambda: recall_command(paths, contexts=contexts, topk=topk, queries=queries, heads=heads,
                                                 margin=margin, seed=seed, keys=keys, as_json=as_json, plot=plot,
                                                 device=device, toggle_hadamard=toggle_hadamard)))


@app.command()
def schema() -> None:
    """Print the reference of every spec field (type, default, meaning) as Markdown."""
    from .schema_doc import field_reference

    sys.stdout.write(field_reference())


def _run(fn):
    """Run a command body; user errors become located lines and an exit code."""
    try:
        return fn()
    except KgenError as e:
        print_problems(e.problems)
        raise typer.Exit(e.exit_code) from None


def run_app() -> None:
    """The typer app (every command, help, usage errors)."""
    try:
        app()
    except KgenError as e:  # pragma: no cover - _run catches these; this is the last net
        print_problems(e.problems)
        sys.exit(e.exit_code)


def main() -> None:
    from .main import main as entry

    entry()


if __name__ == "__main__":
    main()
