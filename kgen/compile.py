"""The NVRTC driver: one rendered variant -> a cubin for one arch, through the content-hash cache.

`compile_variant(spec, arch)` renders one variant and returns a `CompiledKernel` (from the cache when
its key matches, else compiled by NVRTC and stored). Compile options are fixed by the numerics
contract (docs/numerics.md): no FMA contraction, IEEE division and square root, C++17, and
`ptxas -v` so registers and spills can be checked without a GPU.

cuda-python is imported only on a cache miss: a warm `kgen compile` never loads it. A cold compile
says what it compiles before it starts and how long it took; a failure shows the first `error:` lines
of NVRTC's log, where the rendered source was written, and which spec it came from — no traceback.
The `kgen compile` command (many variants, threads, the run memo, the table) is kgen.build.

Environment: KGEN_CACHE_DIR (cache root), KGEN_LOCK_TIMEOUT (seconds, default 120).
"""

from __future__ import annotations

import io
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .abi import KERNELS
from .cache import Cache, Entry, compute_key, write_sources
from .diagnostics import KgenError, Problem, err
from .render import include_dirs, render_variant
from .rules import RULES
from .toolchain import cudart_include_dir, toolchain_fingerprint

STD = "c++17"
MAX_ERROR_LINES = 5

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
    if hit is None:
        return None
    return kernel_from_entry(hit, rendered.uri, arch, cached=True, seconds=time.perf_counter() - t0)


def compile_rendered(rendered, arch: str, *, include_dirs: list[Path] | None = None, cache: Cache | None = None,
                     spec_path: Path | None = None, progress: Progress | None = err) -> CompiledKernel:
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
            return kernel_from_entry(built, rendered.uri, arch, cached=True, seconds=time.perf_counter() - t0)
        entry = cache.entry_dir(rendered.uri, arch, key)
        if entry.exists():
            say(f"kgen: cache entry {entry} is damaged; rebuilding it")
        say(f"compiling {rendered.uri} for {arch} ...")
        t1 = time.perf_counter()
        cubin, symbol, log = _nvrtc(rendered, arch, inc, cache, key, spec_path)
        seconds = time.perf_counter() - t1
        info = parse_ptxas(log)
        symbol_str = symbol.decode("ascii", "backslashreplace")

        kabi = KERNELS.get(getattr(rendered, "kernel", ""))  # None: not a kgen kernel (test programs)
        meta = {"abi": kabi.manifest() if kabi else None, "name_expression": rendered.name_expression,
                "symbol_mapping": {rendered.name_expression: symbol_str},
                "symbol_hex": symbol.hex(), "kernel_file": rendered.kernel_file, "seconds": round(seconds, 4),
                "nvrtc": toolchain_fingerprint()["nvrtc"], "options": compile_options(rendered.uri, arch),
                "log": log, **info}
        stored = cache.store(rendered.uri, arch, key, cubin, meta, rendered.files)
        spill = f", {info['spill_bytes']} spill bytes" if info["spill_bytes"] else ", no spills"
        say(f"compiled {rendered.uri} for {arch} in {seconds:.2f} s ({info['registers']} registers{spill})")
        return kernel_from_entry(stored, rendered.uri, arch, cached=False, seconds=seconds)


def compile_variant(spec, arch: str, *, spec_path: Path | None = None, cache: Cache | None = None,
                    progress: Progress | None = err) -> CompiledKernel:
    """Render `spec` and compile it for `arch` (cached)."""

    return compile_rendered(render_variant(spec), arch, cache=cache, spec_path=spec_path, progress=progress)


def kernel_from_entry(e: Entry, uri: str, arch: str, *, cached: bool, seconds: float) -> CompiledKernel:
    """The CompiledKernel a verified cache entry holds."""
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


def load_cuda_core():
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
        Program, ProgramOptions = load_cuda_core()
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
