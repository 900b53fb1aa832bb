"""Is SGLang's top-k the fastest one an engine ships that builds here? FlashInfer 0.7.4's native top-k beside kgen's
top-k kernel and SGLang 0.5.23's, one process, the same logits (kgen's reader's, fp8 keys), CUDA graphs and cold.

    python bench/results/h100-2026-12-07-s31/flashinfer_topk.py prepare .peers/flashinfer_topk WHEEL   # here
    python bench/results/h100-2026-12-07-s31/flashinfer_topk.py run .peers/flashinfer_topk --json OUT   # GPU

`prepare` takes FlashInfer's top-k header and the headers it includes (followed through `#include "..."`) from the
flashinfer-python wheel (`pip download --no-deps flashinfer-python==0.7.4`) into KIT/include, with KIT.json (the
wheel's name and sha256); nothing of it enters the project. `run` compiles LAUNCHER (ours: one extern "C"
function around FlashInfer's `sampling::TopKRaggedTransformDispatch<float, int>`, the entry its
`top_k_ragged_transform` calls for the native kernels) with nvcc for the device, then per shape times:
  kgen_select     kgen's top-k kernel alone (kgen.ops.topk.prepare_select)
  sglang_topk     SGLang's TopKKernel<true>::transform_paged, raw indices, its plan made outside the timing
  flashinfer_topk FlashInfer's native top-k over each row's visible keys (offsets 0: raw indices), its own choice
                  between FilteredTopK (one CTA a row) and the multi-CTA radix top-k, a zeroed 1 MiB row-state
                  buffer as FlashInfer's Python keeps one per stream (its last CTA zeroes it again)
  torch.topk      torch.topk(logits, k)
and checks every set against torch.topk's (kgen.topk_bench.set_check). Not measured: FlashInfer's CUB backend
(cub::DeviceBatchedTopK from the CCCL it bundles), which its Python picks for fp32 at rows <= 32 x >= 32K keys and
rows <= 64 x >= 64K eager, rows < 128 x >= 32K keys under graph capture; nor its sm_100 cluster kernel.
"""

from __future__ import annotations

import argparse
import ctypes
import hashlib
import json
import re
import subprocess
import sys
import time
import zipfile
from pathlib import Path

INCLUDE = "flashinfer/data/include/"  # in the wheel
ROOTS = ("flashinfer/topk.cuh", "flashinfer/math.cuh")
WHEEL_VERSION = "0.7.4"
LAUNCHER = r"""
#include <flashinfer/math.cuh>  // topk.cuh calls math:: and leaves the include to its includer
#include <flashinfer/topk.cuh>

// FlashInfer's native top-k with its ragged transform: row r's top k of scores[r, 0:lengths[r]] plus offsets[r],
// -1 past a short row's keys. Returns the cudaError_t.
extern "C" int kgen_fi_topk_ragged(float* scores, int* out, const int* offsets, int* lengths, unsigned rows,
                                   unsigned k, unsigned max_len, void* row_states, void* stream) {
  using namespace flashinfer::sampling;
  return static_cast<int>(TopKRaggedTransformDispatch<float, int>(
      scores, out, offsets, lengths, nullptr, rows, k, max_len, static_cast<RadixRowState*>(row_states),
      /*deterministic=*/false, TopKTieBreak::None, static_cast<cudaStream_t>(stream), /*dsa_graph_safe=*/false));
}
extern "C" const char* kgen_fi_error(int e) { return cudaGetErrorString(static_cast<cudaError_t>(e)); }
"""
ROW_STATES_BYTES = 1 << 20  # FlashInfer's _ROW_STATES_NBYTES
STEPS = (("equal", 1), ("pm30", 2))  # (lengths, next_n), as kgen bench's top-k rows
SHAPES = (tuple((b, keys, dist, n, 512) for dist, n in STEPS for b in (1, 8, 32, 64) for keys in (4096, 65536, 262144))
          + tuple((b, keys, dist, n, 2048) for dist, n in STEPS for b in (1, 8) for keys in (65536, 262144)))


