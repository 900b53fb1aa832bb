"""`kgen compile`: NVRTC-compile rendered variants to cubins, through the content-hash cache.

`compile_variant(spec, arch)` renders one variant and returns a `CompiledKernel` (from the cache when
its key matches, else compiled by NVRTC and stored). Compile options are fixed by the numerics
contract (docs/numerics.md): no FMA contraction, IEEE division and square root, C++17, and
`ptxas -v` so registers and spills can be checked without a GPU.

cuda-python is imported only on a cache miss: a warm `kgen compile` never loads it. A cold compile
says what it compiles before it starts and how long it took; a failure shows the first `error:` lines
of NVRTC's log, where the rendered source was written, and which spec it came from — no traceback.

`compile_command` compiles the cache misses in threads (NVRTC is thread-safe for separate programs
and releases the GIL; cuda.core is imported once, before the workers start). A run whose every
variant compiled is recorded (`RunMemo`), so the next identical run skips YAML, validation and
rendering when no input file, kgen file or toolchain changed (content hashes, never mtimes).

Environment: KGEN_CACHE_DIR (cache root), KGEN_LOCK_TIMEOUT (seconds, default 120), KGEN_JOBS
(compile threads, default: CPU count), KGEN_WARM_SHORTCUT=0 (always take the full path).
"""

from __future__ import annotations

import functools
import hashlib
import io
import json
import os
import re
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from .cache import FORMAT as CACHE_FORMAT
from .cache import Cache, Entry, compute_key
from .diagnostics import KgenError, Problem, failure_json, print_json, print_problems
from .source import MAX_FILE_BYTES, read_regular
from .toolchain import cudart_include_dir, toolchain_fingerprint

if TYPE_CHECKING:
    from .document import Variant
    from .render import RenderedVariant
    from .spec import Spec

STD = "c++17"
MAX_RECORD_BYTES = 1 << 20  # a run record lists a few dozen files and entries
MAX_ERROR_LINES = 5

_print_lock = threading.Lock()


def _stderr(text: str) -> None:
    with _print_lock:
        sys.stderr.write(text + "\n")
        sys.stderr.flush()


Progress = Callable[[str], None]


@dataclass(frozen=True)
class CompiledKernel:
    uri: str
    arch: str
    cubin: bytes
    symbol: str  # mangled name of name_expression in the cubin
    name_expression: str
    registers: int | None
    spill_bytes: int | None  # spill stores + spill loads, over every function
    cached: bool
    seconds: float  # this call: compile time on a miss, lookup time on a hit
    log: str  # NVRTC + ptxas -v log of the compile that built the cubin
    cache_dir: Path  # the cache entry's directory
    stack_bytes: int | None = None
    abi: dict | None = None  # the kernel ABI the cubin was built for (kgen.abi KernelAbi.manifest)

    @property
    def symbol_mapping(self) -> dict[str, bytes]:
        return {self.name_expression: self.symbol.encode()}

    def object_code(self):
        """A cuda.core ObjectCode for launching (imports cuda.core)."""
        from cuda.core import ObjectCode

        return ObjectCode.from_cubin(self.cubin, symbol_mapping=self.symbol_mapping)


class CompileError(KgenError):
    """NVRTC rejected a variant: a user error, printed without a traceback."""

    def __init__(self, problems: list[Problem], *, uri: str, arch: str, log: str, source_path: Path,
                 rule: str | None):
        super().__init__(problems, exit_code=1)
        self.uri, self.arch, self.log, self.source_path, self.rule = uri, arch, log, source_path, rule


# ---------------------------------------------------------------------------------------------
# options and logs


def compile_options(uri: str, arch: str) -> dict:
    """ProgramOptions fields (without include_path, which is not part of the key: content is)."""
    return {"arch": arch, "std": STD, "fma": False, "prec_div": True, "prec_sqrt": True,
            "ptxas_options": "-v", "name": f"{uri}.cu"}


_REGS_RE = re.compile(r"Used (\d+) registers")
_FRAME_RE = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")


def parse_ptxas(log: str) -> dict:
    """registers (max over functions), spill_bytes (stores + loads, summed), stack_bytes (max)."""
    regs = [int(m) for m in _REGS_RE.findall(log)]
    frames = [tuple(map(int, m)) for m in _FRAME_RE.findall(log)]
    return {"registers": max(regs) if regs else None,
            "spill_bytes": sum(s + ld for _, s, ld in frames) if frames else (0 if regs else None),
            "stack_bytes": max(f for f, _, _ in frames) if frames else (0 if regs else None)}


