"""SGLang's DeepSeek-V4 top-k (`topk_v2.cuh`: `TopKKernel<true>::plan` and `::transform_paged`), the top-k
peer of `indexer_topk` in the benchmark: built from a kit outside the project and called on torch tensors.

The kit (`python scripts/sglang_topk_peer.py prepare .peers/sglang_topk`) holds SGLang's two JIT sources
(KIT_SOURCES: the top-k and its occupancy probe) with the headers they include, taken from the released wheel
as kgen.peer_sglang's kit is, and tvm-ffi's runtime library (KIT_LIB), which SGLang's host code calls for the
stream (`TVMFFIEnvGetStream`). None of it enters the project.

The build follows SGLang's `_jit_topk_v2_module`: first the occupancy probe (SGLang's `cluster_probe.cuh`)
answers how many clusters of 8 blocks at 2 per SM and of 16 at 1 per SM fit on this device (0 where none
does); those become `-DSGL_TOPK_V2_MAX_C8_OCC2` / `-DSGL_TOPK_V2_MAX_C16_OCC1`, and the top-k is compiled
with SGLang's JIT flags (kgen.peer_sglang.NVCC_FLAGS, `-DSGL_CUDA_ARCH`) into
`$KGEN_CACHE_DIR/_peers/sglang_topk-<arch>-<hash16>.so`. SGLang exports its host functions through tvm-ffi's
packed-function ABI; kgen's LAUNCHER instead exports two extern "C" functions that wrap raw pointers in
DLTensors, hand them to SGLang's functions as TensorViews, set torch's stream as tvm-ffi's current one, and
return SGLang's error text rather than throw. So no tvm-ffi Python package is needed, only its library.

`Peer.load()` returns the peer, or raises PeerAbsent with the reason (no kit, no nvcc, no GPU, the build
failed): the bench records `absent: reason` then.
"""

from __future__ import annotations

import ctypes
from pathlib import Path

from . import peer_sglang as S
from .peer_sglang import PeerAbsent

__all__ = ["Peer", "PeerAbsent", "build", "kit_dir", "kit_problem", "probe"]

NAME = "sglang.topk_v2"
KIT_ENV = "KGEN_SGLANG_TOPK_KIT"
KIT_DEFAULT = Path(".peers") / "sglang_topk"
KIT_TOPK = "csrc/deepseek_v4/topk_v2.cuh"  # relative to the kit (and to sglang/kernels/jit/ in the wheel)
KIT_PROBE = "csrc/occupancy/cluster_probe.cuh"
KIT_SOURCES = (KIT_TOPK, KIT_PROBE)
KIT_EXTRA_HEADERS = ("tvm/ffi/extra/c_env_api.h",)  # the launcher's own include (tvm-ffi's stream API)
KIT_LIB = "lib/libtvm_ffi.so"
KIT_LIB_MEMBER = "tvm_ffi/lib/libtvm_ffi.so"  # in the apache-tvm-ffi wheel
KIT_INCLUDE = S.KIT_INCLUDE
KIT_RECORD = S.KIT_RECORD
ARCH = S.ARCH
# The probes SGLang makes before compiling (cluster size, blocks per SM) and the macro each one sets.
CLUSTER_PROBES = ((8, 2, "SGL_TOPK_V2_MAX_C8_OCC2"), (16, 1, "SGL_TOPK_V2_MAX_C16_OCC1"))
# Macros for a build without the device (the CPU compile check): topk_v2.cuh's own H200 fallback for the
# 8-block pool and a positive 16-block count, so that both cluster kernels are instantiated.
OFFLINE_DEFINES = {"SGL_TOPK_V2_MAX_C8_OCC2": 30, "SGL_TOPK_V2_MAX_C16_OCC1": 8}
MAX_TOPK = 2048  # topk_v2's kMaxTopK
SCORE_ALIGN = 4  # its rows are read 16 bytes at a time: the score stride is a multiple of 4 floats
PLAN_COLS = 2  # its plan: int32 [rows + 1, 2] (the threshold and count, then one (row, length) per routed row)
PAGE_SIZE = 1  # no page table: the raw indices (topk_v2 wants a power of two; with no table it is unused)
USE_PDL = True  # SGLang instantiates TopKKernel<is_arch_support_pdl()>: true on sm_90
BUILD_TIMEOUT_S = 400

