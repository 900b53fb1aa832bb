"""Launch one variant's kernel a few times at N tokens, for `ncu` (`scripts/device_run.sh profile`).

    python3 bench/profile_kernel.py specs/dsv4/indexer_fp8.yaml --tokens 1048576

Not a benchmark (kgen bench is): it only gives the profiler kgen bench's production-like inputs
(kgen.bench.bench_inputs: a 2^20-row freqs table, random positions, every slot of ceil(N / P) pages
written) and launches the kernel `--launches` times.
"""

from __future__ import annotations

import argparse
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("spec", type=Path)
    ap.add_argument("--tokens", type=int, default=1 << 20)
    ap.add_argument("--launches", type=int, default=3)
    args = ap.parse_args()

    import torch

    from kgen import bench, ops
    from kgen.validate import validate_or_raise

    spec = validate_or_raise(args.spec).variants[0].spec
    launch = ops.prepare(spec, *bench.bench_inputs(spec, args.tokens, seed=1))
    for _ in range(args.launches):
        launch()
    torch.cuda.synchronize()
    print(f"{spec.name}: {args.launches} launches at N={args.tokens}")


if __name__ == "__main__":
    main()