def prepare(kit: Path, wheel: Path) -> None:
    files: dict[str, bytes] = {}
    with zipfile.ZipFile(wheel) as z:
        todo = list(ROOTS)
        while todo:
            name = todo.pop()
            if name in files:
                continue
            files[name] = z.read(INCLUDE + name)
            for inc in re.findall(rb'#include\s+"([^"]+)"', files[name]):
                todo.append(str(Path(name).parent / inc.decode()))
            todo += [m.decode() for m in re.findall(rb"#include\s+<(flashinfer/[^>]+)>", files[name])]
    for name, data in files.items():
        (kit / "include" / name).parent.mkdir(parents=True, exist_ok=True)
        (kit / "include" / name).write_bytes(data)
    record = {"wheel": wheel.name, "sha256": hashlib.sha256(wheel.read_bytes()).hexdigest(), "files": sorted(files)}
    (kit / "KIT.json").write_text(json.dumps(record, indent=1) + "\n")
    print(f"{len(files)} headers from {wheel.name} into {kit}")


def build(kit: Path, arch: str, cache: Path) -> Path:
    from kgen.peer_sglang import nvcc

    nvcc_path = nvcc()
    if nvcc_path is None:
        raise RuntimeError("no nvcc")
    src = LAUNCHER.encode() + b"".join((kit / "include" / n).read_bytes() for n in
                                       json.loads((kit / "KIT.json").read_text())["files"])
    nvcc_version = subprocess.run([nvcc_path, "--version"], capture_output=True, text=True).stdout
    key = hashlib.sha256(src + arch.encode() + nvcc_version.encode()).hexdigest()[:16]
    so = cache / f"flashinfer_topk-{arch}-{key}.so"
    if not so.exists():
        cache.mkdir(parents=True, exist_ok=True)
        cu = cache / f"flashinfer_topk-{key}.cu"
        cu.write_text(LAUNCHER)
        cmd = [nvcc_path, "-std=c++17", "-O3", f"-arch={arch}", "-shared", "-Xcompiler", "-fPIC",
               f"-I{kit / 'include'}", str(cu), "-o", str(so) + ".tmp"]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode:
            raise RuntimeError(f"nvcc failed: {r.stderr[-2000:]}")
        Path(str(so) + ".tmp").rename(so)
    return so