PROBE_LAUNCHER = r"""
#include <cstdint>
#include <exception>
#include <string>

#include "cluster_probe.cuh"

namespace {
thread_local std::string g_error;
}

extern "C" int kgen_sglang_cluster_probe(uint32_t cluster_size, uint32_t blocks_per_sm, int32_t* out) {
  try {
    *out = static_cast<int32_t>(sglang::get_max_active_clusters(cluster_size, blocks_per_sm));
    return 0;
  } catch (const std::exception& e) {
    g_error = e.what();
    return 1;
  }
}

extern "C" const char* kgen_sglang_probe_error() { return g_error.c_str(); }
"""

LAUNCHER = r"""
#include <cstdint>
#include <exception>
#include <string>

#include <tvm/ffi/extra/c_env_api.h>

#include "topk_v2.cuh"

namespace {
thread_local std::string g_error;
using Kernel = sglang::TopKKernel<KGEN_PEER_PDL>;

DLTensor view(void* data, DLDataType dtype, int32_t device, int32_t ndim, int64_t* shape, int64_t* strides) {
  DLTensor t = {};
  t.data = data;
  t.device = DLDevice{kDLCUDA, device};
  t.ndim = ndim;
  t.dtype = dtype;
  t.shape = shape;
  t.strides = strides;
  return t;
}

constexpr DLDataType kI32 = {kDLInt, 32, 1};
constexpr DLDataType kF32 = {kDLFloat, 32, 1};

template <typename F>
int guarded(int32_t device, void* stream, F&& f) {
  try {
    if (TVMFFIEnvSetStream(kDLCUDA, device, stream, nullptr) != 0) {
      g_error = "TVMFFIEnvSetStream failed";
      return 2;
    }
    f();
    return 0;
  } catch (const std::exception& e) {
    g_error = e.what();
    return 1;
  }
}
}  // namespace

// SGLang's plan over int32 seq_lens [rows] into int32 metadata [rows + 1, 2].
extern "C" int kgen_sglang_topk_plan(int32_t* seq_lens, int64_t rows, int32_t* metadata, int32_t threshold,
                                     int32_t device, void* stream) {
  int64_t s_shape[1] = {rows}, s_stride[1] = {1};
  int64_t m_shape[2] = {rows + 1, 2}, m_stride[2] = {2, 1};
  DLTensor s = view(seq_lens, kI32, device, 1, s_shape, s_stride);
  DLTensor m = view(metadata, kI32, device, 2, m_shape, m_stride);
  return guarded(device, stream, [&] { Kernel::plan(&s, &m, threshold); });
}

// SGLang's transform_paged over scores fp32 [rows, cols] (row stride `stride`) into out int32 [rows, k], -1 past a
// row's length: with a page table (int32 [rows, pages], one row per query row, as the engine expands it) each
// selected raw index i as page_table[row, i >> log2(page_size)] * page_size + i % page_size; without one (null) the
// raw indices.
extern "C" int kgen_sglang_topk_paged(float* scores, int64_t rows, int64_t cols, int64_t stride, int32_t* seq_lens,
                                      int32_t* page_table, int64_t pages, int64_t page_size, int32_t* out, int64_t k,
                                      int32_t* metadata, int32_t device, void* stream) {
  int64_t x_shape[2] = {rows, cols}, x_stride[2] = {stride, 1};
  int64_t s_shape[1] = {rows}, s_stride[1] = {1};
  int64_t p_shape[2] = {rows, pages}, p_stride[2] = {pages, 1};
  int64_t o_shape[2] = {rows, k}, o_stride[2] = {k, 1};
  int64_t m_shape[2] = {rows + 1, 2}, m_stride[2] = {2, 1};
  DLTensor x = view(scores, kF32, device, 2, x_shape, x_stride);
  DLTensor s = view(seq_lens, kI32, device, 1, s_shape, s_stride);
  DLTensor t = view(page_table, kI32, device, 2, p_shape, p_stride);
  DLTensor o = view(out, kI32, device, 2, o_shape, o_stride);
  DLTensor m = view(metadata, kI32, device, 2, m_shape, m_stride);
  using Table = tvm::ffi::Optional<tvm::ffi::TensorView>;
  return guarded(device, stream, [&] {
    Kernel::transform_paged(&x, &s, page_table == nullptr ? Table() : Table(tvm::ffi::TensorView(&t)), &o,
                            static_cast<int>(page_size), &m, Table());
  });
}

// The raw top-k indices (no page table).
extern "C" int kgen_sglang_topk(float* scores, int64_t rows, int64_t cols, int64_t stride, int32_t* seq_lens,
                                int32_t* out, int64_t k, int32_t* metadata, int32_t device, void* stream) {
  return kgen_sglang_topk_paged(scores, rows, cols, stride, seq_lens, nullptr, 0, KGEN_PEER_PAGE_SIZE, out, k,
                                metadata, device, stream);
}

extern "C" const char* kgen_sglang_topk_error() { return g_error.c_str(); }
"""


