"""SASS of reader cubins (NVRTC on the CPU, disassembled by nvdisasm): per cubin the instructions in all,
those before the first wgmma (HGMMA, QGMMA) and before the first tensor copy (UTMALDG) in the code's order (the
prologue's static length), the opcode histogram of that prologue, and the static length of the innermost loop
around the first wgmma (a token's body in the one-token cubins). NOPs are not counted. nvdisasm from the
nvidia-cuda-nvdisasm wheel (NVDISASM=path).

    NVDISASM=/tmp/tools/nvidia/cu13/bin/nvdisasm PYTHONPATH=$PWD python scripts/reader_sass.py [SPEC.yaml ...]
"""

from __future__ import annotations

import collections
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from kgen.compile import compile_rendered
from kgen.reader_plan import ring_tunes
from kgen.render import render_reader
from kgen.validate import validate_paths

ROOT = Path(__file__).resolve().parents[1]
SPECS = ["dsv4/indexer_fp8.yaml", "indexer_bf16.yaml"]
INSN = re.compile(r"/\*[0-9a-f]{4,}\*/\s+(@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)")
LABEL = re.compile(r"^(\.L_x_\d+):")
BRANCH = re.compile(r"\bBRA\b.*`\((\.L_x_\d+)\)")


def disassemble(cubin: bytes) -> str:
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        return subprocess.run([os.environ.get("NVDISASM", "nvdisasm"), "-c", f.name], check=True,
                              capture_output=True, text=True).stdout


def sass(text: str) -> list[str]:
    return [m.group(2) for m in map(INSN.search, text.splitlines()) if m]


def loop_around(text: str, name: str) -> int:
    """Instructions (NOPs aside) of the innermost loop holding the first `name` instruction: the backward branch
    past it whose target lies closest before it; 0 where none does."""
    ops: list[str] = []
    labels: dict[str, int] = {}
    branches: list[tuple[int, str]] = []
    for line in text.splitlines():
        if label := LABEL.match(line.strip()):
            labels[label.group(1)] = len(ops)
        elif insn := INSN.search(line):
            if branch := BRANCH.search(line):
                branches.append((len(ops), branch.group(1)))
            ops.append(insn.group(2))
    first = before(ops, name)
    spans = [(labels[t], b) for b, t in branches if b > first and labels.get(t, first + 1) <= first]
    if not spans:
        return 0
    start, end = max(spans, key=lambda span: (span[0], -span[1]))
    return sum(op != "NOP" for op in ops[start:end + 1])


def before(ops: list[str], name: str) -> int:
    return next((i for i, o in enumerate(ops) if name in o.split(".")[0]), len(ops))


def main() -> None:
    paths = sys.argv[1:] or [str(ROOT / "specs" / p) for p in SPECS]
    for path in paths:
        spec = validate_paths([Path(path)]).specs()[0]
        for tune in ring_tunes(spec, None)[:1]:
            text = disassemble(compile_rendered(render_reader(spec, tune=tune), "sm_90a", progress=None).cubin)
            ops = [o for o in sass(text) if o != "NOP"]
            wg, tma = before(ops, "GMMA"), before(ops, "UTMALDG")
            hist = collections.Counter(o.split(".")[0] for o in ops[:max(wg, tma)])
            print(f"{spec.name} {tune}: {len(ops)} instructions, {wg} before the first wgmma, {tma} before the first "
                  f"UTMALDG; the loop around the first wgmma: {loop_around(text, 'GMMA')}; prologue: "
                  + " ".join(f"{k}:{v}" for k, v in hist.most_common(14)))


if __name__ == "__main__":
    main()
