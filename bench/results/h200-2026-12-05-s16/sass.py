"""The fp4 reader's machine code, counted where a tile's keys are converted (no GPU: NVRTC and nvdisasm here).

    PYTHONPATH=TREE python bench/results/h200-2026-12-05-s16/sass.py [SPEC [TUNE_JSON]]

Compiles SPEC's reader (default specs/dsv4/indexer_fp4.yaml, the shipped tuning) from the tree on PYTHONPATH for
sm_90a, disassembles it (nvdisasm from the nvidia-cuda-nvdisasm wheel, fetched once into ~/.cache/kgen, or $NVDISASM)
and prints the registers, the kernel's instruction count and the conversion's: the instructions from the label
before the first HMUL2 (the tile's scale bytes and packed words read from shared memory) to the first HGMMA, less
the token loop's set-up after the last HMUL2; opcodes counted, and apart the block that runs only for a scale byte
above 128 (the second multiply). Static counts: each runs once per tile and thread at head_dim 128.
"""

from __future__ import annotations

import collections
import json
import os
import re
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from kgen.compile import compile_rendered
from kgen.render import render_reader
from kgen.validate import validate_paths

WHEEL = "nvidia-cuda-nvdisasm==13.5.37"
OP = re.compile(r"^\s+/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P[0-9T]\s+)?([A-Z0-9_]+)")


def nvdisasm() -> str:
    if os.environ.get("NVDISASM"):
        return os.environ["NVDISASM"]
    home = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "kgen" / WHEEL.replace("==", "-")
    exe = home / "nvidia" / "cu13" / "bin" / "nvdisasm"
    if not exe.exists():
        with tempfile.TemporaryDirectory() as tmp:
            subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", WHEEL,
                            "-d", tmp], check=True)
            zipfile.ZipFile(next(Path(tmp).glob("*.whl"))).extractall(home)
        exe.chmod(0o755)
    return str(exe)


def main() -> None:
    spec_path = Path(sys.argv[1] if len(sys.argv) > 1 else "specs/dsv4/indexer_fp4.yaml")
    tune = json.loads(sys.argv[2]) if len(sys.argv) > 2 else None
    spec = validate_paths([spec_path]).specs()[0]
    kernel = compile_rendered(render_reader(spec, tune=tune), "sm_90a", progress=None)
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(kernel.cubin)
        f.flush()
        text = subprocess.run([nvdisasm(), "-c", f.name], check=True, capture_output=True, text=True).stdout
    lines = text.split("\n")
    ops = [(i, m.group(1)) for i, line in enumerate(lines) if (m := OP.match(line))]
    print(f"{spec.name} {tune}: {kernel.registers} registers, {len(ops)} instructions")
    first_mma = next(i for i, op in ops if op == "HGMMA")
    muls = [i for i, op in ops if op == "HMUL2" and i < first_mma]
    if not muls:
        return
    start = max(i for i, line in enumerate(lines[:muls[0]]) if line.startswith("."))
    region = [(i, op) for i, op in ops if start < i <= muls[-1]]
    branches = [i for i, op in region if op == "BRA"]
    rest = [(i, op) for i, op in region if branches and i > branches[-1]]  # the second multiply's block
    main_part = [(i, op) for i, op in region if not branches or i <= branches[-1]]
    for name, part in (("conversion", main_part), ("scale above 128", rest)):
        counts = collections.Counter(op for _, op in part)
        print(f"  {name}: {len(part)} instructions: " + ", ".join(f"{op} {n}" for op, n in counts.most_common()))


if __name__ == "__main__":
    main()
