"""registers / spills / .text digest of every shipped reader cubin a launch may load (sm_90a)."""
import sys, time
sys.path.insert(0, "scripts")
from cubin_digest import digest
from kgen.compile import compile_rendered
from kgen.render import render_reader
from kgen.reader_plan import ring_tunes
from kgen.validate import validate_paths
from pathlib import Path
import json, os
X = json.loads(os.environ.get("X", "null"))
SPECS = ["specs/dsv4/indexer_fp8.yaml", "specs/dsv4/indexer_fp4.yaml", "specs/indexer_bf16.yaml", "specs/dsv32_indexer.yaml"]
for path in SPECS:
    spec = validate_paths([Path(path)]).specs()[0]
    tunes = [dict(t, **X) if t else X for t in list(ring_tunes(spec, None)) + [{"kReaderWgTma": 0}]] if X else list(ring_tunes(spec, None)) + [{"kReaderWgTma": 0}]
    for tune in tunes:
        t = time.time()
        k = compile_rendered(render_reader(spec, tune=tune), "sm_90a", progress=None)
        print(f"{spec.name} {tune} regs={k.registers} spill={k.spill_bytes} text={digest(k.cubin, True)[:16]} "
              f"serialized={'serialized' in k.log} [{time.time()-t:.0f}s]", flush=True)
