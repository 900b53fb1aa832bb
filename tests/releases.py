"""The released engine trees (scripts/engine_releases.py, `make releases`) for the engine tests.

A test that needs a tree FAILS when it is missing (under `make test` the set-up runs first); only
with KGEN_SKIP_RELEASES=1 in the environment, outside make, does it skip instead.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("engine_releases", ROOT / "scripts" / "engine_releases.py")
assert _spec is not None and _spec.loader is not None
setup = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(setup)  # the set-up script: its manifest, tree places and stamps
RELEASES = {r["name"]: r for r in setup.load_manifest()}
SGLANG = sorted(n for n, r in RELEASES.items() if r["engine"] == "sglang")
VLLM = sorted(n for n, r in RELEASES.items() if r["engine"] == "vllm")
LOOP = [n for n, r in RELEASES.items() if r.get("imports")]  # releases the engine-in-the-loop test imports


def tree(name: str) -> Path:
    """The unpacked release `name` (its root, in the layout kgen expects)."""
    rel = RELEASES[name]
    root = setup.tree_dir(rel)
    if setup.tree_ready(rel):
        return root
    why = f"release tree {name} is not laid out in {root.parent} (run `make releases`)"
    if os.environ.get("KGEN_SKIP_RELEASES") == "1":
        pytest.skip(why + "; skipped: KGEN_SKIP_RELEASES=1")
    pytest.fail(why + "; set KGEN_SKIP_RELEASES=1 to skip these tests outside make", pytrace=False)