def kit_dir() -> Path:
    """$KGEN_SGLANG_TOPK_KIT, else .peers/sglang_topk in the working directory, else in the checkout."""
    return S.find_kit(KIT_ENV, KIT_DEFAULT)


def kit_problem(kit: Path) -> str | None:
    """None when `kit` holds both sources, their include tree and tvm-ffi's library, else what is missing."""
    if not (kit / KIT_TOPK).is_file():
        return f"no SGLang top-k kit at {kit} (python scripts/sglang_topk_peer.py prepare {KIT_DEFAULT})"
    for rel in (KIT_PROBE, f"{KIT_INCLUDE}/sgl_kernel/deepseek_v4/topk_impl.cuh",
                f"{KIT_INCLUDE}/tvm/ffi/container/tensor.h", f"{KIT_INCLUDE}/{KIT_EXTRA_HEADERS[0]}",
                f"{KIT_INCLUDE}/dlpack/dlpack.h", KIT_LIB):
        if not (kit / rel).is_file():
            return f"the SGLang top-k kit at {kit} lacks {rel}"
    return None


def compile_command(compiler: str, kit: Path, source: Path, target: Path, arch: str = ARCH,
                    defines: dict[str, int] | None = None) -> list[str]:
    """nvcc with SGLang's JIT flags for `source` (which includes one of KIT_SOURCES by its file name), linked
    against the kit's tvm-ffi library (found beside it at load time through the rpath)."""
    base = S.compile_command(compiler, kit, source, target, arch)
    lib = kit / KIT_LIB
    extra = [f"-D{k}={v}" for k, v in sorted((defines or {}).items())]
    extra += [f"-I{kit / src.rsplit('/', 1)[0]}" for src in KIT_SOURCES]
    extra += [f"-DKGEN_PEER_PAGE_SIZE={PAGE_SIZE}", f"-DKGEN_PEER_PDL={'true' if USE_PDL else 'false'}"]
    link = [f"-L{lib.parent}", "-ltvm_ffi", "-Xlinker", f"-rpath={lib.parent.resolve()}"]
    cut = base.index(str(source))
    return base[:cut] + extra + [str(source)] + link + base[cut + 1:]


def _compile(name: str, text: str, kit: Path, arch: str, defines: dict[str, int], out_dir: Path | None) -> Path:
    """`text` compiled against `kit` into the cache (kgen.peer_sglang.compile_cached)."""
    why = kit_problem(kit)
    if why:
        raise PeerAbsent(why)
    return S.compile_cached(name, text, kit, lambda cc, k, src, so: compile_command(cc, k, src, so, arch, defines),
                            key_kit=kit.resolve(),  # the library's rpath names the kit's place
                            arch=arch, out_dir=out_dir, timeout=BUILD_TIMEOUT_S)


def build_probe(kit: Path | None = None, *, arch: str = ARCH, out_dir: Path | None = None) -> Path:
    """SGLang's occupancy probe behind kgen's extern "C" wrapper (PROBE_LAUNCHER), compiled and cached."""
    return _compile("sglang_probe", PROBE_LAUNCHER, Path(kit) if kit else kit_dir(), arch, {}, out_dir)


def _load_tvm_ffi(kit: Path) -> None:
    """tvm-ffi's library into the process first (RTLD_GLOBAL), should the rpath not reach it."""
    try:
        ctypes.CDLL(str((kit / KIT_LIB).resolve()), mode=ctypes.RTLD_GLOBAL)
    except OSError as e:
        raise PeerAbsent(f"tvm-ffi's library does not load: {e}") from e


