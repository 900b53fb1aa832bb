"""Run the real indexer_topk source on the CPU (tests/topk_shim over tests/reader_shim): render a top-k kernel of a
readable variant (indexer_topk, or indexer_topk_slots), build the launch emulator around it
(tests/topk_shim/run_topk.cc: a cluster's CTAs at once), launch it through the kernel ABI (kgen.abi: the packed
Params and pointer map a GPU launch hands the driver) and return the indices (or slots) it wrote."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from kgen.render import include_dirs, render_topk
from kgen.spec import Spec
from strategies import ROOT

SHIM = ROOT / "tests" / "topk_shim"
READER_SHIM = ROOT / "tests" / "reader_shim"
WRITER_SHIM = ROOT / "tests" / "cpu_shim"


def build(spec: Spec, work: Path, *, sanitize: bool = True, program: str = "run_topk", kernel: str = "indexer_topk"
          ) -> Path:
    """The executable of tests/topk_shim/PROGRAM.cc around the rendered top-k kernel `kernel` of `spec` (default: the
    launch emulator of indexer_topk)."""
    from kgen.abi import KERNELS

    work.mkdir(parents=True, exist_ok=True)
    rv = render_topk(spec, kabi=KERNELS[kernel])
    for rel, text in rv.files.items():
        (work / Path(rel).name).write_text(text)
    exe = work / program
    flags = ["-g", "-fsanitize=address,undefined", "-fno-sanitize-recover=all"] if sanitize else []
    r = subprocess.run(["g++", "-std=c++20", "-O1", "-pthread", "-w", *flags,
                        "-include", str(READER_SHIM / "reader_shim.h"), "-include", str(SHIM / "topk_shim.h"),
                        "-I", str(READER_SHIM), "-I", str(WRITER_SHIM), "-I", str(include_dirs()[0]),
                        f'-DKGEN_KERNEL_CU="{work / (kernel + ".cu")}"', f"-DKGEN_KERNEL={rv.name_expression}",
                        str(SHIM / f"{program}.cc"), "-o", str(exe)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-4000:]
    return exe


def launch(spec: Spec, exe: Path, work: Path, logits, seq_lens, k: int, cluster: int | None = None,
           shared_limit: int | None = None, block_table=None):
    """The kernel's int32 [rows, k] indices for fp32 `logits` [B * next_n, max_seq_len] (CPU tensors), on
    `cluster` CTAs per row (default: the plan's for the row length, kgen.topk_plan.topk_cluster), with the shared
    memory the plan asks for on a device whose blocks hold `shared_limit` bytes (default: sm_90's). With a
    `block_table` (an `exe` built for indexer_topk_slots): the slots it wrote."""
    import torch

    from kgen.abi import INDEXER_TOPK, INDEXER_TOPK_SLOTS, write_launch_files
    from kgen.topk_plan import topk_grid, topk_shared_bytes

    indices = torch.empty((logits.shape[0], k), dtype=torch.int32)
    if block_table is None:
        a = INDEXER_TOPK.check(spec, {"logits": logits, "seq_lens": seq_lens, "indices": indices}, require_cuda=False)
    else:
        a = INDEXER_TOPK_SLOTS.check(spec, {"logits": logits, "seq_lens": seq_lens, "block_table": block_table,
                                            "slots": indices}, require_cuda=False)
    msl = int(logits.shape[1])
    grid, threads = topk_grid(int(logits.shape[0]), msl, cluster)
    shared = topk_shared_bytes(msl, grid[0], **({} if shared_limit is None else {"shared_limit": shared_limit}))
    data = {n: t.contiguous().view(torch.uint8).numpy().tobytes() for n, t in a.tensors.items() if t is not None}
    d = work / "launch"
    write_launch_files(a, d, data)
    env = dict(os.environ, ASAN_OPTIONS="detect_leaks=0", UBSAN_OPTIONS="print_stacktrace=1")
    r = subprocess.run([str(exe), str(d), *map(str, grid), str(threads), str(shared)],
                       capture_output=True, text=True, env=env, timeout=900)
    assert r.returncode == 0, f"{spec.name}: exit {r.returncode}\n{r.stderr[-6000:]}"
    out = d / ("indices.out" if block_table is None else "slots.out")
    return torch.frombuffer(bytearray(out.read_bytes()), dtype=torch.int32).reshape(indices.shape)