def run(kit: Path, out_json: Path | None) -> None:
    import torch

    from kgen import peer_sglang_topk as P
    from kgen import reader_check as RC
    from kgen.ops.topk import prepare_select
    from kgen.resolve import resolve_spec
    from kgen.score import visible_lengths
    from kgen.timing import Timer
    from kgen.topk_bench import TIMINGS, set_check

    major, minor = torch.cuda.get_device_capability()
    arch = f"sm_{major}{minor}{'a' if major >= 9 else ''}"
    t0 = time.perf_counter()
    lib = ctypes.CDLL(str(build(kit, arch, Path("/tmp/kcache/_peers"))))
    lib.kgen_fi_error.restype = ctypes.c_char_p
    build_s = time.perf_counter() - t0
    spec = resolve_spec("specs/dsv4.yaml::dsv4_indexer_fp8")
    sglang = P.Peer.load()
    timer = Timer(torch)
    device = torch.cuda.current_device()
    row_states = torch.zeros(ROW_STATES_BYTES, dtype=torch.uint8, device="cuda")
    results = []
    for batch, keys, dist, next_n, k in SHAPES:
        lens = RC.batch_lens(batch, keys, dist, 0, next_n)
        msl = max(lens)
        args = RC.make_case(spec, lens, next_n=next_n, seed=0, extra_pages=0, max_seq_len=msl)
        seq_lens = args[4]
        width = P.aligned_width(msl)  # SGLang reads 16-B strided rows: the reader writes them so (-inf past msl)
        reader, logits = RC.launcher(spec, (*args[:-1], width))
        reader()
        rows_n = logits.shape[0]
        vis = visible_lengths(seq_lens.cpu(), next_n).to(torch.int32).cuda()
        kk = min(k, msl)
        select, select_idx = prepare_select(spec, logits, seq_lens, k)  # the columns past msl: no row sees them
        plan, sg_select, sg_idx, meta = sglang.prepare(P.padded_scores(torch, logits), vis, k)
        meta.fill_(-1)
        plan()
        torch.cuda.synchronize()
        if int(meta[0, 1]) == -1:
            meta.zero_()  # no plan at this row count: what SGLang's top-k reads then
        fi_out = torch.empty(rows_n, k, dtype=torch.int32, device="cuda")
        offsets = torch.zeros(rows_n, dtype=torch.int32, device="cuda")

        def flashinfer(out=fi_out, scores=logits, offsets=offsets, vis=vis, rows_n=rows_n, k=k, width=width):
            e = lib.kgen_fi_topk_ragged(ctypes.c_void_p(scores.data_ptr()), ctypes.c_void_p(out.data_ptr()),
                                        ctypes.c_void_p(offsets.data_ptr()), ctypes.c_void_p(vis.data_ptr()),
                                        rows_n, k, width, ctypes.c_void_p(row_states.data_ptr()),
                                        ctypes.c_void_p(torch._C._cuda_getCurrentRawStream(device)))
            if e:
                raise RuntimeError(f"FlashInfer's top-k: {lib.kgen_fi_error(e).decode()}")

        view = logits[:, :msl]
        rows = {"kgen_select": select, "sglang_topk": sg_select, "flashinfer_topk": flashinfer,
                "torch.topk": lambda view=view, kk=kk: torch.topk(view, kk, dim=1)}
        e: dict = {"batch": batch, "keys": keys, "lengths": dist, "next_n": next_n, "k": k, "rows": rows_n,
                   "max_seq_len": msl, "logits_width": width}
        for how, kw in TIMINGS:
            m = timer.cold if how == "cold" else timer.warm
            e[how] = {}
            for name, fn in rows.items():
                r = m(fn, **kw)
                e[how][name] = r["ms"] * 1e3
                if "graph_error" in r:  # timed in a loop instead
                    e.setdefault("graph_errors", {})[name] = r["graph_error"]
        want = torch.topk(view, kk, dim=1)
        want_vals, want_idx = want.values.cpu(), want.indices.cpu().to(torch.int32)
        view_cpu, vis_cpu = view.cpu(), vis.cpu()
        for name, fn, got in (("kgen_select", select, select_idx), ("sglang_topk", sg_select, sg_idx),
                              ("flashinfer_topk", flashinfer, fi_out)):
            got.fill_(-2)  # poisoned: every slot must be written
            if name == "sglang_topk":
                plan()  # its plan before its top-k, as SGLang runs them (a plan it did not write stays zero)
                torch.cuda.synchronize()
            fn()
            torch.cuda.synchronize()
            c = set_check(got.cpu(), want_vals, want_idx, view_cpu, vis_cpu)
            e[f"check_{name}"] = {key: c[key] for key in ("rows_checked", "rows_differing",
                                                          "rows_differing_beyond_ties", "short_rows_wrong")}
        g = e["graph"]
        print(f"{batch:3d} x {keys:6d} {dist:5s} n={next_n} k={k:4d} | graph us: "
              + ", ".join(f"{n} {g[n]:.1f}" for n in rows) + " | beyond ties: "
              + ", ".join(f"{n} {e['check_' + n]['rows_differing_beyond_ties']}" for n in rows if n != "torch.topk"),
              flush=True)
        results.append(e)
        if out_json:
            out_json.write_text(json.dumps({"device": torch.cuda.get_device_name(), "arch": arch,
                                            "kit": json.loads((kit / "KIT.json").read_text()),
                                            "build_s": round(build_s, 1), "sglang": sglang.record(),
                                            "results": results}, indent=1) + "\n")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("what", choices=("prepare", "run"))
    ap.add_argument("kit", type=Path)
    ap.add_argument("wheel", type=Path, nargs="?")
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    if a.what == "prepare":
        if a.wheel is None:
            ap.error("prepare takes the flashinfer-python wheel")
        prepare(a.kit, a.wheel)
    else:
        run(a.kit, a.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