def probe(kit: Path | None = None, *, out_dir: Path | None = None) -> dict[str, int]:
    """{macro: clusters} for CLUSTER_PROBES on the current device, as SGLang computes them (0 where the
    driver schedules none). Needs the GPU; raises PeerAbsent when the probe cannot run."""
    kit = Path(kit) if kit else kit_dir()
    path = build_probe(kit, out_dir=out_dir)
    _load_tvm_ffi(kit)
    try:
        lib = ctypes.CDLL(str(path))
    except OSError as e:
        raise PeerAbsent(f"the occupancy probe does not load: {e}") from e
    lib.kgen_sglang_cluster_probe.argtypes = [ctypes.c_uint32, ctypes.c_uint32, ctypes.POINTER(ctypes.c_int32)]
    lib.kgen_sglang_probe_error.restype = ctypes.c_char_p
    out: dict[str, int] = {}
    for size, per_sm, macro in CLUSTER_PROBES:
        n = ctypes.c_int32(0)
        if lib.kgen_sglang_cluster_probe(size, per_sm, ctypes.byref(n)):
            raise PeerAbsent(f"SGLang's occupancy probe ({size} x {per_sm}) failed: "
                             f"{lib.kgen_sglang_probe_error().decode(errors='replace')}")
        out[macro] = max(int(n.value), 0)
    return out


def build(kit: Path | None = None, *, defines: dict[str, int], arch: str = ARCH, out_dir: Path | None = None) -> Path:
    """kgen's launcher around SGLang's top-k, compiled with the probe's `defines` and cached. Raises PeerAbsent."""
    missing = [m for _, _, m in CLUSTER_PROBES if m not in defines]
    if missing:
        raise ValueError(f"the top-k build needs the occupancy macros {missing}")
    return _compile("sglang_topk", LAUNCHER, Path(kit) if kit else kit_dir(), arch, defines, out_dir)


