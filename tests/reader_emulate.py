"""Run the real indexer_logits source on the CPU (tests/reader_shim): render a readable variant, build
the launch emulator around it, launch it through the kernel ABI (kgen.abi: the packed Params and the
pointer map a GPU launch hands the driver) and return the logits it wrote."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from kgen.render import include_dirs, render_reader
from kgen.spec import Spec
from strategies import ROOT

SHIM = ROOT / "tests" / "reader_shim"
WRITER_SHIM = ROOT / "tests" / "cpu_shim"


def build(spec: Spec, work: Path, *, sanitize: bool = False, tune: dict | None = None, wgmma: bool = False) -> Path:
    """`wgmma`: the sm_90a path (KGEN_CPU_SHIM_WGMMA: its primitives emulated), else the mma.sync path."""
    work.mkdir(parents=True, exist_ok=True)
    rv = render_reader(spec, tune=tune)
    for rel, text in rv.files.items():
        (work / Path(rel).name).write_text(text)
    exe = work / "run_reader"
    flags = ["-g", "-fsanitize=address,undefined", "-fno-sanitize-recover=all"] if sanitize else []
    flags += ["-DKGEN_CPU_SHIM_WGMMA"] if wgmma else []
    r = subprocess.run(["g++", "-std=c++20", "-O1", "-ffp-contract=off", "-pthread", "-w", *flags,
                        "-include", str(SHIM / "reader_shim.h"), "-I", str(SHIM), "-I", str(WRITER_SHIM),
                        "-I", str(include_dirs()[0]), f'-DKGEN_KERNEL_CU="{work / "indexer_logits.cu"}"',
                        f"-DKGEN_KERNEL={rv.name_expression}", str(SHIM / "run_reader.cc"), "-o", str(exe)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-4000:]
    return exe


def launch(spec: Spec, exe: Path, work: Path, args: tuple, *, sm_count: int = 4, check_bounds: bool = True,
           wgmma: bool = False, tune: dict | None = None):
    """The kernel's logits for `args` (kgen.reader_check.make_case's tuple, CPU tensors); `wgmma` and
    `tune` as the executable was built (the launch shape of that path and tuning)."""
    import torch

    from kgen import reader_layout as RL
    from kgen import reader_plan as RP
    from kgen.abi import write_launch_files
    from kgen.ops import reader as ops_reader

    a = ops_reader.check(spec, *args, require_cuda=False, check_bounds=check_bounds)
    grid, threads, smem, _ = RP.reader_launch(spec, a.dims["B"], a.dims["next_n"], a.dims["max_seq_len"], sm_count,
                                             wgmma=wgmma, tune=tune)
    data = {k: t.contiguous().view(torch.uint8).numpy().tobytes() for k, t in a.tensors.items() if t is not None}
    d = work / "launch"
    write_launch_files(a, d, data)
    if wgmma and RL.reader_wg_tma(a.layout, tune):
        emulated_cache_map(a, d)
    env = dict(os.environ, ASAN_OPTIONS="detect_leaks=0", UBSAN_OPTIONS="print_stacktrace=1")
    r = subprocess.run([str(exe), str(d), *map(str, grid), str(threads), str(smem)], capture_output=True, text=True,
                       env=env, timeout=600)
    assert r.returncode == 0, f"{spec.name}: exit {r.returncode}\n{r.stderr[-6000:]}"
    out = torch.frombuffer(bytearray((d / "logits.out").read_bytes()), dtype=torch.float32)
    return out.reshape(a.tensors["logits"].shape), grid


def emulated_cache_map(a, d: Path) -> None:
    """The TMA variant's tensor map as tests/reader_shim reads it (wg_emulation::TensorMap: the cache's
    address, then the map's dims, byte strides and box as 64-bit words, innermost first) in place of the
    driver's encoding: the geometry kgen.reader_layout.cache_map_geometry gives the driver, written into
    params.bin, the cache's address patched in by the runner's loader (a second line of pointers.txt naming
    the cache)."""
    import struct

    from kgen.reader_layout import cache_map_geometry

    g = cache_map_geometry(a.layout, int(a.tensors["cache"].shape[0]))
    slot = next(s for s in a.abi.slots if s.field.name == "cache_map")
    words = struct.pack("<Q11Q", 0, *g.dims, *g.strides, *g.box)
    params = bytearray((d / "params.bin").read_bytes())
    params[slot.offset:slot.offset + len(words)] = words
    (d / "params.bin").write_bytes(bytes(params))
    with (d / "pointers.txt").open("a") as f:
        f.write(f"{slot.offset} cache 0\n")
