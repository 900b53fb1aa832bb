"""The compile cache: cubins keyed by a content hash, never by mtimes.

Layout (readable: the URI is the variant's name)::

    $KGEN_CACHE_DIR/<uri>/<arch>-<hash16>/kernel.cubin   the cubin NVRTC wrote
                                         /meta.json      key, symbol map, registers, spills, sha256 ...
                                         /src/           the rendered sources it was built from
    $KGEN_CACHE_DIR/<uri>/<arch>-<hash16>.lock           held while one process compiles it
    $KGEN_CACHE_DIR/<uri>/failed-<arch>-<hash16>/        sources + nvrtc.log of the last failure

The key is the sha256 of: kgen's cache format version, the arch, the compile options, the name
expression, every rendered file (the kernel source and its siblings), the content of every header of
the include closure that resolves in the rendered files or kgen's include dirs, and the toolchain
(NVRTC's own version plus the versions of the wheels that ship libnvrtc, the cudart headers and
cuda-python; where the cudart headers do not come from a wheel, their whole directory — names and
contents — is hashed once per process).

Entries are written to a temp dir and renamed into place, and verified on every read (the cubin's
sha256 must match meta.json): a truncated or corrupted entry is rebuilt, never trusted. A file lock
per entry makes concurrent compiles of one variant compile it once.

Nothing here imports cuda-python: a cache hit must stay cheap.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import json
import os
import posixpath
import re
import shutil
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from .diagnostics import KgenError, Problem

FORMAT = 1  # bump when the entry layout or the key's composition changes
DEFAULT_LOCK_TIMEOUT = 120.0
CUBIN = "kernel.cubin"
META = "meta.json"

_INCLUDE_RE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*([<"])([^>"\n]+)[>"]', re.MULTILINE)


def cache_root() -> Path:
    """$KGEN_CACHE_DIR, else the platform's user cache dir + /kgen (~/.cache/kgen on Linux)."""
    env = os.environ.get("KGEN_CACHE_DIR")
    if env:
        return Path(env).expanduser()
    import platformdirs

    return Path(platformdirs.user_cache_dir("kgen", appauthor=False))


def lock_timeout() -> float:
    try:
        return float(os.environ.get("KGEN_LOCK_TIMEOUT", DEFAULT_LOCK_TIMEOUT))
    except ValueError:
        return DEFAULT_LOCK_TIMEOUT


# ---------------------------------------------------------------------------------------------
# the toolchain, found without importing cuda-python


def _site_roots() -> list[Path]:
    spec = importlib.util.find_spec("nvidia")
    if spec is None or not spec.submodule_search_locations:
        return []
    return [Path(p) for p in spec.submodule_search_locations]


@functools.lru_cache(maxsize=1)
def cudart_include_dir() -> Path | None:
    """The directory holding cuda_bf16.h / cuda_fp8.h (the nvidia-cuda-runtime wheel's include dir)."""
    for root in _site_roots():
        for cand in sorted(root.glob("cu*/include")) + [root / "cuda_runtime" / "include"]:
            if (cand / "cuda_bf16.h").is_file():
                return cand
    try:  # not a wheel layout we know: ask cuda.pathfinder (slower; also finds a CUDA toolkit)
        from cuda.pathfinder import find_nvidia_header_directory

        found = find_nvidia_header_directory("cudart")
        return Path(found) if found else None
    except Exception:  # noqa: BLE001 - no headers is reported by the compile itself
        return None


_DISTS = ("nvidia_cuda_nvrtc", "nvidia_cuda_runtime", "cuda_core", "cuda_bindings")


def _dist_versions() -> dict[str, str]:
    """{distribution: version}, read from *.dist-info directory names (no importlib.metadata)."""
    found: dict[str, str] = {}
    dirs = {p.parent for p in _site_roots()}
    cuda_spec = importlib.util.find_spec("cuda")
    if cuda_spec is not None and cuda_spec.submodule_search_locations:
        dirs |= {Path(p).parent for p in cuda_spec.submodule_search_locations}
    for d in sorted(dirs):
        try:
            names = os.listdir(d)
        except OSError:
            continue
        for n in names:
            if n.endswith(".dist-info"):
                dist, _, ver = n[: -len(".dist-info")].partition("-")
                if dist.lower() in _DISTS:
                    found.setdefault(dist.lower(), ver)
    return found


