"""`kgen compile`: every variant of the given specs for every arch, the cache misses compiled in
threads, a table (or JSON) of the results.

The misses compile in threads (NVRTC is thread-safe for separate programs and releases the GIL;
cuda.core is imported once, before the workers start). A run whose every variant compiled is
recorded (`RunMemo`), so the next identical run skips YAML, validation and rendering when no input
file, kgen file or toolchain changed (content hashes, never mtimes). One variant's compile is
kgen.compile.

Environment: KGEN_JOBS (compile threads, default: CPU count), KGEN_WARM_SHORTCUT=0 (always take the
full path); the cache's (KGEN_CACHE_DIR, KGEN_LOCK_TIMEOUT) as in kgen.compile.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path

from .abi import KERNELS, NORM_ROPE_STORE, KernelAbi, tune_key
from .aot import MANIFEST, check_out, write_dir
from .arch import check_option
from .cache import FORMAT as CACHE_FORMAT
from .cache import Cache
from .compile import (
    CompiledKernel,
    CompileError,
    compile_rendered,
    kernel_from_entry,
    kgen_include_dirs,
    load_cuda_core,
    lookup,
    variant_key,
)
from .diagnostics import KgenError, Problem, err, failure_json, print_json, print_problems
from .document import Variant
from .files import write_atomic
from .render import RenderedVariant, render_kernel
from .resources import TEMPLATES
from .rules import RULES, check_variant
from .source import MAX_FILE_BYTES, read_regular
from .spec import Spec
from .toolchain import toolchain_fingerprint
from .validate import validate_paths

MAX_RECORD_BYTES = 1 << 20  # a run record lists a few dozen files and entries

@dataclass
class _Job:
    variant: Variant
    spec: Spec
    path: Path
    arch: str
    rendered: RenderedVariant
    kabi: KernelAbi = NORM_ROPE_STORE
    tune: dict[str, int] | None = None
    key: str = ""
    result: CompiledKernel | None = None
    error: KgenError | None = None


def load_variants(paths: list[Path], validate: bool) -> tuple[list[tuple], list[Path], dict[Path, Path]]:
    """[(variant, spec, the file that holds it)], every file read, and every include as written -> the file
    it resolved to (KgenError with every error)."""
    found = validate_paths(paths, validate)
    found.raise_errors()
    variants, read, links = [], [], {}
    for r in found.results:
        read += r.document.includes
        links.update(r.document.links)
        variants += [(v, v.spec, Path(v.source.path)) for v in r.document.variants if v.spec is not None]
    return variants, read, links


@dataclass
class _Row:
    uri: str
    arch: str
    key: str
    result: CompiledKernel | None
    error: KgenError | None = None
    job: _Job | None = None
    variant: str = ""
    kernel: str = NORM_ROPE_STORE.kernel
    tune: str = ""  # kgen.abi.tune_key
    spec: Spec | None = None  # the full path's (the AOT directory records it); None on the warm path
    spec_path: Path | None = None


def compile_command(paths: list[Path], archs: list[str] | None, validate: bool = True, as_json: bool = False,
                    out: Path | None = None) -> int:
    """`kgen compile`: every kernel of the registry (kgen.abi.KERNELS) each variant has, with every tuning a
    launch may load, for every arch; with `out`, also the AOT directory (kgen.aot). Exit 0 when every one
    compiled, 1 otherwise (2: usage, an unusable --out: checked before any work)."""
    if out is not None:  # before any work (a KgenError, exit 2: kgen.cli reports it, --json included)
        check_out(out)
    archs = check_option(archs)
    cache = Cache()
    memo = RunMemo(cache, paths, archs, validate)
    # a warm run of the same inputs: no YAML, no validation, no render (the AOT directory needs the specs)
    rows = memo.load() if out is None else None
    if rows is None:
        try:
            found, read, links = load_variants(paths, validate)
            rows = _build(found, archs, cache)
        except KgenError as e:
            if as_json:
                print_json(failure_json(e.problems, results=[]))
            print_problems(e.problems)
            return e.exit_code
        if all(r.result is not None and not r.result.spill_bytes for r in rows):
            memo.store(read, links, rows)

    if as_json:
        print(json.dumps({"results": [_json(r) for r in rows]}, indent=2))
    else:
        _table(rows)
    failed = [r for r in rows if r.result is None]
    for r in failed:
        error = r.error
        assert error is not None  # a row without a result carries its error
        print_problems([_locate_failure(r.job, error, p) for p in error.problems])
    for r in rows:
        if r.result is not None and r.result.spill_bytes:
            assert r.job is not None  # spilling rows are never memoized, so they come from _build
            err(r.job.variant.locate(Problem(
                "spill", f"{r.uri} spills {r.result.spill_bytes} bytes to local memory on {r.arch} "
                f"({r.result.registers} registers)", loc=("launch",), severity="warning",
                fix="lower launch.tokens_per_warp or warps_per_block")).format())
    if failed:
        return 1
    if out is not None:
        return _write_aot(out, rows)
    return 0


def _write_aot(out: Path, rows: list[_Row]) -> int:
    try:
        nvrtc = toolchain_fingerprint().get("nvrtc")
    except Exception:  # noqa: BLE001 - information only
        nvrtc = None
    built = [(r.spec, r.result, KERNELS[r.kernel], r.job.tune if r.job else None, r.spec_path) for r in rows
             if r.spec is not None and r.result is not None]
    try:
        manifest = write_dir(out, built, nvrtc=nvrtc)
    except KgenError as e:
        print_problems(e.problems)
        return e.exit_code
    err(f"kgen: wrote {Path(out) / MANIFEST} ({len(manifest['kernels'])} cubins)")
    return 0


def kernels_of(spec: Spec) -> list[tuple[KernelAbi, dict[str, int] | None]]:
    """Every (kernel table, tuning) of `spec` that `kgen compile` builds: the registry's kernels the spec
    has, each with every tuning a launch may load. A spec its rules refuse (under --no-validate) builds
    the writer alone: the reader's config includes the writer's, whose twins would only fire again."""
    if any(p.severity == "error" for p in check_variant(spec)[1]):
        return [(NORM_ROPE_STORE, None)]
    return [(kabi, tune) for kabi in KERNELS.values() if kabi.exists(spec) for tune in kabi.tunings(spec)]


def _build(found: list[tuple], archs: list[str] | None, cache: Cache) -> list[_Row]:
    inc = kgen_include_dirs()
    jobs: list[_Job] = []
    seen: set = set()
    refused: list[Problem] = []
    for variant, spec, path in found:
        try:  # the rules' guards: what no C++ source or cache path may hold, also under --no-validate
            rendered_all = [(kabi, tune, render_kernel(spec, kabi, tune)) for kabi, tune in kernels_of(spec)]
        except KgenError as e:
            refused += [p if p.file is not None else variant.locate(p) for p in e.problems]
            continue
        for arch in archs or spec.targets:
            for kabi, tune, rendered in rendered_all:
                ident = (rendered.uri, arch, tuple(sorted(rendered.files.items())))
                if ident in seen:  # the same variant reached through several paths
                    continue
                seen.add(ident)
                job = _Job(variant, spec, path, arch, rendered, kabi, tune)
                job.key = variant_key(rendered, arch, inc)
                job.result = lookup(rendered, arch, include_dirs=inc, cache=cache, key=job.key)
                jobs.append(job)
    if refused:
        raise KgenError(refused)
    misses = [j for j in jobs if j.result is None]
    if misses:
        _compile_all(misses, inc, cache)
    return [_Row(j.rendered.uri, j.arch, j.key, j.result, j.error, j, variant=j.spec.name, kernel=j.kabi.kernel,
                 tune=tune_key(j.tune), spec=j.spec, spec_path=j.path) for j in jobs]


class RunMemo:
    """Warm runs skip YAML parsing, validation and rendering (most of a warm run's time).

    A run whose every (variant, arch) compiled is recorded under a hash of: the command's arguments,
    the content of the files named on the command line, kgen's own code (every file of the package
    and templates/) and the toolchain. The record lists every file the run read, with its sha256, and
    the cache entries it produced. A later run with the same hash reuses it only if every file read
    still has the same content and every entry still verifies; else it takes the full path. Validation
    and rendering are pure functions of exactly these inputs, so the shortcut cannot go stale.
    """

    def __init__(self, cache: Cache, paths: list[Path], archs: list[str] | None, validate: bool):
        self.cache, self.paths, self.archs, self.validate = cache, [Path(p) for p in paths], archs, validate
        self._key: str | None = None

    def key(self) -> str | None:
        if self._key is None:
            try:
                h = hashlib.sha256()
                h.update(json.dumps({"format": CACHE_FORMAT, "archs": self.archs, "validate": self.validate,
                                     "cwd": os.getcwd(), "paths": [str(p) for p in self.paths],
                                     "toolchain": toolchain_fingerprint(), "kgen": _kgen_digest()},
                                    sort_keys=True).encode())
                for p in self.paths:  # regular files only: a FIFO or device is refused by the full path
                    h.update(hashlib.sha256(read_regular(p, MAX_FILE_BYTES)).digest())
                self._key = h.hexdigest()
            except OSError:
                return None
        return self._key

    def _file(self) -> Path | None:
        if os.environ.get("KGEN_WARM_SHORTCUT", "1") == "0":  # benchmarks: time the full path
            return None
        key = self.key()
        return None if key is None else self.cache.root / "_runs" / f"{key[:32]}.json"

    def load(self) -> list[_Row] | None:
        t0 = time.perf_counter()
        f = self._file()
        if f is None:
            return None
        try:
            rec = json.loads(read_regular(f, MAX_RECORD_BYTES))  # a FIFO planted here is never read
            if rec.get("key") != self.key():
                return None
            for name, digest in rec["inputs"].items():
                if hashlib.sha256(read_regular(name, MAX_FILE_BYTES)).hexdigest() != digest:
                    return None
            for written, target in rec["links"].items():  # an include that now resolves elsewhere
                if str(Path(written).resolve()) != target:
                    return None
            rows = []
            for r in rec["results"]:
                e = self.cache.load(r["uri"], r["arch"], r["key"])
                if e is None:
                    return None
                rows.append(_Row(r["uri"], r["arch"], r["key"], None, variant=r["variant"], kernel=r["kernel"],
                                 tune=r["tune"]))
                rows[-1].result = kernel_from_entry(e, r["uri"], r["arch"], cached=True, seconds=0.0)
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return None
        dt = (time.perf_counter() - t0) / max(1, len(rows))
        for row in rows:
            assert row.result is not None  # set just above
            row.result = replace(row.result, seconds=dt)
        return rows

    def store(self, read: list[Path], links: dict[Path, Path], rows: list[_Row]) -> None:
        f = self._file()
        if f is None:
            return
        try:
            inputs = {str(Path(p).resolve()): hashlib.sha256(read_regular(p, MAX_FILE_BYTES)).hexdigest()
                      for p in dict.fromkeys(read)}
            rec = {"key": self.key(), "inputs": inputs, "links": {str(k): str(v) for k, v in links.items()},
                   "results": [{"uri": r.uri, "arch": r.arch, "key": r.key, "variant": r.variant, "kernel": r.kernel,
                                "tune": r.tune} for r in rows]}
            write_atomic(f, json.dumps(rec, indent=1))
        except OSError:
            pass  # the shortcut is optional


_KGEN_DIR = Path(__file__).resolve().parent


@functools.lru_cache(maxsize=1)
def _kgen_digest() -> str:
    """sha256 over kgen's code and templates (what validation and rendering depend on)."""
    h = hashlib.sha256()
    for root in dict.fromkeys((_KGEN_DIR, TEMPLATES)):
        if not root.is_dir():
            continue
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
            for name in sorted(filenames):
                if name.endswith((".pyc", ".pyo")):
                    continue
                p = Path(dirpath, name)
                h.update(str(p.relative_to(root.parent)).encode() + b"\0")  # kgen/..., templates/...
                h.update(hashlib.sha256(p.read_bytes()).digest())
    return h.hexdigest()