_ERROR_RE = re.compile(r"\berror\b", re.IGNORECASE)
_SUMMARY_RE = re.compile(r"^\d+ errors? detected|^NVRTC_ERROR|^\d+: NVRTC_ERROR")
_RULE_RE = re.compile(r"\[([a-z][a-z0-9-]*)\]")


def first_errors(log: str, n: int = MAX_ERROR_LINES) -> list[str]:
    lines = [ln.rstrip() for ln in log.splitlines()]
    errs = [ln for ln in lines if _ERROR_RE.search(ln) and not _SUMMARY_RE.match(ln.strip())]
    if not errs:
        errs = [ln for ln in lines if ln.strip()][-n:]
    return errs[:n]


def _twin_rule(lines: list[str]) -> str | None:
    from .rules import RULES

    for ln in lines:
        for rid in _RULE_RE.findall(ln):
            if rid in RULES:
                return rid
    return None


def _clean(log: str) -> str:
    return log.replace("\x00", "").strip() + "\n" if log.strip("\x00 \n") else ""


# ---------------------------------------------------------------------------------------------
# one variant


def kgen_include_dirs() -> list[Path]:
    from .render import include_dirs

    return [Path(d) for d in include_dirs()]


def variant_key(rendered, arch: str, include_dirs: list[Path]) -> str:
    return compute_key(files=rendered.files, kernel_file=rendered.kernel_file,
                       name_expression=rendered.name_expression, arch=arch,
                       options=compile_options(rendered.uri, arch), include_dirs=include_dirs)


def lookup(rendered, arch: str, *, include_dirs: list[Path] | None = None, cache: Cache | None = None,
           key: str | None = None) -> CompiledKernel | None:
    """The cached kernel, or None. Never imports cuda-python."""
    t0 = time.perf_counter()
    inc = kgen_include_dirs() if include_dirs is None else list(include_dirs)
    cache = cache or Cache()
    key = key or variant_key(rendered, arch, inc)
    hit = cache.load(rendered.uri, arch, key)
    return None if hit is None else _from_entry(hit, rendered.uri, arch, cached=True, seconds=time.perf_counter() - t0)


def compile_rendered(rendered, arch: str, *, include_dirs: list[Path] | None = None, cache: Cache | None = None,
                     spec_path: Path | None = None, progress: Progress | None = _stderr) -> CompiledKernel:
    """Compile one rendered variant for `arch`, or load it from the cache."""
    t0 = time.perf_counter()
    inc = kgen_include_dirs() if include_dirs is None else list(include_dirs)
    cache = cache or Cache()
    key = variant_key(rendered, arch, inc)
    hit = lookup(rendered, arch, include_dirs=inc, cache=cache, key=key)
    if hit is not None:
        return hit
    say = progress or (lambda _s: None)
    with cache.lock(rendered.uri, arch, key):
        built = cache.load(rendered.uri, arch, key)  # another process built it while we waited
        if built is not None:
            return _from_entry(built, rendered.uri, arch, cached=True, seconds=time.perf_counter() - t0)
        entry = cache.entry_dir(rendered.uri, arch, key)
        if entry.exists():
            say(f"kgen: cache entry {entry} is damaged; rebuilding it")
        say(f"compiling {rendered.uri} for {arch} ...")
        t1 = time.perf_counter()
        cubin, symbol, log = _nvrtc(rendered, arch, inc, cache, key, spec_path)
        seconds = time.perf_counter() - t1
        info = parse_ptxas(log)
        symbol_str = symbol.decode("ascii", "backslashreplace")
        from .abi import KERNELS

        kabi = KERNELS.get(getattr(rendered, "kernel", ""))  # None: not a kgen kernel (test programs)
        meta = {"abi": kabi.manifest() if kabi else None, "name_expression": rendered.name_expression,
                "symbol_mapping": {rendered.name_expression: symbol_str},
                "symbol_hex": symbol.hex(), "kernel_file": rendered.kernel_file, "seconds": round(seconds, 4),
                "nvrtc": toolchain_fingerprint()["nvrtc"], "options": compile_options(rendered.uri, arch),
                "log": log, **info}
        stored = cache.store(rendered.uri, arch, key, cubin, meta, rendered.files)
        spill = f", {info['spill_bytes']} spill bytes" if info["spill_bytes"] else ", no spills"
        say(f"compiled {rendered.uri} for {arch} in {seconds:.2f} s ({info['registers']} registers{spill})")
        return _from_entry(stored, rendered.uri, arch, cached=False, seconds=seconds)


