"""One home per fact: no hand-written kernel header types a number the Python owns. The rules' thresholds
(kgen.rules.twin_limits), the architecture's capacities (kgen.arch.CAPACITY) and the reader's capacities
and limits (kgen.reader_layout.reader_constants) reach the headers through each variant's rendered config;
a header that restates one (a literal of the same value, a product of literals such as `227 * 1024`, or
its own definition of a rendered name) drifts from the Python silently (the reader header once said 72
registers per thread where kgen's layout said 80), so this test fails on it. Every header counts, the
reader's parts under reader/ too."""

from __future__ import annotations

import re
from pathlib import Path

from kgen import arch
from kgen import layout as L
from kgen import reader_layout as RL
from kgen.reference import load_spec
from kgen.rules import twin_limits

ROOT = Path(__file__).resolve().parents[1]
HEADERS = ROOT / "templates" / "include" / "kgen"
SMALL = 4096  # below this a literal is as likely a lane, vector, head or tile count (32, 64, 1024) as a fact kgen owns

# literals that are C++'s own facts, not kgen's: (header, literal) -> why
ALLOWED = {("norm_rope_store.cuh", "0x7fffffffu"): "the 32-bit token index arithmetic's own bound"}

NUMBER = r"(?<![\w.])(0[xX][0-9a-fA-F]+|\d+)[uUlL]*(?![\w.])"
LITERAL = re.compile(NUMBER)
PRODUCT = re.compile(NUMBER + r"\s*\*\s*" + NUMBER)


def reader_tables() -> list[dict]:
    """The reader's rendered constants of every shipped variant it reads."""
    specs = [load_spec(ROOT / "specs" / name) for name in ("indexer_bf16.yaml", "dsv4/indexer_fp8.yaml",
                                                           "dsv4/indexer_fp4.yaml", "dsv32_indexer.yaml")]
    assert all(RL.readable(s) for s in specs)
    return [RL.reader_constants(L.compute(s)) for s in specs]


def reader_constants() -> dict[str, int]:
    """Those that are the same for every variant (the reader's shapes, capacities and limits: facts the
    Python owns); the others depend on the layout."""
    tables = reader_tables()
    return {k: v for k, v in tables[0].items() if isinstance(v, int) and all(c.get(k) == v for c in tables)}


def owned() -> dict[int, str]:
    out: dict[int, str] = {}
    for name, value in twin_limits().items():
        out.setdefault(value, f"kgen.rules.twin_limits {name}")
    for cc, c in arch.CAPACITY.items():
        for field in ("registers", "shared_bytes", "block_shared_bytes", "reserved_shared_bytes"):
            out.setdefault(getattr(c, field), f"kgen.arch.CAPACITY[{cc}].{field}")
    out.setdefault(arch.DEFAULT_SHARED_BYTES, "kgen.arch.DEFAULT_SHARED_BYTES")
    for name, value in reader_constants().items():
        out.setdefault(value, f"kgen.reader_layout.reader_constants {name}")
    return {v: why for v, why in out.items() if v >= SMALL}


def code_lines(path: Path):
    """(line number, code) with comments and string literals removed."""
    text = re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group(0).count("\n"), path.read_text(), flags=re.S)
    for i, line in enumerate(text.splitlines(), 1):
        line = re.sub(r'"(?:\\.|[^"\\])*"', '""', line.split("//", 1)[0])
        yield i, line


def restated(path: Path, name: str | None = None) -> list[str]:
    """Where `path` (named `name`: its path under the headers' directory) restates a number or a name the
    Python owns, one `name:line: ...` each."""
    name = name or path.name
    numbers, names = owned(), set(twin_limits()) | {k for c in reader_tables() for k in c}
    out = []
    for i, line in code_lines(path):
        for m in LITERAL.finditer(line):
            value = int(m.group(1), 0)
            if value in numbers and (name, m.group(0)) not in ALLOWED:
                out.append(f"{name}:{i}: {m.group(0)} is {numbers[value]}")
        for m in PRODUCT.finditer(line):
            value = int(m.group(1), 0) * int(m.group(2), 0)
            if value in numbers:
                out.append(f"{name}:{i}: {m.group(0)} is {numbers[value]}")
        for m in re.finditer(r"constexpr\s+[\w:<> ]+?\s(k\w+)\s*[={]", line):
            if m.group(1) in names:
                out.append(f"{name}:{i}: defines {m.group(1)}, which the config renders")
    return out


def headers() -> list[Path]:
    return sorted(HEADERS.rglob("*.cuh"))


def test_every_header_is_checked():
    names = {p.relative_to(HEADERS).as_posix() for p in headers()}
    assert {"indexer_logits.cuh", "norm_rope_store.cuh", "reader/rules.cuh", "reader/launch.cuh"} <= names


def test_no_header_restates_a_number_the_python_owns():
    found = [hit for p in headers() for hit in restated(p, p.relative_to(HEADERS).as_posix())]
    assert found == []


def test_the_check_finds_a_restated_number(tmp_path):
    bad = tmp_path / "bad.cuh"
    bad.write_text("// 65536 in a comment is fine\nconstexpr long long kPageSizeMax = 65536;\n"
                   "static_assert(x <= 232448, \"227 KB\");\nint lanes = 32;\n"
                   "constexpr long long kSmem = 227 * 1024, kFine = 2 * 1024;\n"
                   "static constexpr int kReaderWgStages{4};\n")
    hits = restated(bad)
    assert any("bad.cuh:2: 65536" in h for h in hits) and any("defines kPageSizeMax" in h for h in hits)
    assert any("bad.cuh:3: 232448" in h for h in hits) and not any(":4:" in h for h in hits)
    assert [h for h in hits if ":5:" in h] == ["bad.cuh:5: 227 * 1024 is kgen.arch.CAPACITY[90].block_shared_bytes"]
    assert any("bad.cuh:6: defines kReaderWgStages" in h for h in hits)


def test_the_rendered_config_carries_every_threshold():
    from kgen.render import render_reader, render_variant

    spec = load_spec(ROOT / "specs" / "indexer_bf16.yaml")
    config = render_variant(spec).files[f"{spec.name}/config.cuh"]
    for name, value in twin_limits().items():
        assert f"static constexpr long long {name} = {value};" in config
    reader = render_reader(spec).files[f"{spec.name}/logits_config.cuh"]
    for name, value in {"kReaderSmemBytes": RL.READER_SMEM_BYTES, "kReaderMaxSmemBytes": RL.READER_MAX_SMEM_BYTES,
                        "kReaderSmSharedBytes": RL.READER_SM_SHARED_BYTES,
                        "kReaderCtaReservedBytes": RL.READER_CTA_RESERVED_BYTES,
                        "kReaderSmRegisters": RL.READER_SM_REGISTERS,
                        "kReaderWgTmaRegisters": RL.READER_WG_TMA_REGISTERS,
                        "kReaderWgRegisters": RL.READER_WG_REGISTERS,
                        "kReaderWgTmaPairRegisters": RL.READER_WG_TMA_PAIR_REGISTERS,
                        "kReaderWgPairRegisters": RL.READER_WG_PAIR_REGISTERS}.items():
        assert f"static constexpr long long {name} = {value};" in reader
