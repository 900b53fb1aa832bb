"""One home per fact: no hand-written kernel header types a number the Python owns. The rules' thresholds
(kgen.rules.twin_limits) and the architecture's capacities (kgen.arch.CAPACITY) reach the headers through
each variant's rendered config; a header that restates one (a literal of the same value, or its own
definition of a rendered name) drifts from the Python silently (the reader header once said 72 registers
per thread where kgen's layout said 80), so this test fails on it."""

from __future__ import annotations

import re
from pathlib import Path

from kgen import arch
from kgen.rules import twin_limits

ROOT = Path(__file__).resolve().parents[1]
HEADERS = ROOT / "templates" / "include" / "kgen"
# the reader engineer rewrites this header this round: its numbers are listed in the merge notes and
# move to its config with his change
NOT_YET = {"indexer_logits.cuh"}
SMALL = 4096  # below this a literal is as likely a lane, vector, head or tile count (32, 64, 1024) as a fact kgen owns

# literals that are C++'s own facts, not kgen's: (header, literal) -> why
ALLOWED = {("norm_rope_store.cuh", "0x7fffffffu"): "the 32-bit token index arithmetic's own bound"}

LITERAL = re.compile(r"(?<![\w.])(0[xX][0-9a-fA-F]+|\d+)(?:[uUlL]*)(?![\w.])")


def owned() -> dict[int, str]:
    out: dict[int, str] = {}
    for name, value in twin_limits().items():
        out.setdefault(value, f"kgen.rules.twin_limits {name}")
    for cc, c in arch.CAPACITY.items():
        for field in ("registers", "shared_bytes", "block_shared_bytes", "reserved_shared_bytes"):
            out.setdefault(getattr(c, field), f"kgen.arch.CAPACITY[{cc}].{field}")
    out.setdefault(arch.DEFAULT_SHARED_BYTES, "kgen.arch.DEFAULT_SHARED_BYTES")
    return {v: why for v, why in out.items() if v >= SMALL}


def code_lines(path: Path):
    """(line number, code) with comments and string literals removed."""
    text = re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group(0).count("\n"), path.read_text(), flags=re.S)
    for i, line in enumerate(text.splitlines(), 1):
        line = re.sub(r'"(?:\\.|[^"\\])*"', '""', line.split("//", 1)[0])
        yield i, line


def restated(path: Path) -> list[str]:
    numbers, names = owned(), set(twin_limits())
    out = []
    for i, line in code_lines(path):
        for m in LITERAL.finditer(line):
            value = int(m.group(1), 0)
            if value in numbers and (path.name, m.group(0)) not in ALLOWED:
                out.append(f"{path.name}:{i}: {m.group(0)} is {numbers[value]}")
        for m in re.finditer(r"constexpr\s+[\w:<> ]+?\s(k\w+)\s*=", line):
            if m.group(1) in names:
                out.append(f"{path.name}:{i}: defines {m.group(1)}, which the config renders")
    return out


def test_no_header_restates_a_number_the_python_owns():
    found = [hit for p in sorted(HEADERS.glob("*.cuh")) if p.name not in NOT_YET for hit in restated(p)]
    assert found == []


def test_the_check_finds_a_restated_number(tmp_path):
    bad = tmp_path / "bad.cuh"
    bad.write_text("// 65536 in a comment is fine\nconstexpr long long kPageSizeMax = 65536;\n"
                   "static_assert(x <= 232448, \"227 KB\");\nint lanes = 32;\n")
    hits = restated(bad)
    assert any("bad.cuh:2: 65536" in h for h in hits) and any("defines kPageSizeMax" in h for h in hits)
    assert any("bad.cuh:3: 232448" in h for h in hits) and not any(":4:" in h for h in hits)


def test_the_rendered_config_carries_every_threshold():
    from kgen.reference import load_spec
    from kgen.render import render_variant

    spec = load_spec(ROOT / "specs" / "indexer_bf16.yaml")
    config = render_variant(spec).files[f"{spec.name}/config.cuh"]
    for name, value in twin_limits().items():
        assert f"static constexpr long long {name} = {value};" in config
