"""Writing a generated tree into an output directory: all of it or nothing, and nothing stale left.

`write_tree(out, files, banner)` makes `out` hold `files` (relative path -> text):

1. the location is checked first: `out` (and every existing part of its path) must be a directory or
   not exist yet - `-o` naming a file, or a path through a file, is refused before anything is written;
2. every file whose content changes is written with `kgen.files.write_all` (temp files beside their
   targets, a journal, then renamed; all or none, even across a kill); if a write fails (permission,
   disk full), the directories created for it are removed too and the output is as it was;
3. what an earlier render left and this one does not produce - a variant dir of a spec since renamed,
   a family's table - is removed in the same write (directories it leaves empty too), but only files
   that carry kgen's banner (or headers under `include/kgen/`); anything else in `out` is the user's
   and stays.

Files whose content is already right are not touched (their mtime stays, so builds do not rerun).
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

from .diagnostics import KgenError, Problem
from .files import write_all

HEADERS_DIR = ("include", "kgen")  # the real headers, copied: kgen's own directory


@dataclass
class Written:
    files: list[Path] = field(default_factory=list)  # every file of the output, changed or not
    changed: list[Path] = field(default_factory=list)
    removed: list[Path] = field(default_factory=list)  # stale files of an earlier render


def _refuse(out: Path, message: str, fix: str, exit_code: int = 2) -> KgenError:
    return KgenError([Problem("output", message, fix=fix, file=out)], exit_code)


def check_location(out: Path) -> None:
    """`out` is a directory or can become one: no part of its path is a file (or a dangling link)."""
    for p in reversed([out, *out.parents]):
        try:
            st = os.stat(p)
        except FileNotFoundError:
            if p.is_symlink():
                raise _refuse(out, f"{p} is a dangling symbolic link", "remove it or choose another -o") from None
            return  # from here on nothing exists: mkdir creates it
        except NotADirectoryError:
            raise _refuse(out, f"a part of the output path {out} is a file, not a directory",
                          "choose another -o") from None
        except OSError as e:
            raise _refuse(out, f"cannot use the output path {p}: {e.strerror or e}", "choose another -o") from None
        if not stat.S_ISDIR(st.st_mode):
            what = "the output path" if p == out else "a part of the output path"
            raise _refuse(out, f"{what} {p} is a file, not a directory", "choose another -o (a directory)")


def _is_ours(path: Path, rel: tuple[str, ...], banner: str) -> bool:
    """Did kgen write this file? Its first line carries the banner, or it is a copied kgen header."""
    if rel[:2] == HEADERS_DIR and path.suffix in (".cuh", ".h"):
        return True
    from .source import read_regular

    try:
        head = read_regular(path, 1 << 20)[:400].decode("utf-8", "replace")
    except OSError:  # special files, unreadable: not ours, left alone
        return False
    return banner in head.split("\n", 1)[0]


def stale_files(out: Path, files: dict[str, str], banner: str) -> list[Path]:
    """kgen's files under `out` that the new tree does not contain."""
    if not out.is_dir():
        return []
    stale = []
    for dirpath, dirnames, filenames in os.walk(out):
        dirnames[:] = sorted(d for d in dirnames if not os.path.islink(os.path.join(dirpath, d)))
        for name in sorted(filenames):
            p = Path(dirpath, name)
            rel = p.relative_to(out).parts
            if "/".join(rel) not in files and _is_ours(p, rel, banner):
                stale.append(p)
    return stale


def write_tree(out: Path, files: dict[str, str], banner: str) -> Written:
    out = Path(out)
    check_location(out)
    result = Written(files=[out / rel for rel in files])
    changed: dict[Path, str] = {}
    for rel, text in files.items():
        target = out / rel
        if target.is_symlink() or target.is_dir():
            raise _refuse(out, f"{target} is a {'link' if target.is_symlink() else 'directory'} where kgen "
                          "writes a file", "remove it", 1)
        try:
            if target.is_file() and target.read_text(encoding="utf-8") == text:
                continue
        except (UnicodeDecodeError, OSError):
            pass  # unreadable or not text: rewrite it
        changed[target] = text
    stale = stale_files(out, files, banner)
    try:  # kgen.files: staged, journaled, renamed; all or none (stale files too), new dirs removed
        write_all({**changed, **dict.fromkeys(stale)}, root=out)
    except OSError as e:
        where = e.filename or out
        raise _refuse(out, f"cannot write {where}: {e.strerror or e}; nothing was written",
                      "choose a writable -o") from None
    result.changed = list(changed)
    result.removed = stale
    return result