class Peer:
    """The loaded launcher: `plan` / `topk` launch SGLang's kernels on torch's current stream; `prepare` packs
    the pointers once for benchmarks and CUDA graphs."""

    def __init__(self, path: Path, defines: dict[str, int], device: int = 0):
        self.path = path
        self.defines = dict(defines)
        self.device = device
        self.lib = lib = ctypes.CDLL(str(path))
        p, i64, i32 = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int32
        lib.kgen_sglang_topk_plan.argtypes = [p, i64, p, i32, i32, p]
        lib.kgen_sglang_topk.argtypes = [p, i64, i64, i64, p, p, i64, p, i32, p]
        lib.kgen_sglang_topk_paged.argtypes = [p, i64, i64, i64, p, p, i64, i64, p, i64, p, i32, p]
        lib.kgen_sglang_topk_error.restype = ctypes.c_char_p

    @classmethod
    def load(cls, kit: Path | None = None, *, out_dir: Path | None = None) -> Peer:
        torch = S.sm90_torch()
        kit = Path(kit) if kit else kit_dir()
        torch.cuda.init()
        defines = probe(kit, out_dir=out_dir)
        path = build(kit, defines=defines, out_dir=out_dir)
        try:
            return cls(path, defines, torch.cuda.current_device())
        except OSError as e:
            raise PeerAbsent(f"the launcher does not load: {e}") from e

    def record(self) -> dict:
        return {"name": NAME, "present": True, "sglang": S.SGLANG_VERSION, "so": self.path.name, **self.defines}

    def _check(self, rc: int, what: str) -> None:
        if rc:
            raise RuntimeError(f"SGLang's {what} failed: {self.lib.kgen_sglang_topk_error().decode(errors='replace')}")

    @staticmethod
    def _stream() -> int:
        import torch

        return torch.cuda.current_stream().cuda_stream

    def metadata(self, rows: int):
        """The plan buffer SGLang's plan writes (zeros: the plan leaves it untouched for small batches)."""
        import torch

        return torch.zeros((rows + 1, PLAN_COLS), dtype=torch.int32, device=f"cuda:{self.device}")

    def prepare(self, scores, seq_lens, k: int, *, threshold: int = -1, page_table=None, page_size: int = 1):
        """(plan, select, indices, metadata): plan() runs SGLang's plan over `seq_lens` into metadata,
        select() its top-k over `scores` (fp32 [rows, L], row stride a multiple of 4) into indices (int32
        [rows, k]), both on torch's current stream with the pointers packed here. SGLang plans before the
        scorer: its top-k kernels read the plan before their PDL wait, so some other stream work (the scorer)
        must come between plan() and select(). With a `page_table` (int32 [rows, pages], contiguous) the
        indices are SGLang's page-table transform of them (cache slots, `page_size` a power of two)."""
        import torch

        if scores.dtype != torch.float32 or scores.dim() != 2 or scores.stride(1) != 1:
            raise ValueError("scores: fp32 [rows, L] with unit column stride")
        if scores.stride(0) % SCORE_ALIGN:
            raise ValueError(f"scores' row stride {scores.stride(0)} is not a multiple of {SCORE_ALIGN} (SGLang's "
                             "16-byte loads); pad the rows")
        rows, cols = scores.shape
        if seq_lens.dtype != torch.int32 or tuple(seq_lens.shape) != (rows,) or not seq_lens.is_contiguous():
            raise ValueError("seq_lens: contiguous int32 [rows]")
        if not 0 < k <= MAX_TOPK:
            raise ValueError(f"k must be in (0, {MAX_TOPK}]")
        if page_table is not None and (page_table.dtype != torch.int32 or page_table.dim() != 2
                                       or page_table.shape[0] != rows or not page_table.is_contiguous()):
            raise ValueError("page_table: contiguous int32 [rows, pages]")
        out = torch.empty((rows, k), dtype=torch.int32, device=scores.device)
        meta = self.metadata(rows)
        lib, dev, stream = self.lib, scores.device.index or 0, self._stream
        sp, lp, op, mp = scores.data_ptr(), seq_lens.data_ptr(), out.data_ptr(), meta.data_ptr()
        stride = scores.stride(0)

        # the closures hold the tensors whose addresses they pass: a caller that keeps only them (a padded copy of
        # the scores made for this call) must not have that memory freed and reused under SGLang's kernels
        held = (scores, seq_lens, out, meta, page_table)

        def plan(_held=held) -> None:
            self._check(lib.kgen_sglang_topk_plan(lp, rows, mp, threshold, dev, stream()), "top-k plan")

        if page_table is None:
            def select(_held=held) -> None:
                self._check(lib.kgen_sglang_topk(sp, rows, cols, stride, lp, op, k, mp, dev, stream()), "top-k")
        else:
            tp, pages = page_table.data_ptr(), int(page_table.shape[1])

            def select(_held=held) -> None:
                self._check(lib.kgen_sglang_topk_paged(sp, rows, cols, stride, lp, tp, pages, page_size, op, k, mp,
                                                       dev, stream()), "top-k (paged)")

        return plan, select, out, meta

    def launch(self, scores, seq_lens, out, metadata) -> None:
        """SGLang's top-k over `scores` into `out` (int32 [rows, k]) with a plan already in `metadata`, on
        torch's current stream; SGLang's own checks (dtypes, shapes, the row stride) raise here."""
        rows, cols = scores.shape
        self._check(self.lib.kgen_sglang_topk(scores.data_ptr(), rows, cols, scores.stride(0), seq_lens.data_ptr(),
                                              out.data_ptr(), out.shape[1], metadata.data_ptr(),
                                              scores.device.index or 0, self._stream()), "top-k")

    def topk(self, scores, seq_lens, k: int):
        """int32 [rows, k]: each row's k largest of its first seq_lens[row] scores (raw column indices, in no
        order, -1 past the length), plan included."""
        plan, select, out, _ = self.prepare(scores, seq_lens, k)
        plan()
        out.fill_(-1)  # stream work between the two (SGLang: the scorer); the top-k reads the plan before its PDL wait
        select()
        return out


def aligned_width(cols: int) -> int:
    """`cols` rounded up to a row stride SGLang's top-k reads (SCORE_ALIGN floats)."""
    return -(-int(cols) // SCORE_ALIGN) * SCORE_ALIGN


def padded_scores(torch, logits):
    """`logits` as SGLang reads them: itself where its row stride is a multiple of SCORE_ALIGN, else a copy
    into rows padded to it (a view [rows, L] of the same values; the pad holds -inf and is never read)."""
    rows, cols = logits.shape
    if logits.stride(1) == 1 and logits.stride(0) % SCORE_ALIGN == 0:
        return logits
    width = aligned_width(cols)
    buf = torch.full((rows, width), float("-inf"), dtype=torch.float32, device=logits.device)
    buf[:, :cols] = logits
    return buf[:, :cols]
