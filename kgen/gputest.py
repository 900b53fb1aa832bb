"""`kgen test`: run each variant on the GPU and compare the WHOLE cache with the Torch reference.

For every variant (families expand to their variants) and token count N, `kgen.gpurun.run_case`
runs the kernel and the reference on the same inputs and `kgen.compare.compare_caches` compares the
two caches byte for byte (its docstring states the pass rules).

`--sample K` (`kgen test --sample K`, or `test_command(..., sample=K)`) also draws K random
specs the validator accepts (`kgen.sample.sample_specs`) and tests each at a few N: whatever the
validator accepts must write the right bytes.

This module is the command: arguments, the case list, progress lines and the summary.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from .compare import Comparison
from .diagnostics import KgenError
from .diagnostics import err as _say
from .gpurun import precompile, run_case, start_gpu_command, sticky, usage_error
from .reader_check import TUNE_CASES, sample_readable, test_readers
from .runtime import device_info
from .sample import sample_specs
from .spec import Spec

DEFAULT_TOKENS = (1, 7, 64, 4097, 65536, 1048576)
SAMPLE_TOKENS = (1, 7, 300, 4097)


def device_summary() -> dict:
    import torch


    info = device_info()
    info["torch"] = torch.__version__
    info["cuda"] = torch.version.cuda
    return info


def test_command(paths: list[Path], tokens: list[int] | None, as_json: bool = False, *,
                 sample: int = 0, seed: int = 0, sample_tokens: list[int] | None = None, readers_only: bool = False,
                 reader_tunes: tuple = (), tune_cases: tuple | None = TUNE_CASES) -> int:
    """Exit 0 all equal, 1 any failure, 2 no GPU / usage. `readers_only`: the read side alone;
    `reader_tunes`: alternative reader tunings, each run on the `tune_cases` of every readable variant."""
    if not paths and not sample:
        raise usage_error("test", "give spec/family paths (or --sample K)")
    specs = start_gpu_command("test", paths, tokens, min_tokens=0, paths_optional=True)
    if readers_only:
        return _test_readers_only(specs, as_json, sample=sample, seed=seed, reader_tunes=reader_tunes,
                                  tune_cases=tune_cases)

    cases: list[tuple[Spec, int]] = [(s, n) for s in specs for n in (tokens or DEFAULT_TOKENS)]
    sampled = sample_specs(sample, seed) if sample else []
    cases += [(s, n) for s in sampled for n in (sample_tokens or SAMPLE_TOKENS)]
    all_specs = specs + sampled
    dev = device_summary()
    _say(f"kgen test: {len(all_specs)} variant(s), {len(cases)} case(s) on {dev['name']} ({dev['arch']})")
    t0 = time.perf_counter()
    compile_errors = precompile(all_specs)
    _say(f"kgen test: kernels ready in {time.perf_counter() - t0:.1f} s"
         + (f" ({len(compile_errors)} failed)" if compile_errors else ""))

    results: list[Comparison] = []
    interrupted = False
    try:
        _run_cases(cases, compile_errors, seed, results)
    except KeyboardInterrupt:  # timeout -s INT: report what ran
        interrupted = True
        _say(f"kgen test: interrupted after {len(results)}/{len(cases)} case(s)")
    # the read side: indexer_logits on every variant it reads (kgen.reader_check)
    reader = [] if interrupted else test_readers(specs, sampled, seed=seed, say=_say, tunes=reader_tunes,
                                                 tune_cases=tune_cases)
    ok = all(c.ok for c in results) and len(results) == len(cases) and all(r.ok for r in reader)
    if as_json:
        out = {"device": dev, "ok": ok, "interrupted": interrupted, "cases": len(cases),
               "results": [c.to_json() for c in results], "reader": [r.to_json() for r in reader],
               "samples": [s.model_dump(mode="json") for s in sampled]}
        print(json.dumps(out, indent=2))
    else:
        print(summary_table(results))
    fails = [c for c in results if not c.ok]
    _say(f"kgen test: {len(results) - len(fails)}/{len(cases)} case(s) ok" + ("" if ok else " -- FAILED"))
    return 0 if ok else 1


def _test_readers_only(specs: list[Spec], as_json: bool, *, sample: int, seed: int, reader_tunes: tuple,
                       tune_cases: tuple | None) -> int:
    """`kgen test --readers-only`: indexer_logits on every readable variant (and readable samples)."""
    sampled = sample_readable(sample, seed) if sample else []
    dev = device_summary()
    reader = test_readers(specs, sampled, seed=seed, say=_say, tunes=reader_tunes, tune_cases=tune_cases)
    ok = all(r.ok for r in reader)
    if as_json:
        print(json.dumps({"device": dev, "ok": ok, "results": [], "reader": [r.to_json() for r in reader],
                          "samples": [s.model_dump(mode="json") for s in sampled]}, indent=2))
    _say(f"kgen test: {sum(r.ok for r in reader)} passed, {sum(not r.ok for r in reader)} failed")
    return 0 if ok else 1


def _run_cases(cases, compile_errors: dict, seed: int, results: list) -> None:
    import torch

    for i, (spec, n) in enumerate(cases):
        if spec.name in compile_errors:
            c = Comparison(spec.name, n, 0, 0, 0.0, 0, False, error=compile_errors[spec.name],
                           reason="no kernel")
        else:
            try:
                c = run_case(spec, n, seed=1000 * i + seed)
            except KgenError as e:
                c = Comparison(spec.name, n, 0, 0, 0.0, 0, False, error="; ".join(p.format() for p in e.problems),
                               reason="error")
            except Exception as e:  # noqa: BLE001 - a crash in one case must not hide the others
                c = Comparison(spec.name, n, 0, 0, 0.0, 0, False, error=f"{type(e).__name__}: {e}", reason="error")
                if sticky(str(e)):
                    _say(f"  {spec.name} N={n}: {c.error}")
                    results.append(c)
                    _say("kgen test: stopping: the CUDA context is likely broken after this error")
                    break
            torch.cuda.empty_cache()
        results.append(c)
        _say(_line(c))


def _line(c: Comparison) -> str:
    if c.error:
        return f"  FAIL {c.variant:<32} N={c.tokens:<8} {c.error.splitlines()[0] if c.error else ''}"
    state = "ok  " if c.ok else "FAIL"
    text = (f"  {state} {c.variant:<32} N={c.tokens:<8} bytes equal {100 * c.fraction:.6f}% "
            f"({c.equal_bytes}/{c.total_bytes}) values differing {c.diff_values} max code dist "
            f"{c.max_code_distance} [{c.seconds:.1f} s]")
    return text + (f" -- {c.reason}" if c.reason else "")


def summary_table(results: list[Comparison]) -> str:
    rows = [f"{'variant':<32} {'N':>8} {'equal bytes %':>14} {'diff values':>11} {'max dist':>8} {'ok':>4}"]
    for c in results:
        rows.append(f"{c.variant:<32} {c.tokens:>8} {100 * c.fraction:>14.6f} {c.diff_values:>11} "
                    f"{c.max_code_distance:>8} {'yes' if c.ok else 'NO':>4}")
    return "\n".join(rows)