def compile_variant(spec, arch: str, *, spec_path: Path | None = None, cache: Cache | None = None,
                    progress: Progress | None = _stderr) -> CompiledKernel:
    """Render `spec` and compile it for `arch` (cached)."""
    from .render import render_variant

    return compile_rendered(render_variant(spec), arch, cache=cache, spec_path=spec_path, progress=progress)


def _from_entry(e: Entry, uri: str, arch: str, *, cached: bool, seconds: float) -> CompiledKernel:
    m = e.meta
    expr = m["name_expression"]
    sym = m["symbol_mapping"].get(expr)
    if sym is None and m.get("symbol_hex"):
        sym = bytes.fromhex(m["symbol_hex"]).decode("ascii", "backslashreplace")
    return CompiledKernel(uri=uri, arch=arch, cubin=e.cubin, symbol=sym, name_expression=expr,
                          registers=m.get("registers"), spill_bytes=m.get("spill_bytes"), cached=cached,
                          seconds=seconds, log=m.get("log", ""), cache_dir=e.dir, stack_bytes=m.get("stack_bytes"),
                          abi=m.get("abi"))


def _nvrtc(rendered, arch: str, inc: list[Path], cache: Cache, key: str, spec_path: Path | None):
    """(cubin, mangled symbol, log). Raises CompileError with the log's first errors."""
    with cache.workdir(rendered.uri) as tmp:  # in the cache: nothing left in /tmp if the run is killed
        from .cache import write_sources

        write_sources(Path(tmp), rendered.files)  # rendered headers resolve from here
        kdir = Path(tmp, rendered.kernel_file).parent
        include_path = [str(kdir), *([tmp] if kdir != Path(tmp) else []), *map(str, inc)]
        cudart = cudart_include_dir()
        if cudart is not None:
            include_path.append(str(cudart))
        cubin, symbol, log, failure = _run_nvrtc(rendered, arch, include_path)
    if failure is not None:
        raise _failure(rendered, arch, cache, key, spec_path, log, failure, tmp)
    return cubin, symbol, log


_import_lock = threading.Lock()


def _cuda_core():
    """cuda.core's Program and ProgramOptions. Imported once, under a lock: a first import racing in
    several threads sees a half-initialised module ("cannot import name 'Program'")."""
    with _import_lock:
        from cuda.core import Program, ProgramOptions

    return Program, ProgramOptions


def _run_nvrtc(rendered, arch: str, include_path: list[str]):
    """(cubin, symbol, log, failure text or None); never raises, so no traceback frame keeps the
    Program alive (cuda.core's Program.__dealloc__ complains when it runs at interpreter exit)."""
    buf = io.StringIO()
    cubin, symbol, failure = b"", b"", None
    try:
        Program, ProgramOptions = _cuda_core()
        opts = ProgramOptions(**compile_options(rendered.uri, arch), include_path=include_path)
        prog = Program(rendered.files[rendered.kernel_file], "c++", opts)
        try:
            obj = prog.compile("cubin", name_expressions=[rendered.name_expression], logs=buf)
        finally:
            prog.close()
            del prog
        cubin = bytes(obj.code)
        symbol = obj.symbol_mapping.get(rendered.name_expression)
        del obj
        if symbol is None:
            failure = f"NVRTC returned no symbol for the name expression {rendered.name_expression!r}"
        elif not isinstance(symbol, bytes):
            symbol = str(symbol).encode()
    except Exception as e:  # noqa: BLE001 - every compile failure is the user's spec/template problem
        failure = str(e) or type(e).__name__
    return cubin, symbol, _clean(buf.getvalue()), failure


