"""Run the real kernel source on the CPU (tests/cpu_shim): render a variant, build the generic launch
emulator tests/cpu_shim/run.cc around it (optionally under AddressSanitizer + UBSan), launch it on
reference inputs through the kernel ABI (kgen.abi: the packed Params and the pointer map, exactly
what a GPU launch hands the driver) and compare the cache it wrote with the Torch reference."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from kgen.render import include_dirs, render_variant
from kgen.spec import Spec
from strategies import ROOT

SHIM = ROOT / "tests" / "cpu_shim"
SANITIZE = ["-g", "-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-fno-omit-frame-pointer"]


def build(spec: Spec, work: Path, *, sanitize: bool = False) -> Path:
    """The launch emulator of `spec`'s rendered kernel."""
    work.mkdir(parents=True, exist_ok=True)
    rv = render_variant(spec)
    for name in ("kernel.cu", "config.cuh"):  # kernel.cu includes "config.cuh" beside it
        (work / name).write_text(rv.files[f"{rv.uri}/{name}"])
    exe = work / ("run_asan" if sanitize else "run")
    r = subprocess.run(["g++", "-std=c++20", "-O1", "-ffp-contract=off", "-pthread", "-w",
                        *(SANITIZE if sanitize else []), "-I", str(SHIM), "-I", str(include_dirs()[0]),
                        f'-DKGEN_KERNEL_CU="{work / "kernel.cu"}"', f"-DKGEN_KERNEL={rv.name_expression}",
                        str(SHIM / "run.cc"), "-o", str(exe)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-4000:]
    return exe


def launch(spec: Spec, exe: Path, work: Path, n: int, seed: int = 0, inputs: dict | None = None) -> tuple[int, list]:
    """Launch `exe` over `n` reference tokens (or the given `inputs`, make_inputs' keys); (differing
    cache bytes, the first few). Fails with the emulator's stderr (ASan's report) if it does not exit 0."""
    import torch

    from kgen import inputs as I
    from kgen import reference as R
    from kgen.abi import NORM_ROPE_STORE, cpu_launch_files

    inp = I.make_inputs(spec, n, seed=seed) if inputs is None else inputs
    args = NORM_ROPE_STORE.check(spec, NORM_ROPE_STORE.arguments(spec, inp), require_cuda=False)
    d = work / f"n{n}"
    data = {k: t.contiguous().view(torch.uint8).numpy().tobytes() for k, t in args.tensors.items() if t is not None}
    grid = cpu_launch_files(args, d, data)
    env = dict(os.environ, ASAN_OPTIONS="detect_leaks=0:abort_on_error=0", UBSAN_OPTIONS="print_stacktrace=1")
    r = subprocess.run([str(exe), str(d), *grid], capture_output=True, text=True, env=env)
    assert r.returncode == 0, f"{spec.name} N={n}: exit {r.returncode}\n{r.stderr[-6000:]}"
    got = torch.frombuffer(bytearray((d / "cache.out").read_bytes()), dtype=torch.uint8)
    want = inp["cache"].clone()
    t = args.tensors
    R.norm_rope_store(spec, t["x"], t["weight"], t["bias"], t["freqs"], t["positions"], t["out_loc"], want)
    if spec.numerics == "fast":  # its stated tolerance (kgen.compare), not byte equality
        from kgen.compare import compare_caches

        c = compare_caches(spec, got.reshape(want.shape), want, out_loc=t["out_loc"], tokens=n)
        return (0, []) if c.ok else (c.total_bytes - c.equal_bytes, [c.reason, *c.examples])
    diff = (got.reshape(want.shape) != want).nonzero()
    return len(diff), diff[:8].tolist()
