"""ptxas's registers and spills, and the machine code's digest (scripts/cubin_digest.py --text), of every
reader cubin a shipped launch may load for sm_90a (kgen.reader_plan.ring_tunes), plus the cp.async variant;
with a tuning given (JSON, READER_TUNING_DEFAULTS overrides), each of those with it on top. NVRTC on the CPU.

    PYTHONPATH=$PWD python scripts/reader_ptxas.py ['{"kReaderWgPairs": 1}']
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from cubin_digest import digest

from kgen.compile import compile_rendered
from kgen.reader_plan import ring_tunes
from kgen.render import render_reader
from kgen.validate import validate_paths

ROOT = Path(__file__).resolve().parents[1]
SPECS = ["dsv4/indexer_fp8.yaml", "dsv4/indexer_fp4.yaml", "indexer_bf16.yaml", "dsv32_indexer.yaml"]


def main() -> None:
    extra = json.loads(sys.argv[1]) if len(sys.argv) > 1 else None
    for path in SPECS:
        spec = validate_paths([ROOT / "specs" / path]).specs()[0]
        tunes = [*ring_tunes(spec, None), {"kReaderWgTma": 0}]
        if extra:
            tunes = [{**(t or {}), **extra} for t in tunes]
        for tune in tunes:
            k = compile_rendered(render_reader(spec, tune=tune), "sm_90a", progress=None)
            print(f"{spec.name} {tune} regs={k.registers} spill={k.spill_bytes} text={digest(k.cubin, True)[:16]} "
                  f"serialized={'serialized' in k.log}", flush=True)


if __name__ == "__main__":
    main()
