"""Where kgen's own files are: the jinja templates and the kernel headers, and the cache root.

In an installed wheel they are package data (kgen/templates); in the source tree they are the
repository's templates/. Imports nothing heavy (the warm `kgen compile` path hashes them).
"""

from __future__ import annotations

import os
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent


def _templates() -> Path:
    packaged = PACKAGE / "templates"
    return packaged if packaged.is_dir() else PACKAGE.parent / "templates"


TEMPLATES = _templates()
INCLUDE = TEMPLATES / "include"  # the real headers (kgen/*.cuh): NVRTC's include path


def cache_root() -> Path:
    """$KGEN_CACHE_DIR, else the platform's user cache dir + /kgen (~/.cache/kgen on Linux)."""
    env = os.environ.get("KGEN_CACHE_DIR")
    if env:
        return Path(env).expanduser()
    import platformdirs

    return Path(platformdirs.user_cache_dir("kgen", appauthor=False))
