"""kgen bench's read-side batches (kgen.reader_check.BATCH_SHAPES: equal, +-30 % and uniform lengths, next_n 1, 2
and 4) for each spec given, DeepGEMM's fp8_paged_mqa_logits beside the layout it reads, in the same process on the
same tensors; the JSON rewritten after every shape, so that a call cut short keeps what it measured.

    python bench/results/h100-2026-12-07-s33/batches.py OUT.json SPEC...
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from kgen import reader_check as RC
from kgen.timing import Timer, copy_bandwidth
from kgen.validate import validate_paths


def main(out: str, paths: list[str]) -> None:
    import torch

    specs = [s for s in validate_paths([Path(p) for p in paths]).specs() if RC.readable(s)]
    timer = Timer(torch)
    copy = copy_bandwidth(torch, timer)
    data = None
    for spec in specs:
        for shape in RC.BATCH_SHAPES:
            part = RC.bench_batches([spec], (shape,), timer=timer, copy=copy)
            if data is None:
                data = part
            else:
                data["results"] += part["results"]
            Path(out).write_text(json.dumps(data, indent=1))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
