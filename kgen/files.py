"""Every file kgen writes goes through here: whole or absent, regular files only, confined when asked.

`check_target(target, root=None)` says which file a write will replace, or refuses it
(`UnsafeTarget`, an OSError) before anything is written:
- only a regular file (or a path that does not exist yet) is a target: a directory, FIFO, device or
  socket is never replaced by a rename (a FIFO's reader would stay blocked, /dev/full would become
  a file);
- a symbolic link is followed deliberately: the link stays and the file it names gets the new
  content; a dangling link or a link loop is refused;
- a read-only file (no owner write bit) is refused: its owner said not to change it;
- under `root` (an engine tree): the path stays inside the root, no directory between the root and
  the file is a symbolic link, and a linked file must resolve inside the root.

`write_atomic(target, data)`: a temp file beside the (resolved) target, then `os.replace`; on any
failure the temp file is removed and the target is as it was.

`write_all({target: data or None}, root=None)`: several files (None deletes one), all or none. A
journal (`JOURNAL`, in the root, or in the nearest existing directory above the first target) makes
it recoverable even after `kill -9`: the files are staged as temp files beside their targets (the
old files kept as hard links), the journal then flips to "commit" and the renames run with SIGINT,
SIGTERM and SIGHUP held back. A process killed before the flip leaves a journal the next
`write_all` (or `recover`) undoes: temp files and the directories it made are removed, the targets
were never touched. Killed after the flip, the next run finishes the renames. A failure in-process
(disk full, a permission) undoes what was done, judged from the disk (a temp file that is gone was
renamed), so no file is missed. `locked(dir)` is the advisory lock (flock on the directory, held
per process, re-entrant) that one read-compute-write cycle holds, e.g. `kgen patch --apply`.

A new file gets mode 0644; a replaced file keeps its mode. Nothing is fsync'ed: the guarantee is
against interrupted processes, not power loss.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import re
import secrets
import signal
import stat
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

Data = str | bytes
JOURNAL = ".kgen-write-journal.json"
_MAGIC = "kgen-write-journal"
_NAME_KEEP = 120  # characters of a target's name kept in its temp names (NAME_MAX is 255)


class UnsafeTarget(OSError):
    """A path kgen refuses to write (not a regular file, a link that leaves the root, ...)."""

    def __init__(self, path: str | os.PathLike, why: str):
        super().__init__(errno.EINVAL, why, str(path))


class LockBusy(OSError):
    def __init__(self, path: Path, seconds: float):
        super().__init__(errno.EWOULDBLOCK, f"another kgen process is writing here (waited {seconds:.0f} s for "
                         "its lock)", str(path))


def file_kind(mode: int) -> str:
    for test, kind in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket"), (stat.S_ISLNK, "a symbolic link")):
        if test(mode):
            return kind
    return "a regular file" if stat.S_ISREG(mode) else "a special file"


# ---------------------------------------------------------------------------------------------
# which file a write replaces


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def check_target(target: str | os.PathLike, root: str | os.PathLike | None = None) -> Path:
    """The file a write to `target` replaces (the target, or the file its link names); UnsafeTarget
    if kgen must not write there (see the module docstring)."""
    target = Path(target)
    if root is not None:
        root_real = os.path.realpath(root)
        rel = Path(os.path.relpath(os.path.abspath(target), os.path.abspath(root)))
        if rel.is_absolute() or ".." in rel.parts or rel == Path("."):
            raise UnsafeTarget(target, f"is outside the engine root {root}")
        here = Path(root)
        for part in rel.parts[:-1]:
            here = here / part
            try:
                st = os.lstat(here)
            except FileNotFoundError:
                break  # from here on nothing exists: the write creates it
            if stat.S_ISLNK(st.st_mode):
                raise UnsafeTarget(target, f"lies under {here}, a symbolic link to a directory: kgen writes "
                                   "nothing through directory links in an engine tree")
            if not stat.S_ISDIR(st.st_mode):
                raise UnsafeTarget(target, f"lies under {here}, which is {file_kind(st.st_mode)}, not a directory")
    try:
        st = os.lstat(target)
    except FileNotFoundError:
        return target
    except NotADirectoryError:
        raise UnsafeTarget(target, "lies under a path that is a file, not a directory") from None
    resolved = target
    if stat.S_ISLNK(st.st_mode):
        try:
            st = os.stat(target)
        except FileNotFoundError:
            raise UnsafeTarget(target, "is a dangling symbolic link (kgen does not create the file it names)") from None
        except OSError as e:
            if e.errno == errno.ELOOP:
                raise UnsafeTarget(target, "is a symbolic link loop") from None
            raise
        resolved = Path(os.path.realpath(target))
        if root is not None and not _inside(str(resolved), root_real):
            raise UnsafeTarget(target, f"is a symbolic link to {resolved}, outside the engine root {root}")
    if not stat.S_ISREG(st.st_mode):
        raise UnsafeTarget(target, f"is {file_kind(st.st_mode)}, not a regular file (kgen replaces only regular "
                           "files)")
    if not st.st_mode & stat.S_IWUSR:
        raise UnsafeTarget(target, f"is read-only (mode {st.st_mode & 0o777:04o}); kgen does not replace a file "
                           "its owner made read-only (chmod u+w it to allow the write)")
    return resolved


# ---------------------------------------------------------------------------------------------
# one file


def _stage(target: Path, data: Data, prefix: str) -> Path:
    """`data` in a temp file beside `target` (its directory exists), with the mode `target` will have."""
    fd, tmp = tempfile.mkstemp(prefix=prefix, suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode("utf-8") if isinstance(data, str) else data)
        try:
            mode = target.stat().st_mode & 0o777
        except OSError:
            mode = 0o644
        os.chmod(tmp, mode)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return Path(tmp)


def _short(name: str) -> str:
    return name[:_NAME_KEEP]


_TOKEN_BYTES = 6  # a write's token names its temp files
_IN_FLIGHT = re.compile(rf"\..*\.kgen-[0-9a-f]{{{2 * _TOKEN_BYTES}}}(-.*\.tmp|\.old)")


def write_atomic(target: str | os.PathLike, data: Data, root: str | os.PathLike | None = None) -> None:
    resolved = check_target(os.path.abspath(target), None if root is None else os.path.abspath(root))
    created = _missing_dirs([resolved])
    try:
        for d in created:
            d.mkdir()
        tmp = _stage(resolved, data, f".{_short(resolved.name)}.")
        try:
            os.replace(tmp, resolved)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
    except BaseException:
        _rmdirs(created)
        raise


# ---------------------------------------------------------------------------------------------
# the lock


_held: dict[str, tuple[int, int]] = {}  # realpath -> (fd, depth): flock is per open file, so re-enter here
_held_guard = threading.Lock()


@contextlib.contextmanager
def locked(directory: str | os.PathLike, timeout: float = 60.0) -> Iterator[None]:
    """Hold the advisory lock of `directory` (flock on the directory itself: nothing is created in
    it). Waits up to `timeout` seconds for another process, then LockBusy."""
    key = os.path.realpath(directory)
    with _held_guard:
        if key in _held:
            fd, depth = _held[key]
            _held[key] = (fd, depth + 1)
            reentered = True
        else:
            reentered = False
    if not reentered:
        fd = os.open(key, os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0))
        start = time.monotonic()
        try:
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() - start > timeout:
                        raise LockBusy(Path(directory), timeout) from None
                    time.sleep(0.05)
        except BaseException:
            os.close(fd)
            raise
        with _held_guard:
            _held[key] = (fd, 1)
    try:
        yield
    finally:
        with _held_guard:
            fd, depth = _held[key]
            if depth > 1:
                _held[key] = (fd, depth - 1)
            else:
                del _held[key]
                os.close(fd)  # releases the flock


# ---------------------------------------------------------------------------------------------
# several files: the journal


def _missing_dirs(targets: list[Path]) -> list[Path]:
    """The directories the targets need that do not exist, parents first."""
    out: list[Path] = []
    seen: set[Path] = set()
    for t in targets:
        chain = []
        p = t.parent
        while not os.path.lexists(p) and p != p.parent:
            chain.append(p)
            p = p.parent
        for d in reversed(chain):
            if d not in seen:
                seen.add(d)
                out.append(d)
    return out


def _rmdirs(created: list[Path]) -> None:
    """Remove the directories a write created (deepest first; only if empty)."""
    for d in sorted(created, key=lambda p: len(p.parts), reverse=True):
        try:
            d.rmdir()
        except OSError:
            pass


def _journal_dir(start: Path) -> Path:
    p = start
    while not p.is_dir() and p != p.parent:
        p = p.parent
    return p


def _journal_places(targets: list[Path], base: Path, levels: int = 8) -> list[Path]:
    """Where an earlier write to these targets may have left its journal: the directory this write
    uses and the existing directories a few levels above each target (an interrupted write may
    have created the ones below)."""
    places = {base}
    for parent in {t.parent for t in targets}:
        p = parent
        for _ in range(levels):
            if p.is_dir():
                places.add(p)
            if p == p.parent:
                break
            p = p.parent
    return sorted(places)


def _save(journal: Path, doc: dict) -> None:
    tmp = journal.with_name(journal.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(doc, f)
    os.replace(tmp, journal)


def _entries(doc: dict) -> list[dict]:
    return doc["files"]


def _temps(entry: dict, token: str) -> list[Path]:
    """The staged temp files of one journal entry (named by the write's token)."""
    target = Path(entry["target"])
    try:
        return [target.parent / n for n in os.listdir(target.parent)
                if n.startswith(f".{_short(target.name)}.kgen-{token}-") and n.endswith(".tmp")]
    except OSError:
        return []


def _old(entry: dict, token: str) -> Path:
    target = Path(entry["target"])
    return target.parent / f".{_short(target.name)}.kgen-{token}.old"


def _finish(journal: Path, doc: dict) -> None:
    """Roll a committed write forward: rename what was not renamed yet, drop the old copies."""
    for e in _entries(doc):
        target, temps = Path(e["target"]), _temps(e, doc["token"])
        if e["delete"]:
            with contextlib.suppress(FileNotFoundError):
                target.unlink()
        elif temps:
            os.replace(temps[0], target)
        for t in temps[1:]:
            t.unlink(missing_ok=True)
        _old(e, doc["token"]).unlink(missing_ok=True)
    journal.unlink(missing_ok=True)
    for e in _entries(doc):
        if e["delete"]:
            _prune(Path(e["target"]).parent, Path(doc["root"]))


def _undo(journal: Path, doc: dict) -> None:
    """Undo a write from any state: a target whose temp file is gone was renamed (or deleted) and
    gets its old file back; temp files, old copies and the directories the write made go."""
    committed = doc["state"] != "staged"
    for e in _entries(doc):
        target, temps, old = Path(e["target"]), _temps(e, doc["token"]), _old(e, doc["token"])
        if committed:
            done = not os.path.lexists(target) if e["delete"] else not temps  # renamed or deleted already
            if done and e["existed"] and os.path.lexists(old):
                os.replace(old, target)
            elif done and not e["existed"] and not e["delete"]:
                with contextlib.suppress(FileNotFoundError):
                    target.unlink()
        for leftover in (*temps, old):
            with contextlib.suppress(OSError):
                leftover.unlink()
    _rmdirs([Path(d) for d in doc["dirs"]])
    journal.unlink(missing_ok=True)


def _read_journal(journal: Path) -> dict:
    """A journal kgen wrote, checked: every path it names lies under its directory."""
    try:
        doc = json.loads(journal.read_text(encoding="utf-8"))
        base = os.path.realpath(journal.parent)
        ok = doc.get("magic") == _MAGIC and doc.get("state") in ("staged", "commit", "undo") and \
            isinstance(doc.get("token"), str) and doc["token"].isalnum() and \
            all(_inside(os.path.realpath(p), base) for p in [*doc["dirs"], doc["root"]]) and \
            all(_inside(os.path.realpath(Path(e["target"]).parent), base) and
                {"target", "existed", "delete"} <= set(e) for e in doc["files"])
    except (OSError, ValueError, TypeError, KeyError, AttributeError) as e:
        raise UnsafeTarget(journal, f"is not a journal kgen can read ({e}); remove it if no kgen process "
                           "is writing here") from None
    if not ok:
        raise UnsafeTarget(journal, "is not a kgen write journal for this directory; remove it if no kgen "
                           "process is writing here")
    return doc


def recover(directory: str | os.PathLike) -> str | None:
    """Finish or undo an interrupted `write_all` whose journal lies in `directory`; returns what was
    done ("finished" / "undone") or None when there was nothing to recover."""
    journal = Path(directory) / JOURNAL
    Path(str(journal) + ".tmp").unlink(missing_ok=True)  # a journal never saved: nothing was staged
    if not os.path.lexists(journal):
        return None
    with locked(directory):
        if not os.path.lexists(journal):
            return None
        doc = _read_journal(journal)
        if doc["state"] == "commit":
            _finish(journal, doc)
            return "finished"
        _undo(journal, doc)
        return "undone"


def unfinished(directory: str | os.PathLike) -> set[str]:
    """The names in `directory` that an interrupted `write_all` owns: its journal, its staged temp files
    and kept old copies, and the targets its journal lists. Call it holding `locked(directory)`: a
    write in progress holds that lock, so what is seen here is what a killed one left."""
    d = Path(directory)
    try:
        names = set(os.listdir(d))
    except OSError:
        return set()
    owned = {n for n in names if n in (JOURNAL, JOURNAL + ".tmp") or _IN_FLIGHT.fullmatch(n)}
    if JOURNAL in names:
        with contextlib.suppress(UnsafeTarget):
            owned |= {Path(e["target"]).name for e in _read_journal(d / JOURNAL)["files"]
                      if os.path.realpath(Path(e["target"]).parent) == os.path.realpath(d)}
    return owned


def pending(directory: str | os.PathLike) -> bool:
    """Whether an interrupted write left its journal in `directory`."""
    return os.path.lexists(Path(directory) / JOURNAL)


@contextlib.contextmanager
def _signals_held() -> Iterator[None]:
    """SIGINT, SIGTERM and SIGHUP wait until the renames are done (main thread; elsewhere the
    journal covers a kill)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}
    before = signal.pthread_sigmask(signal.SIG_BLOCK, held)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)


def _prune(d: Path, root: Path) -> None:
    """Remove directories a deletion left empty, up to (not including) `root`."""
    while d != root and _inside(str(d), str(root)):
        try:
            d.rmdir()
        except OSError:
            return
        d = d.parent


def write_all(files: Mapping[Path, Data | None], root: str | os.PathLike | None = None) -> None:
    """Write every file (None: delete it) or none (see the module docstring). Raises the first
    OSError (UnsafeTarget before anything is written)."""
    resolved: dict[Path, tuple[Path, Data | None]] = {}
    root = None if root is None else os.path.abspath(root)
    for target, data in files.items():
        real = check_target(os.path.abspath(target), root)
        key = Path(os.path.realpath(real))
        if key in resolved:
            raise UnsafeTarget(target, f"names the same file as {resolved[key][0]}")
        resolved[key] = (real, data)
    if not resolved:
        return
    targets = [real for real, _ in resolved.values()]
    base = _journal_dir(Path(root) if root is not None else targets[0].parent)
    for d in _journal_places(targets, base):
        if root is None or _inside(os.path.realpath(d), os.path.realpath(base)):
            recover(d)
    with locked(base):
        _write_journaled(base, resolved, Path(root) if root is not None else base)


def _write_journaled(base: Path, resolved: dict[Path, tuple[Path, Data | None]], root: Path) -> None:
    journal = base / JOURNAL
    token = secrets.token_hex(_TOKEN_BYTES)
    items = list(resolved.values())
    dirs = _missing_dirs([t for t, data in items if data is not None])
    doc: dict[str, Any] = {"magic": _MAGIC, "state": "staged", "token": token, "root": str(root.absolute()),
           "dirs": [str(d.absolute()) for d in dirs],
           "files": [{"target": str(t.absolute()), "existed": os.path.lexists(t), "delete": data is None}
                     for t, data in items]}
    _save(journal, doc)
    try:
        for d in dirs:
            d.mkdir()
        for (target, data), e in zip(items, doc["files"]):
            if e["existed"]:
                old = _old(e, token)
                try:
                    os.link(target, old)
                except OSError:  # a file system without hard links: a copy
                    tmp = _stage(old, target.read_bytes(), f".{_short(target.name)}.kgen-{token}-old")
                    os.replace(tmp, old)
            if data is not None:
                _stage(target, data, f".{_short(target.name)}.kgen-{token}-")
    except BaseException:
        _undo(journal, doc)
        raise
    try:
        with _signals_held():
            doc["state"] = "commit"
            _save(journal, doc)
            for (target, data), e in zip(items, doc["files"]):
                if data is None:
                    if e["existed"]:
                        target.unlink()
                else:
                    os.replace(_temps(e, token)[0], target)
            for e in doc["files"]:
                _old(e, token).unlink(missing_ok=True)
            journal.unlink()
    except BaseException:
        doc["state"] = "undo"
        with contextlib.suppress(OSError):
            _save(journal, doc)
        _undo(journal, doc)
        raise
    for (target, data) in items:
        if data is None:
            _prune(target.parent, root)
