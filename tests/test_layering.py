"""The house's layering, drawn from the code (scripts/import_graph.py): no import circle, no import running
up a floor, every module placed on a floor, and function-local imports only where they defer an optional
third-party package (directly, or through a kgen module that imports one at module level)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("import_graph", ROOT / "scripts" / "import_graph.py")
assert _spec is not None and _spec.loader is not None
G = importlib.util.module_from_spec(_spec)
sys.modules["import_graph"] = G
_spec.loader.exec_module(G)



def test_no_circle_and_no_upward_import():
    r = G.report()
    assert r.circles == [], G.listing(r)
    assert [(a.source, a.line, a.target) for a in r.upward] == []


def test_every_module_is_on_one_floor():
    r = G.report()
    assert r.unplaced == [] and r.stale == []
    placed = [m for _, mods in G.FLOORS for m in mods]
    assert len(placed) == len(set(placed))


def test_function_local_imports_only_defer_optional_packages():
    r = G.report()
    assert [(a.source, a.line, a.target) for a in r.local_internal] == []
    assert [(t.source, t.line, t.name) for t in r.local_disallowed] == []


def test_the_abi_imports_nothing_above_the_byte_math():
    floors = G.floor_of()
    edges, _ = G.arrows()
    assert {a.target for a in edges if a.source == "abi"} <= {m for m, f in floors.items() if f < floors["abi"]}


def test_the_tool_sees_a_circle_an_upward_and_a_local_import(tmp_path, monkeypatch):
    pkg = tmp_path / "kgen"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "spec.py").write_text("from . import cli\n")  # floor 0 -> top floor: upward, and a circle
    (pkg / "cli.py").write_text("from . import spec\n\ndef f():\n    from . import layout\n    import typer\n")
    (pkg / "layout.py").write_text("")
    monkeypatch.setattr(G, "PACKAGE", pkg)
    r = G.report()
    assert r.circles == [["cli", "spec"]]
    assert [(a.source, a.target) for a in r.upward] == [("spec", "cli")]
    assert [(a.source, a.target) for a in r.local_internal] == [("cli", "layout")]
    assert r.local_disallowed == [] and "layout" not in r.stale and "abi" in r.stale  # typer is DEFERRED
