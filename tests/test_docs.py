"""The project's own docs stand alone and agree with the code: no file cites a document outside the
repository, docs/layouts.md's table is what kgen computes, docs/cli.md covers every command."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from strategies import ROOT

DOC_RE = re.compile(r"\bdocs/([A-Za-z0-9_.-]+\.md)\b")
OUTSIDE = ("shared docs", "../shared", "/work/shared")


def project_files() -> list[Path]:
    """Tracked and untracked-but-not-ignored text files, bench results (recorded output) aside."""
    out = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, capture_output=True,
                         text=True)
    if out.returncode != 0:
        pytest.skip("not a git checkout")
    files = []
    for rel in out.stdout.splitlines():
        p = ROOT / rel
        if rel.startswith("bench/results/") or not p.is_file() or p.suffix in (".png", ".whl", ".cubin"):
            continue
        files.append(p)
    return files


def test_no_file_cites_a_document_outside_the_repository():
    here = Path(__file__).resolve()
    bad = []
    for p in project_files():
        if p.resolve() == here:
            continue
        try:
            text = p.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        for i, line in enumerate(text.splitlines(), 1):
            for name in DOC_RE.findall(line):
                if not (ROOT / "docs" / name).is_file():
                    bad.append(f"{p.relative_to(ROOT)}:{i}: docs/{name} is not in the repository")
            for phrase in OUTSIDE:
                if phrase in line:
                    bad.append(f"{p.relative_to(ROOT)}:{i}: cites {phrase!r}")
    assert not bad, "\n".join(bad)


def test_layouts_table_is_what_kgen_computes():
    from kgen.layout import compute
    from kgen.load import load_document

    rows = [ln for ln in (ROOT / "docs" / "layouts.md").read_text().splitlines() if ln.startswith("| `specs/")]
    assert len(rows) == len(list((ROOT / "specs").rglob("*.yaml"))) - 1  # every spec file but the family
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        path, name = cells[0].strip("`"), cells[1].split("`")[1]
        per_token = int(cells[4])
        page, p = re.fullmatch(r"(\d+) \((\d+)\)", cells[5]).groups()
        [v] = load_document(ROOT / path).variants
        lay = compute(v.spec)
        assert (v.spec.name, v.spec.head_dim, lay.bytes_per_token, lay.page_bytes, lay.page_size) == (
            name, int(cells[2]), per_token, int(page), int(p)), row


def test_cli_doc_names_every_command():
    from kgen.cli import app

    doc = (ROOT / "docs" / "cli.md").read_text()
    names = [c.name or c.callback.__name__ for c in app.registered_commands]
    names += [g.name for g in app.registered_groups]
    assert set(names) >= {"validate", "layout", "render", "compile", "test", "bench", "schema", "cache"}
    for name in names:
        assert f"### `kgen {name}" in doc, name