def _hash_tree(root: Path) -> str:
    h = hashlib.sha256()
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(filenames):
            p = Path(dirpath, name)
            h.update(str(p.relative_to(root)).encode() + b"\0")
            try:
                h.update(hashlib.sha256(p.read_bytes()).digest())
            except OSError:
                h.update(b"?")
    return h.hexdigest()


@functools.lru_cache(maxsize=1)
def toolchain_fingerprint() -> dict:
    """Everything outside kgen that changes what NVRTC produces. Computed once per process."""
    from .toolchain import nvrtc_version

    fp: dict = {"nvrtc": nvrtc_version(), "dists": _dist_versions()}
    inc = cudart_include_dir()
    fp["cudart_include"] = None if inc is None else inc.name
    if inc is not None and "nvidia_cuda_runtime" not in fp["dists"]:
        fp["cudart_tree"] = _hash_tree(inc)  # headers not from the wheel: hash them all
    return fp


# ---------------------------------------------------------------------------------------------
# the key


def include_closure(files: dict[str, str], kernel_file: str, include_dirs: list[Path]) -> list[tuple[str, str]]:
    """[(name, sha256)] of every header the kernel reaches through `#include`s that resolve in the
    rendered files (name "rendered:<path>") or kgen's include dirs (name relative to its dir). Others
    (cudart, system) are the toolchain's part of the key. Conditional includes are followed too:
    over-approximating is safe."""
    roots = [Path(d) for d in include_dirs]
    found: dict[str, str] = {}
    todo: list[tuple[str, str, str | None, Path | None]] = [(kernel_file, files[kernel_file], posixpath.dirname(kernel_file), None)]
    while todo:
        _, text, rdir, here = todo.pop()
        for quote, name in _INCLUDE_RE.findall(text):
            name = name.strip()
            hit = None
            if rdir is not None:  # from a rendered file: its siblings first (quoted), then the others
                for cand in ([posixpath.normpath(posixpath.join(rdir, name))] if quote == '"' else []) + [name]:
                    if cand in files:
                        hit = ("rendered:" + cand, files[cand].encode(), posixpath.dirname(cand), None)
                        break
            disk = ([here / name] if quote == '"' and here is not None else []) + [d / name for d in roots]
            for path in [] if hit else disk:
                if path.is_file():
                    hit = (_header_name(path, roots), path.read_bytes(), None, path.parent)
                    break
            if hit is None or hit[0] in found:
                continue
            ident, data, sub_rdir, sub_here = hit
            found[ident] = hashlib.sha256(data).hexdigest()
            todo.append((ident, data.decode("utf-8", "replace"), sub_rdir, sub_here))
    return sorted(found.items())


def _header_name(path: Path, roots: list[Path]) -> str:
    """A header's name relative to its include dir, so the key does not depend on where kgen lives."""
    real = path.resolve()
    for d in roots:
        try:
            return real.relative_to(d.resolve()).as_posix()
        except ValueError:
            continue
    return str(real)


def compute_key(*, files: dict[str, str], kernel_file: str, name_expression: str, arch: str, options: dict,
                include_dirs: list[Path], toolchain: dict | None = None) -> str:
    """Hex sha256 over everything that decides the cubin."""
    h = hashlib.sha256()

    def put(tag: str, value: str | bytes) -> None:
        b = value.encode() if isinstance(value, str) else value
        h.update(f"{tag}:{len(b)}:".encode() + b + b"\n")

    put("format", str(FORMAT))
    put("arch", arch)
    put("options", json.dumps(options, sort_keys=True))
    put("name_expression", name_expression)
    put("toolchain", json.dumps(toolchain if toolchain is not None else toolchain_fingerprint(), sort_keys=True))
    put("kernel_file", kernel_file)
    put("kernel", files[kernel_file])  # the other rendered files count only if the kernel includes them
    for name, digest in include_closure(files, kernel_file, include_dirs):
        put("header " + name, digest)
    return h.hexdigest()


# ---------------------------------------------------------------------------------------------
# entries


@dataclass(frozen=True)
class Entry:
    dir: Path
    cubin: bytes
    meta: dict


