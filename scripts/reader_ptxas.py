"""ptxas's registers and spills, and the machine code's digest (scripts/cubin_digest.py --text), of every
reader cubin a launch may load for sm_90a (kgen.reader_plan.ring_tunes), plus the cp.async variant, for the
shipped readable specs and (`--sample N`) N sampled readable specs; with a tuning given (JSON,
READER_TUNING_DEFAULTS overrides), each of those with it on top. `--uncapped`: the plan's registers per
thread lifted (one or two CTAs per SM), so ptxas says what each cubin needs. NVRTC on the CPU.

    PYTHONPATH=$PWD python scripts/reader_ptxas.py [--sample 20] [--uncapped] ['{"kReaderWgPairs": 1}']
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from cubin_digest import digest

from kgen import reader_layout as RL
from kgen.compile import compile_rendered
from kgen.layout import compute
from kgen.reader_check import sample_readable
from kgen.reader_plan import ring_tunes
from kgen.render import render_reader
from kgen.validate import validate_paths

ROOT = Path(__file__).resolve().parents[1]
SPECS = ["dsv4/indexer_fp8.yaml", "dsv4/indexer_fp4.yaml", "indexer_bf16.yaml", "dsv32_indexer.yaml"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("tune", nargs="?", default=None)
    ap.add_argument("--sample", type=int, default=0)
    ap.add_argument("--uncapped", action="store_true")
    ap.add_argument("--no-shipped", action="store_true")
    a = ap.parse_args()
    extra = json.loads(a.tune) if a.tune else None
    if a.uncapped:  # the plan's registers, hence __launch_bounds__' CTAs per SM: at most 2 of any cubin
        for name in ("READER_WG_REGISTERS", "READER_WG_TMA_REGISTERS", "READER_WG_PAIR_REGISTERS",
                     "READER_WG_TMA_PAIR_REGISTERS"):
            setattr(RL, name, 255)
        RL.READER_WG_REGISTER_NEEDS.clear()
    specs = [] if a.no_shipped else [validate_paths([ROOT / "specs" / p]).specs()[0] for p in SPECS]
    specs += sample_readable(a.sample) if a.sample else []
    for spec in specs:
        lay = compute(spec)
        tunes = [*ring_tunes(spec, None), {"kReaderWgTma": 0}]
        if extra:
            tunes = [{**(t or {}), **extra} for t in tunes]
        tunes = [t for i, t in enumerate(tunes) if t not in tunes[:i]]
        for tune in tunes:
            k = compile_rendered(render_reader(spec, tune=tune), "sm_90a", progress=None)
            wg = RL.reader_wg_enabled(lay, tune)
            plan = RL.reader_wg_planned_registers(lay, tune) if wg else 0
            print(f"{spec.name} {spec.store.dtype} d{spec.head_dim} p{lay.page_size} {tune} wg={int(wg)} "
                  f"tma={int(RL.reader_wg_tma(lay, tune))} plan={plan} regs={k.registers} spill={k.spill_bytes} "
                  f"text={digest(k.cubin, True)[:16]} serialized={'serialized' in k.log}", flush=True)


if __name__ == "__main__":
    main()