def _failure(rendered, arch, cache: Cache, key: str, spec_path, log: str, error: str, tmp: str) -> CompileError:
    text = error.replace("\x00", "")
    if "compilation log:" in text:  # "6: NVRTC_ERROR_COMPILATION, compilation log:\n\n<log>"
        text = text.split("compilation log:", 1)[1].strip("\n") + "\n"
    full = log + ("\n" if log else "") + text if text not in log else log
    d = cache.write_failed(rendered.uri, arch, key, rendered.files, full)
    src = d / rendered.kernel_file
    # NVRTC names the program <uri>.cu and the rendered headers by the temp dir they were compiled in,
    # which is gone: point every line at the copies kept in the failed dir, which the user can open
    prog_name = f"{rendered.uri}.cu"
    full = full.replace(tmp.rstrip("/") + "/", f"{d}/")
    errs = [ln.replace(prog_name + "(", f"{src}(") if ln.startswith(prog_name) else ln for ln in first_errors(full)]
    rid = _twin_rule(errs)
    first = errs[0].strip() if errs else "no error line in the log"
    # one line: the first error (itself located in a file that exists); the next ones follow as notes
    message = f"NVRTC cannot compile {rendered.uri} for {arch}: {first}"
    notes = (*errs[1:], f"rendered source: {src}", f"full log: {d / 'nvrtc.log'}")
    fix = (f"the kernel's static_assert twin of rule '{rid}' fired: `kgen validate` explains it" if rid
           else "see the full log")
    return CompileError([Problem(rid or "compile", message, fix=fix, file=spec_path if spec_path else src,
                                 notes=notes)],
                        uri=rendered.uri, arch=arch, log=full, source_path=src, rule=rid)


# ---------------------------------------------------------------------------------------------
# the command


@dataclass
class _Job:
    variant: Variant
    spec: Spec
    path: Path
    arch: str
    rendered: RenderedVariant
    key: str = ""
    result: CompiledKernel | None = None
    error: KgenError | None = None


def check_archs(archs: list[str] | None) -> list[str] | None:
    """--arch values, de-duplicated; any the targets rule would refuse is a usage error (exit 2)."""
    if not archs:
        return None
    from .rules import arch_problem

    bad = []
    for a in archs:
        problem = arch_problem(a)
        if problem is not None:
            bad.append(Problem("arch", f"--arch: {problem[0]}", fix=problem[1]))
    if bad:
        raise KgenError(bad, exit_code=2)
    return list(dict.fromkeys(archs))


def _load(paths: list[Path], validate: bool) -> tuple[list[tuple], list[Problem], list[Path]]:
    """[(variant, spec, path)], every error that stops the compile, and every file read."""
    from .load import load_document
    from .validate import validate_path

    found, problems, read = [], [], []
    for path in paths:
        try:
            if validate:
                r = validate_path(path)
                problems += r.errors
                doc = r.document
            else:
                doc = load_document(path)
                problems += [p for p in doc.problems if p.severity == "error"]
        except KgenError as e:
            problems += e.problems
            if e.exit_code != 1:
                raise
            continue
        if doc is None:
            continue
        read += doc.includes
        found += [(v, v.spec, Path(v.source.path)) for v in doc.variants if v.spec is not None]
    return found, problems, read


@dataclass
class _Row:
    uri: str
    arch: str
    key: str
    result: CompiledKernel | None
    error: KgenError | None = None
    job: _Job | None = None


def compile_command(paths: list[Path], archs: list[str] | None, validate: bool = True, as_json: bool = False) -> int:
    """`kgen compile`: exit 0 when every (variant, arch) compiled, 1 otherwise (2: usage)."""
    cache = Cache()
    memo = RunMemo(cache, paths, archs, validate)
    rows = memo.load()  # a warm run of the same inputs: no YAML, no validation, no render
    if rows is None:
        archs = check_archs(archs)
        found, problems, read = _load(paths, validate)
        try:
            if problems:
                raise KgenError(problems)
            rows = _build(found, archs, cache)
        except KgenError as e:
            if as_json:
                print_json(failure_json(e.problems, results=[]))
            print_problems(e.problems)
            return e.exit_code
        if all(r.result is not None and not r.result.spill_bytes for r in rows):
            memo.store(read, rows)

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
            _stderr(r.job.variant.locate(Problem(
                "spill", f"{r.uri} spills {r.result.spill_bytes} bytes to local memory on {r.arch} "
                f"({r.result.registers} registers)", loc=("launch",), severity="warning",
                fix="lower launch.tokens_per_warp or warps_per_block")).format())
    return 1 if failed else 0