class Cache:
    def __init__(self, root: Path | None = None, timeout: float | None = None):
        self.root = Path(root) if root is not None else cache_root()
        self.timeout = lock_timeout() if timeout is None else timeout

    def entry_dir(self, uri: str, arch: str, key: str) -> Path:
        return self.root / uri / f"{arch}-{key[:16]}"

    def lock_path(self, uri: str, arch: str, key: str) -> Path:
        return self.root / uri / f"{arch}-{key[:16]}.lock"

    def failed_dir(self, uri: str, arch: str, key: str) -> Path:
        return self.root / uri / f"failed-{arch}-{key[:16]}"

    def load(self, uri: str, arch: str, key: str) -> Entry | None:
        """The verified entry, or None (absent, truncated, corrupted, or another key's)."""
        d = self.entry_dir(uri, arch, key)
        try:
            meta = json.loads((d / META).read_text())
            cubin = (d / CUBIN).read_bytes()
        except (OSError, ValueError, UnicodeDecodeError):
            return None
        if not isinstance(meta, dict):
            return None
        ok = (meta.get("format") == FORMAT and meta.get("key") == key and meta.get("uri") == uri
              and meta.get("arch") == arch and meta.get("cubin_size") == len(cubin)
              and meta.get("cubin_sha256") == hashlib.sha256(cubin).hexdigest()
              and isinstance(meta.get("symbol_mapping"), dict))
        return Entry(d, cubin, meta) if ok else None

    @contextmanager
    def lock(self, uri: str, arch: str, key: str):
        """Hold the entry's lock; a timeout is a user-facing error that names the lock file."""
        from filelock import FileLock, Timeout

        path = self.lock_path(uri, arch, key)
        self._mkdir(path.parent)
        lock = FileLock(str(path), timeout=self.timeout)
        try:
            lock.acquire()
        except Timeout:
            raise KgenError([Problem(
                "cache-lock", f"timed out after {self.timeout:g} s waiting for the cache lock {path} "
                f"(another kgen process is compiling {uri} for {arch})",
                fix=f"wait for it to finish, or raise KGEN_LOCK_TIMEOUT; if no kgen runs, delete {path}",
                file=path)]) from None
        try:
            yield path
        finally:
            lock.release()

    def store(self, uri: str, arch: str, key: str, cubin: bytes, meta: dict, sources: dict[str, str]) -> Entry:
        """Write an entry atomically (temp dir, then rename); call it holding the lock."""
        final = self.entry_dir(uri, arch, key)
        meta = {**meta, "format": FORMAT, "uri": uri, "arch": arch, "key": key, "cubin_size": len(cubin),
                "cubin_sha256": hashlib.sha256(cubin).hexdigest()}
        try:
            self._mkdir(final.parent)
            tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{final.name}-", dir=final.parent))
            try:
                write_sources(tmp / "src", sources)
                (tmp / CUBIN).write_bytes(cubin)
                (tmp / META).write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
                if final.exists():  # an invalid entry: move it aside, then replace it
                    trash = Path(tempfile.mkdtemp(prefix=f".trash-{final.name}-", dir=final.parent))
                    os.replace(final, trash / "old")
                    shutil.rmtree(trash, ignore_errors=True)
                os.replace(tmp, final)
            except BaseException:
                shutil.rmtree(tmp, ignore_errors=True)
                raise
        except OSError as e:
            raise self._unwritable(e) from None
        return Entry(final, cubin, meta)

    def write_failed(self, uri: str, arch: str, key: str, sources: dict[str, str], log: str) -> Path:
        """Keep a failed compile's sources and log where the user can open them."""
        d = self.failed_dir(uri, arch, key)
        try:
            if d.exists():
                shutil.rmtree(d, ignore_errors=True)
            write_sources(d, sources)
            (d / "nvrtc.log").write_text(log)
        except OSError:
            d = Path(tempfile.mkdtemp(prefix=f"kgen-failed-{uri}-{arch}-"))
            write_sources(d, sources)
            (d / "nvrtc.log").write_text(log)
        return d

    def _mkdir(self, d: Path) -> None:
        try:
            d.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise self._unwritable(e) from None

    def _unwritable(self, e: OSError) -> KgenError:
        return KgenError([Problem("cache-dir", f"cannot write the kgen cache at {self.root}: {e.strerror or e}",
                                  fix="set KGEN_CACHE_DIR to a writable directory", file=self.root)])


def write_sources(d: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        p = d / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
