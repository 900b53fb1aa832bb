"""The compile cache: cubins keyed by a content hash, never by mtimes.

Layout (readable: the URI is the variant's name)::

    $KGEN_CACHE_DIR/<uri>/<arch>-<hash16>/kernel.cubin   the cubin NVRTC wrote
                                         /meta.json      key, symbol map, registers, spills, sha256 ...
                                         /src/           the rendered sources it was built from
    $KGEN_CACHE_DIR/<uri>/<arch>-<hash16>.lock           held while one process compiles it
    $KGEN_CACHE_DIR/<uri>/failed-<arch>-<hash16>/        sources + nvrtc.log of the last failure
    $KGEN_CACHE_DIR/_runs/<hash>.json                    compile's run records (kgen.build.RunMemo)
    $KGEN_CACHE_DIR/_tmp/<uri>-*/                        NVRTC's inputs while a compile runs
    $KGEN_CACHE_DIR/nvrtc_archs.json                     the NVRTC probe record (kgen.toolchain)
    $KGEN_CACHE_DIR/_native/fastop-<hash16>.so           the op's native kernel (kgen.native)

The key is the sha256 of: kgen's cache format version, the arch, the compile options, the name
expression, every rendered file (the kernel source and its siblings), the content of every header of
the include closure that resolves in the rendered files or kgen's include dirs, and the toolchain
(NVRTC's own version plus the versions of the wheels that ship libnvrtc, the cudart headers and
cuda-python: `kgen.toolchain.toolchain_fingerprint`).

Entries are written to a temp dir and renamed into place, and verified on every read (the cubin's
sha256 must match meta.json): a truncated, corrupted or unreadable entry - a dangling link, a FIFO
planted in it - is rebuilt, never trusted, never read. A file lock per entry makes concurrent
compiles of one variant compile it once. NVRTC's working dirs live in `_tmp/` and are removed when
a compile ends, however it ends; what a killed process leaves is swept after an hour. The cache is
bounded by `kgen cache prune` (least recently used entries first; a hit refreshes an entry's mtime)
and emptied by `kgen cache clean`.

Nothing here imports cuda-python: a cache hit must stay cheap.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import posixpath
import re
import shutil
import stat
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from .diagnostics import KgenError, Problem
from .resources import cache_root
from .source import read_regular
from .toolchain import PROBE_RECORD, toolchain_fingerprint

FORMAT = 1  # bump when the entry layout or the key's composition changes
DEFAULT_LOCK_TIMEOUT = 120.0
DEFAULT_MAX_MB = 2048  # `kgen cache prune` keeps the cache under this
CUBIN = "kernel.cubin"
META = "meta.json"
MAX_CUBIN_BYTES = 64 << 20  # a cubin of one kernel is ~100 KiB; anything near this is not one
MAX_META_BYTES = 16 << 20  # meta.json holds the ptxas log
TMP = "_tmp"  # NVRTC's working dirs: inside the cache, so a killed compile's leftovers are found
STALE_SECONDS = 3600  # a temp dir older than this belongs to a process that is gone

_INCLUDE_RE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*([<"])([^>"\n]+)[>"]', re.MULTILINE)


def lock_timeout() -> float:
    """KGEN_LOCK_TIMEOUT in seconds (default 120); anything but a non-negative number is a usage error."""
    text = os.environ.get("KGEN_LOCK_TIMEOUT")
    if text is None or not text.strip():
        return DEFAULT_LOCK_TIMEOUT
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value >= 0):
        raise KgenError([Problem("cache-lock", f"KGEN_LOCK_TIMEOUT={text[:40]!r} is not a number of seconds",
                                 fix="set it to a non-negative number such as 120, or unset it")], exit_code=2)
    return value


def _component(value: str, what: str) -> str:
    """`value` as one path component under the cache root: the names kgen validates always are; this
    keeps a caller that skipped validation (or a library user) from writing outside the cache."""
    if not value or value in (".", "..") or "/" in value or "\\" in value or not value.isprintable():
        raise KgenError([Problem("cache-dir", f"{what} {value!r} cannot name a cache directory",
                                 fix="use a validated variant name and architecture")])
    return value


# ---------------------------------------------------------------------------------------------
# the key


def include_closure(files: dict[str, str], kernel_file: str, include_dirs: list[Path]) -> list[tuple[str, str]]:
    """[(name, sha256)] of every header the kernel reaches through `#include`s that resolve in the
    rendered files (name "rendered:<path>") or kgen's include dirs (name relative to its dir). Others
    (cudart, system) are the toolchain's part of the key. Conditional includes are followed too:
    over-approximating is safe."""
    roots = [Path(d) for d in include_dirs]
    found: dict[str, str] = {}
    todo: list[tuple[str, str, str | None, Path | None]] = [
        (kernel_file, files[kernel_file], posixpath.dirname(kernel_file), None)]
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

    if toolchain is None:

        toolchain = toolchain_fingerprint()
    put("format", str(FORMAT))
    put("arch", arch)
    put("options", json.dumps(options, sort_keys=True))
    put("name_expression", name_expression)
    put("toolchain", json.dumps(toolchain, sort_keys=True))
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
        return self.root / _component(uri, "variant") / f"{_component(arch, 'arch')}-{key[:16]}"

    def lock_path(self, uri: str, arch: str, key: str) -> Path:
        return self.entry_dir(uri, arch, key).with_name(f"{arch}-{key[:16]}.lock")

    def failed_dir(self, uri: str, arch: str, key: str) -> Path:
        return self.entry_dir(uri, arch, key).with_name(f"failed-{arch}-{key[:16]}")

    def load(self, uri: str, arch: str, key: str) -> Entry | None:
        """The verified entry, or None (absent, truncated, corrupted, another key's, unreadable, a
        dangling link, a FIFO or device planted in it: never read, rebuilt)."""
        d = self.entry_dir(uri, arch, key)
        try:
            meta = json.loads(read_regular(d / META, MAX_META_BYTES))
            cubin = read_regular(d / CUBIN, MAX_CUBIN_BYTES)
        except (OSError, ValueError, UnicodeDecodeError):
            return None
        if not isinstance(meta, dict):
            return None
        ok = (meta.get("format") == FORMAT and meta.get("key") == key and meta.get("uri") == uri
              and meta.get("arch") == arch and meta.get("cubin_size") == len(cubin)
              and meta.get("cubin_sha256") == hashlib.sha256(cubin).hexdigest()
              and isinstance(meta.get("symbol_mapping"), dict))
        if not ok:
            return None
        try:
            os.utime(d)  # last use, for `prune` (least recently used first)
        except OSError:
            pass
        return Entry(d, cubin, meta)

    @contextmanager
    def lock(self, uri: str, arch: str, key: str):
        """Hold the entry's lock; a timeout is a user-facing error that names the lock file."""
        from filelock import FileLock, Timeout

        path = self.lock_path(uri, arch, key)
        self._mkdir(path.parent)
        if path.is_symlink() or path.exists() and not path.is_file():  # a planted link, FIFO or dir
            self._remove(path)
        lock = FileLock(str(path), timeout=self.timeout)
        try:
            lock.acquire()
        except Timeout:
            raise KgenError([Problem(
                "cache-lock", f"timed out after {self.timeout:g} s waiting for the cache lock {path} "
                f"(another kgen process is compiling {uri} for {arch})",
                fix=f"wait for it to finish, or raise KGEN_LOCK_TIMEOUT; if no kgen runs, delete {path}",
                file=path)]) from None
        except OSError as e:
            raise self._unwritable(e) from None
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
            self._sweep(final.parent)
            tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{final.name}-", dir=final.parent))
            try:
                write_sources(tmp / "src", sources)
                (tmp / CUBIN).write_bytes(cubin)
                (tmp / META).write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
                if final.is_symlink() or final.exists():  # an invalid entry (or a dangling link): replace it
                    self._remove(final)
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
            if d.is_symlink() or d.exists():
                self._remove(d)
            write_sources(d, sources)
            (d / "nvrtc.log").write_text(log)
        except OSError:
            d = Path(tempfile.mkdtemp(prefix=f"kgen-failed-{uri}-{arch}-"))
            write_sources(d, sources)
            (d / "nvrtc.log").write_text(log)
        return d

    @contextmanager
    def workdir(self, uri: str):
        """A temp dir for NVRTC's inputs, inside the cache (`_tmp/`): removed when the compile ends,
        also on an exception or Ctrl-C; what a SIGKILL leaves is removed by the next compile or prune."""
        base = self.root / TMP
        self._mkdir(base)
        self._sweep(base)
        try:
            d = tempfile.mkdtemp(prefix=f"{_component(uri, 'variant')}-", dir=base)
        except OSError as e:
            raise self._unwritable(e) from None
        try:
            yield d
        finally:
            shutil.rmtree(d, ignore_errors=True)

    # -- housekeeping -------------------------------------------------------------------------

    def _sweep(self, d: Path, older_than: float = STALE_SECONDS) -> list[Path]:
        """Remove the temp and trash dirs of processes that are gone (older than `older_than` s)."""
        removed: list[Path] = []
        cutoff = time.time() - older_than
        try:
            names = os.listdir(d)
        except OSError:
            return removed
        for name in names:
            p = d / name
            if not (name.startswith((".tmp-", ".trash-")) or d.name == TMP):
                continue
            try:
                if p.lstat().st_mtime < cutoff:
                    self._remove(p)
                    removed.append(p)
            except OSError:
                continue
        return removed

    def _remove(self, p: Path) -> None:
        """Remove a file, link, special file or directory tree, whatever it is."""
        st = p.lstat()
        if stat.S_ISDIR(st.st_mode):
            trash = Path(tempfile.mkdtemp(prefix=f".trash-{p.name}-", dir=p.parent))
            os.replace(p, trash / "old")  # out of the way at once; the tree goes next
            shutil.rmtree(trash, ignore_errors=True)
        else:
            p.unlink()

    def entries(self) -> list[tuple[Path, int, float]]:
        """(dir, bytes, last use) of every entry, failed-compile dir and leftover under the root."""
        out: list[tuple[Path, int, float]] = []
        try:
            uris = [self.root / n for n in os.listdir(self.root)]
        except OSError:
            return out
        for u in uris:
            try:
                if not u.is_dir() or u.is_symlink():
                    continue
                for p in u.iterdir():
                    if p.is_dir() and not p.is_symlink():
                        out.append((p, _tree_bytes(p), p.stat().st_mtime))
            except OSError:  # unreadable: neither counted nor touched
                continue
        return out

    def info(self) -> dict:
        entries = self.entries()
        return {"root": str(self.root), "entries": sum(1 for p, _, _ in entries if _is_entry(p)),
                "bytes": sum(b for _, b, _ in entries) + _tree_bytes(self.root / "_runs")}

    def prune(self, max_bytes: int) -> tuple[list[Path], int]:
        """Remove failed-compile dirs, leftovers of interrupted writes and run records, then the least
        recently used entries until the cache holds at most `max_bytes`. ([removed], bytes left)."""
        removed: list[Path] = self._sweep(self.root / TMP)  # a running compile's dir is young: kept
        if (self.root / "_runs").is_dir():
            self._remove(self.root / "_runs")
            removed.append(self.root / "_runs")
        keep = []
        for p, size, used in self.entries():
            if _is_entry(p):
                keep.append((p, size, used))
            elif p.name.startswith("failed-"):
                self._remove(p)
                removed.append(p)
            else:  # .tmp-/.trash-: only those of processes that are gone
                removed += self._sweep(p.parent)
        total = sum(size for _, size, _ in keep)
        for p, size, _ in sorted(keep, key=lambda e: e[2]):
            if total <= max_bytes:
                break
            self._remove(p)
            lock = p.with_name(p.name + ".lock")
            if lock.is_file():
                lock.unlink()
            removed.append(p)
            total -= size
        return removed, total

    def clean(self) -> bool:
        """Remove everything under the root (the root itself stays). False: the root is not kgen's."""
        if not self.root.is_dir():
            return True
        names = os.listdir(self.root)
        foreign = [n for n in names if not _kgen_name(self.root / n)]
        if foreign:
            raise KgenError([Problem("cache-dir", f"{self.root} holds {foreign[0]!r}, which kgen did not write; "
                                     "nothing was removed", fix="point KGEN_CACHE_DIR at kgen's own cache directory",
                                     file=self.root)])
        for n in names:
            self._remove(self.root / n)
        return True

    def _mkdir(self, d: Path) -> None:
        try:
            d.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise self._unwritable(e) from None

    def _unwritable(self, e: OSError) -> KgenError:
        return KgenError([Problem("cache-dir", f"cannot write the kgen cache at {self.root}: {e.strerror or e}",
                                  fix="set KGEN_CACHE_DIR to a writable directory", file=self.root)])


_ENTRY_RE = re.compile(r"sm_\d+[af]?-[0-9a-f]{16}")


def _is_entry(p: Path) -> bool:
    return _ENTRY_RE.fullmatch(p.name) is not None


def _kgen_name(p: Path) -> bool:
    """What kgen writes at the cache root: variant dirs, _runs, _tmp, the NVRTC probe record, _native
    (kgen.native's built library)."""

    name = p.name
    if name in ("_runs", TMP, PROBE_RECORD, "_native") or name.startswith(f".{PROBE_RECORD}."):  # + its temp file
        return True
    try:
        return p.is_dir() and not p.is_symlink() and all(
            _is_entry(c) or c.name.startswith(("failed-", ".tmp-", ".trash-")) or c.name.endswith(".lock")
            for c in p.iterdir())
    except OSError:  # cannot look inside: not provably kgen's
        return False


def _tree_bytes(root: Path) -> int:
    total = 0
    for dirpath, _, filenames in os.walk(root):
        for n in filenames:
            try:
                total += os.lstat(os.path.join(dirpath, n)).st_size
            except OSError:
                pass
    return total


def write_sources(d: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        p = d / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