def _compile_all(jobs: list[_Job], inc: list[Path], cache: Cache) -> None:
    def run(job: _Job) -> None:
        try:
            job.result = compile_rendered(job.rendered, job.arch, include_dirs=inc, cache=cache, spec_path=job.path)
        except KgenError as e:
            job.error = e

    workers = _workers(len(jobs))
    if workers == 1:
        for j in jobs:
            run(j)
        return
    try:
        load_cuda_core()  # import in this thread, before the workers race for it
    except Exception:  # noqa: BLE001 - each job reports it
        pass

    # NVRTC is thread-safe for separate programs and releases the GIL while it compiles
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="kgen-nvrtc") as ex:
        list(ex.map(run, jobs))


def _workers(n: int) -> int:
    env = os.environ.get("KGEN_JOBS")
    try:
        want = int(env) if env else (os.cpu_count() or 2)
    except ValueError:
        want = os.cpu_count() or 2
    return max(1, min(n, want))


def _locate_failure(job: _Job | None, error: KgenError, p: Problem) -> Problem:
    """Point a compile failure at the spec key its twin rule guards (or the variant's name)."""
    if job is None or not isinstance(error, CompileError):
        return p
    loc: tuple = ("name",)
    if error.rule:
        lay, _ = check_variant(job.spec)
        hits = list(RULES[error.rule].check(job.spec, lay))
        if hits:
            loc = hits[0].loc
    try:
        located = job.variant.locate(Problem(p.rule, p.message, loc=loc, fix=p.fix, notes=p.notes))
    except Exception:  # noqa: BLE001 - a location is a nicety
        return p
    return located if located.file is not None else p