def _build(found: list[tuple], archs: list[str] | None, cache: Cache) -> list[_Row]:
    from .render import render_variant

    inc = kgen_include_dirs()
    jobs: list[_Job] = []
    seen: set = set()
    refused: list[Problem] = []
    for variant, spec, path in found:
        try:  # the rules' guards: what no C++ source or cache path may hold, also under --no-validate
            rendered = render_variant(spec)
        except KgenError as e:
            refused += [p if p.file is not None else variant.locate(p) for p in e.problems]
            continue
        for arch in archs or spec.targets:
            ident = (rendered.uri, arch, tuple(sorted(rendered.files.items())))
            if ident in seen:  # the same variant reached through several paths
                continue
            seen.add(ident)
            job = _Job(variant, spec, path, arch, rendered)
            job.key = variant_key(rendered, arch, inc)
            job.result = lookup(rendered, arch, include_dirs=inc, cache=cache, key=job.key)
            jobs.append(job)
    if refused:
        raise KgenError(refused)
    misses = [j for j in jobs if j.result is None]
    if misses:
        _compile_all(misses, inc, cache)
    return [_Row(j.rendered.uri, j.arch, j.key, j.result, j.error, j) for j in jobs]


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
            rows = []
            for r in rec["results"]:
                e = self.cache.load(r["uri"], r["arch"], r["key"])
                if e is None:
                    return None
                rows.append(_Row(r["uri"], r["arch"], r["key"], None))
                rows[-1].result = _from_entry(e, r["uri"], r["arch"], cached=True, seconds=0.0)
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return None
        dt = (time.perf_counter() - t0) / max(1, len(rows))
        for row in rows:
            assert row.result is not None  # set just above
            row.result = replace(row.result, seconds=dt)
        return rows

    def store(self, read: list[Path], rows: list[_Row]) -> None:
        f = self._file()
        if f is None:
            return
        try:
            inputs = {str(Path(p).resolve()): hashlib.sha256(read_regular(p, MAX_FILE_BYTES)).hexdigest()
                      for p in dict.fromkeys(read)}
            rec = {"key": self.key(), "inputs": inputs,
                   "results": [{"uri": r.uri, "arch": r.arch, "key": r.key} for r in rows]}
            f.parent.mkdir(parents=True, exist_ok=True)
            tmp = f.with_name(f".{f.name}.{os.getpid()}.{threading.get_ident()}.tmp")
            tmp.write_text(json.dumps(rec, indent=1))
            os.replace(tmp, f)
        except OSError:
            pass  # the shortcut is optional


_KGEN_DIR = Path(__file__).resolve().parent


@functools.lru_cache(maxsize=1)
def _kgen_digest() -> str:
    """sha256 over kgen's code and templates (what validation and rendering depend on)."""
    h = hashlib.sha256()
    from .resources import TEMPLATES

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
    from concurrent.futures import ThreadPoolExecutor

    try:
        _cuda_core()  # import in this thread, before the workers race for it
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
        from .rules import RULES, check_variant

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
        return {"variant": r.uri, "arch": r.arch, "ok": False, "cached": False, "seconds": None,
                "registers": None, "spill_bytes": None,
                "log": getattr(r.error, "log", None) or "\n".join(p.format() for p in r.error.problems)}
    return {"variant": k.uri, "arch": k.arch, "ok": True, "cached": k.cached, "seconds": round(k.seconds, 4),
            "registers": k.registers, "spill_bytes": k.spill_bytes, "log": k.log}


def _table(rows: list[_Row]) -> None:
    """The summary, as a plain aligned table (rich costs ~0.1 s of a 0.2 s warm run)."""
    head = ("variant", "arch", "cached", "seconds", "registers", "spills")
    lines = []
    for r in rows:
        k = r.result
        if k is None:
            lines.append((r.uri, r.arch, "FAILED", "", "", ""))
        else:
            lines.append((k.uri, k.arch, "yes" if k.cached else "no", f"{k.seconds:.3f}",
                          str(k.registers if k.registers is not None else "?"),
                          str(k.spill_bytes) if k.spill_bytes is not None else "?"))
    w = [max(len(x[i]) for x in [head, *lines]) for i in range(len(head))]
    right = (False, False, False, True, True, True)
    out = ["  ".join(c.rjust(w[i]) if right[i] else c.ljust(w[i]) for i, c in enumerate(x)).rstrip()
           for x in [head, *lines]]
    sys.stdout.write("\n".join(out) + "\n")
