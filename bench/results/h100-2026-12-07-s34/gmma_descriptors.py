"""What each wgmma's operand setup costs in the keys-in-registers cubins' SASS (NVRTC on the CPU, nvdisasm): per
cubin of the spec's ring_tunes that holds its key tiles in registers, the instructions between the second and the
third wgmma of the first token (the next k-step's q descriptor), and whether they run on the uniform datapath.

    NVDISASM=/tmp/tools/nvidia/cu13/bin/nvdisasm PYTHONPATH=$PWD:$PWD/scripts \\
      python bench/results/h100-2026-12-07-s34/gmma_descriptors.py specs/dsv4/indexer_fp8.yaml \
      specs/dsv4/indexer_fp4.yaml
"""

from __future__ import annotations

import sys
from pathlib import Path

from reader_sass import disassemble, sass

from kgen.compile import compile_rendered
from kgen.reader_plan import ring_tunes
from kgen.render import render_reader
from kgen.validate import validate_paths


def main(paths: list[str]) -> None:
    for path in paths:
        spec = validate_paths([Path(path)]).specs()[0]
        for tune in ring_tunes(spec, None):
            if not (tune or {}).get("kReaderWgKeyRegisters"):
                continue
            ops = [o for o in sass(disassemble(compile_rendered(render_reader(spec, tune=tune), "sm_90a",
                                                                progress=None).cubin)) if o != "NOP"]
            at = [i for i, o in enumerate(ops) if "GMMA" in o.split(".")[0]]
            between = ops[at[1] + 1:at[2]]
            print(f"{spec.name} {tune}: {len(between)} between wgmma 2 and 3: {' '.join(between)}")


if __name__ == "__main__":
    main(sys.argv[1:])