def _json(r: _Row) -> dict:
    k = r.result
    if k is None:
        assert r.error is not None  # a row without a result carries its error
        return {"variant": r.variant or r.uri, "kernel": r.kernel, "tune": r.tune, "arch": r.arch, "ok": False,
                "cached": False, "seconds": None,
                "registers": None, "spill_bytes": None,
                "log": getattr(r.error, "log", None) or "\n".join(p.format() for p in r.error.problems)}
    return {"variant": r.variant or k.uri, "kernel": r.kernel, "tune": r.tune, "arch": k.arch, "ok": True,
            "cached": k.cached, "seconds": round(k.seconds, 4),
            "registers": k.registers, "spill_bytes": k.spill_bytes, "log": k.log}


def _table(rows: list[_Row]) -> None:
    """The summary, as a plain aligned table (rich costs ~0.1 s of a 0.2 s warm run)."""
    head = ("variant", "arch", "cached", "seconds", "registers", "spills")
    lines = []
    for r in rows:
        k = r.result
        if k is None:
            lines.append((_shown(r), r.arch, "FAILED", "", "", ""))
        else:
            lines.append((_shown(r), k.arch, "yes" if k.cached else "no", f"{k.seconds:.3f}",
                          str(k.registers if k.registers is not None else "?"),
                          str(k.spill_bytes) if k.spill_bytes is not None else "?"))
    w = [max(len(x[i]) for x in [head, *lines]) for i in range(len(head))]
    right = (False, False, False, True, True, True)
    out = ["  ".join(c.rjust(w[i]) if right[i] else c.ljust(w[i]) for i, c in enumerate(x)).rstrip()
           for x in [head, *lines]]
    sys.stdout.write("\n".join(out) + "\n")


def _shown(r: _Row) -> str:
    return r.uri + (f" [{r.tune}]" if r.tune else "")
