"""docs/spec.md is the field reference `kgen schema` prints, generated from the models."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from kgen.schema_doc import field_reference
from kgen.spec import Spec

ROOT = Path(__file__).resolve().parents[1]


def test_docs_spec_md_is_the_generated_reference():
    assert (ROOT / "docs" / "spec.md").read_text() == field_reference(), "run: kgen schema > docs/spec.md"


def test_every_leaf_field_is_documented_with_its_default():
    ref = field_reference()
    for dotted, default in [("head_dim", "**required**"), ("norm.eps", "`1e-06`"), ("rope.dim", "`0`"),
                            ("store.block", "`null`"), ("store.bf16_roundtrip", "`false`"),
                            ("layout.page_align", "`1`"), ("launch.tokens_per_warp", "`2`"),
                            ("targets", "**required**")]:
        row = next(line for line in ref.splitlines() if line.startswith(f"| `{dotted}` |"))
        assert f"| {default} |" in row, row
    assert ref.count("\n| `") == sum(1 for _ in _leaves(Spec))


def _leaves(model, prefix=""):
    from pydantic import BaseModel

    for name, f in model.model_fields.items():
        ann = f.annotation
        nested = [a for a in (ann, *getattr(ann, "__args__", ())) if isinstance(a, type) and issubclass(a, BaseModel)]
        if nested:
            yield from _leaves(nested[0], f"{prefix}{name}.")
        else:
            yield prefix + name


def test_kgen_schema_prints_it():
    r = subprocess.run([sys.executable, "-m", "kgen.cli", "schema"], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0 and r.stdout == field_reference()


def test_head_dim_doc_lists_exactly_what_the_rule_accepts():
    """docs/spec.md (from spec.py) and the head-dim rule agree: the doc names every accepted value and
    no range the rule does not accept (it once said "a multiple of 32", but 96 is refused)."""
    from types import SimpleNamespace

    from kgen.rules import head_dim_ok

    accepted = [h for h in range(1, 4097) if head_dim_ok(SimpleNamespace(head_dim=h))]
    row = next(line for line in field_reference().splitlines() if line.startswith("| `head_dim` |"))
    documented = [int(x) for x in row.replace("(", " ").replace(")", " ").replace(",", " ").split() if x.isdigit()]
    assert accepted == [32, 64, 128, 256, 512, 1024]
    assert sorted(set(documented) - {32}) == accepted[1:] and "multiple of 32" not in row
