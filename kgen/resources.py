"""Where kgen's own files are: the jinja templates and the kernel headers.

In an installed wheel they are package data (kgen/templates); in the source tree they are the
repository's templates/. Imports nothing heavy (the warm `kgen compile` path hashes them).
"""

from __future__ import annotations

from pathlib import Path

PACKAGE = Path(__file__).resolve().parent


def _templates() -> Path:
    packaged = PACKAGE / "templates"
    return packaged if packaged.is_dir() else PACKAGE.parent / "templates"


TEMPLATES = _templates()
INCLUDE = TEMPLATES / "include"  # the real headers (kgen/*.cuh): NVRTC's include path
