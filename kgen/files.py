"""Writing files so that no reader ever sees half of one: the one implementation of kgen's writes.

`write_atomic(target, data)`: a temp file beside the target, then `os.replace` (atomic on POSIX); on
any failure the temp file is removed and the target is as it was.

`write_all({target: data})`: several files, all or none. Every file is staged first (temp files
beside their targets); only then are they renamed into place, and a failure part-way restores the
files already replaced (and removes the ones that did not exist before).

A new file gets mode 0644; a replaced file keeps its mode.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping
from pathlib import Path

Data = str | bytes


def _stage(target: Path, data: Data) -> Path:
    """`data` in a temp file beside `target` (its directory created), with the mode `target` will have."""
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
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


def write_atomic(target: str | os.PathLike, data: Data) -> None:
    target = Path(target)
    tmp = _stage(target, data)
    try:
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_all(files: Mapping[Path, Data]) -> None:
    """Write every file or none (see the module docstring). Raises the first OSError."""
    staged: list[tuple[Path, Path]] = []
    try:
        for target, data in files.items():
            staged.append((Path(target), _stage(Path(target), data)))
    except BaseException:
        for _, tmp in staged:
            tmp.unlink(missing_ok=True)
        raise
    done: list[tuple[Path, bytes | None]] = []
    try:
        for target, tmp in staged:
            before = target.read_bytes() if target.is_file() else None
            os.replace(tmp, target)
            done.append((target, before))
    except BaseException:
        for target, before in reversed(done):
            if before is None:
                target.unlink(missing_ok=True)
            else:
                write_atomic(target, before)
        for _, tmp in staged:
            tmp.unlink(missing_ok=True)
        raise
