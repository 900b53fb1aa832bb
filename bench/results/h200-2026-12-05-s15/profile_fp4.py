"""One shape of the fp4 reader (and fp8's beside it) for ncu: 32 x 64K keys, equal lengths, next_n 1, the shipped
cubin, three launches each (ncu -s skips the warm-up ones).

    ncu -k regex:indexer_logits -s 2 -c 1 ... python bench/results/h200-2026-12-05-s15/profile_fp4.py fp4
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

from kgen import reader_check as rc
from kgen.validate import validate_paths


def main() -> None:
    spec, = validate_paths([Path(f"specs/dsv4/indexer_{sys.argv[1]}.yaml")]).specs()
    args = rc.make_case(spec, [65536] * 32, next_n=1, seed=0, extra_pages=0, max_seq_len=65536)
    launch, _ = rc.launcher(spec, args, None)
    for _ in range(3):
        launch()
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
