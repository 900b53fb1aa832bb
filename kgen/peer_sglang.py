"""SGLang's indexer store kernels (`fused_norm_rope_indexer`, `fused_norm_rope_indexer_fp4`), the
writer's peer in `kgen bench`: built from a kit outside the project and called on torch tensors.

The kit (`python scripts/sglang_peer.py prepare .peers/sglang`) holds SGLang's JIT header
(KIT_HEADER) and the headers it includes (KIT_INCLUDE: SGLang's `sgl_kernel/` and tvm-ffi's), taken from
the released wheels; none of it enters the project. LAUNCHER below is kgen's own: an extern "C" function
that fills SGLang's `FusedNormRopeStoreParams` and launches the kernel as SGLang's host code does
(`FusedNormRopeKernel::forward` / `forward_fp4`: 8 tokens per 256-thread block, PDL on sm_90+), with
the template arguments SGLang instantiates for DeepSeek-V4's indexer (`compress_norm_rope_store`: the
input's dtype, page size 64, no preshuffle, the decode plan). It is compiled with nvcc and SGLang's
JIT flags (NVCC_FLAGS) into `$KGEN_CACHE_DIR/_peers/sglang-<hash16>.so`, loaded by ctypes and launched
on torch's current stream.

`Peer.load()` returns the peer, or raises PeerAbsent with the reason (no kit, no nvcc, no GPU, the
build failed): the bench records `peer: {absent: reason}` then.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import os
import re
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

from .resources import cache_root
from .spec import Spec

NAME = "sglang.fused_norm_rope_indexer"
SGLANG_VERSION = "0.5.23"  # the release whose JIT sources the kit holds
TVM_FFI_VERSION = "0.1.11"  # what SGLANG_VERSION pins (Requires-Dist: apache-tvm-ffi==0.1.11)
KIT_ENV = "KGEN_SGLANG_KIT"
KIT_DEFAULT = Path(".peers") / "sglang"
KIT_HEADER = "csrc/deepseek_v4/fused_norm_rope_v2.cuh"  # relative to the kit
KIT_INCLUDE = "include"  # sgl_kernel/, tvm/ffi/, dlpack/ under it
KIT_RECORD = "KIT.json"
ARCH = "sm_90a"
NVCC_FLAGS = ("-std=c++20", "-O3", "--expt-relaxed-constexpr")  # SGLang's get_default_target_flags
BUILD_TIMEOUT_S = 300
PAGE_SIZE = 64  # SGLang's DSV4 indexer cache: 64 tokens per page
TOKENS_PER_BLOCK = 8  # its grid: ceil(N / 8) blocks of 256 threads (one warp per token)

# kgen's launcher: the SGLang kernel's template arguments are SGLang's DSV4 indexer instantiation with
# fp32 input (the dtype of the compressor's output that DSV4's specs read).
LAUNCHER = r"""
#include <cuda_runtime.h>
#include <cstdint>

#include "fused_norm_rope_v2.cuh"

namespace {
constexpr int32_t kPageBits = KGEN_PEER_PAGE_BITS;
using Mode = sglang::ForwardMode;

template <typename Kernel>
int launch(Kernel kernel, const sglang::FusedNormRopeStoreParams& p, cudaStream_t stream) {
  cudaLaunchConfig_t cfg = {};
  cudaLaunchAttribute attr[1];
  cfg.gridDim = dim3((p.num_tokens + sglang::kNumWarps - 1) / sglang::kNumWarps);
  cfg.blockDim = dim3(sglang::kBlockSize);
  cfg.dynamicSmemBytes = 0;
  cfg.stream = stream;
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  return static_cast<int>(cudaLaunchKernelEx(&cfg, kernel, p));
}
}  // namespace

extern "C" int kgen_sglang_store(int fp4, const void* x, const void* plan, const void* weight, float eps,
                                 const float* freqs, const int64_t* out_loc, void* cache, uint32_t ratio,
                                 uint32_t n, void* stream) {
  if (n == 0) return 0;
  sglang::FusedNormRopeStoreParams p = {};
  p.input = const_cast<void*>(x);
  p.handle = plan;
  p.weight = weight;
  p.freqs_cis = freqs;
  p.out_loc = out_loc;
  p.kvcache = static_cast<uint8_t*>(cache);
  p.eps = eps;
  p.compress_ratio = ratio;
  p.num_tokens = n;
  auto s = static_cast<cudaStream_t>(stream);
  if (fp4) return launch(sglang::fused_norm_rope_indexer_fp4<float, Mode::CompressDecode, kPageBits, true>, p, s);
  return launch(sglang::fused_norm_rope_indexer<float, Mode::CompressDecode, kPageBits, true, 0>, p, s);
}

extern "C" const char* kgen_sglang_error(int code) {
  return cudaGetErrorString(static_cast<cudaError_t>(code));
}
"""


class PeerAbsent(Exception):
    """Why the peer cannot run here (the bench records it as `peer: {absent: ...}`)."""


def kernel_for(spec: Spec) -> tuple[str | None, str]:
    """('fp8' | 'fp4', '') where SGLang has a store kernel writing this variant's bytes from the same
    inputs, else (None, why not)."""
    rope, norm, st = spec.rope, spec.norm, spec.store
    need = [(spec.input_dtype == "fp32", "input_dtype fp32"), (spec.head_dim == 128, "head_dim 128"),
            (norm.kind == "rmsnorm", "rmsnorm"), (rope.dim == 64, "rope dim 64"),
            (rope.style == "interleaved" and rope.placement == "last", "interleaved rope on the last 64"),
            (bool(spec.hadamard), "the Hadamard rotation"), (spec.layout.page_size == PAGE_SIZE, "page size 64"),
            (spec.positions.source in ("array", "decode_plan"), "positions or a decode plan")]
    missing = [what for ok, what in need if not ok]
    if missing:
        return None, "SGLang's indexer store needs " + ", ".join(missing)
    if st.dtype == "fp8_e4m3" and st.scale == "fp32" and st.block == 128:
        return "fp8", ""
    if st.dtype == "fp4_e2m1" and st.scale == "ue8m0" and st.block == 32:
        return "fp4", ""
    return None, "SGLang's indexer store writes fp8 e4m3 + fp32 scale per 128 or fp4 e2m1 + ue8m0 per 32"


def find_kit(env: str, default: Path) -> Path:
    """$`env`, else `default` under the working directory, else under the checkout (every peer's kit)."""
    given = os.environ.get(env)
    if given:
        return Path(given)
    here = Path.cwd() / default
    return here if here.is_dir() else Path(__file__).resolve().parents[1] / default


def kit_dir() -> Path:
    """$KGEN_SGLANG_KIT, else .peers/sglang in the working directory, else in the checkout."""
    return find_kit(KIT_ENV, KIT_DEFAULT)


def kit_problem(kit: Path) -> str | None:
    """None when `kit` holds the header and its include tree, else what is missing."""
    if not (kit / KIT_HEADER).is_file():
        return f"no SGLang kit at {kit} (python scripts/sglang_peer.py prepare {KIT_DEFAULT})"
    for h in ("sgl_kernel/utils.cuh", "tvm/ffi/container/tensor.h", "dlpack/dlpack.h"):
        if not (kit / KIT_INCLUDE / h).is_file():
            return f"the SGLang kit at {kit} lacks {KIT_INCLUDE}/{h}"
    return None


def nvcc() -> str | None:
    """nvcc from $CUDA_HOME, PATH or /usr/local/cuda."""
    for c in (os.environ.get("CUDA_HOME", "") and str(Path(os.environ["CUDA_HOME"]) / "bin" / "nvcc"),
              shutil.which("nvcc"), "/usr/local/cuda/bin/nvcc"):
        if c and Path(c).is_file() and os.access(c, os.X_OK):
            return c
    return None


def _tree_digest(root: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(root.rglob("*")):
        if p.is_file() and p.name != KIT_RECORD:
            h.update(str(p.relative_to(root)).encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()


def compile_command(compiler: str, kit: Path, source: Path, target: Path, arch: str = ARCH) -> list[str]:
    cc = int(re.sub(r"\D", "", arch))  # sm_90a -> 90: SGLang's JIT defines SGL_CUDA_ARCH = 10 x that
    return [compiler, f"-arch={arch}", f"-DSGL_CUDA_ARCH={cc * 10}", *NVCC_FLAGS, "-Xcompiler", "-fPIC", "-shared",
            f"-DKGEN_PEER_PAGE_BITS={PAGE_SIZE.bit_length() - 1}", f"-I{kit / KIT_HEADER.rsplit('/', 1)[0]}",
            f"-I{kit / KIT_INCLUDE}", "--cudart=static", str(source), "-o", str(target)]


def toolchain() -> tuple[str, str]:
    """(nvcc, its --version text), or PeerAbsent."""
    cc = nvcc()
    if cc is None:
        raise PeerAbsent("no nvcc (set CUDA_HOME or put nvcc on PATH)")
    try:
        version = subprocess.run([cc, "--version"], capture_output=True, text=True, timeout=60).stdout.strip()
    except (OSError, subprocess.TimeoutExpired) as e:
        raise PeerAbsent(f"nvcc --version failed: {e}") from e
    return cc, version


def compile_cached(name: str, text: str, kit: Path, argv: Callable[[str, Path, Path, Path], list[str]], *,
                   key_kit: Path, arch: str, out_dir: Path | None, timeout: float) -> Path:
    """`text` compiled by `argv(nvcc, kit, source, target)` into `out_dir` (default the cache's _peers/), as
    `<name>-<arch>-<hash16>.so`; the hash covers the text, the kit's files, nvcc and the command as
    `argv(nvcc, key_kit, SRC, OUT)` spells it (key_kit: a placeholder, or the kit's place where the command
    bakes it in). Built beside its place and renamed into it. Raises PeerAbsent with nvcc's words."""
    cc, version = toolchain()
    command = argv(cc, key_kit, Path("SRC"), Path("OUT"))
    key = hashlib.sha256(json.dumps([text, _tree_digest(kit), version, command]).encode()).hexdigest()
    out_dir = out_dir or cache_root() / "_peers"
    target = out_dir / f"{name}-{arch}-{key[:16]}.so"
    if target.is_file():
        return target
    out_dir.mkdir(parents=True, exist_ok=True)
    tmp = out_dir / f".tmp-{os.getpid()}-{key[:16]}"
    tmp.mkdir(exist_ok=True)
    try:
        src = tmp / f"kgen_{name}.cu"
        src.write_text(text, encoding="utf-8")
        so = tmp / target.name
        try:
            r = subprocess.run(argv(cc, kit, src, so), capture_output=True, text=True, timeout=timeout)
        except (OSError, subprocess.TimeoutExpired) as e:
            raise PeerAbsent(f"nvcc failed: {e}") from e
        if r.returncode != 0:
            raise PeerAbsent("nvcc failed: " + (r.stderr or r.stdout).strip()[-1500:])
        os.replace(so, target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def build(kit: Path | None = None, *, arch: str = ARCH, out_dir: Path | None = None) -> Path:
    """The launcher compiled against the kit (cached by the kit's, the launcher's and nvcc's content).
    Raises PeerAbsent with the reason."""
    kit = Path(kit) if kit is not None else kit_dir()
    why = kit_problem(kit)
    if why:
        raise PeerAbsent(why)
    return compile_cached("sglang", LAUNCHER, kit, lambda cc, k, src, so: compile_command(cc, k, src, so, arch),
                          key_kit=Path("KIT"), arch=arch, out_dir=out_dir, timeout=BUILD_TIMEOUT_S)


def peer_enabled() -> bool:
    """KGEN_BENCH_PEER=0 leaves SGLang's kernels (the writer's and the top-k) out of `kgen bench` and `kgen recall`."""
    return os.environ.get("KGEN_BENCH_PEER", "1") not in ("0", "false", "no", "")


def sm90_torch():
    """torch, where a CUDA device of compute capability 9 is current (the peers are built for ARCH), else
    PeerAbsent."""
    try:
        import torch
    except ImportError as e:
        raise PeerAbsent(f"torch does not import ({e})") from e
    if not torch.cuda.is_available():
        raise PeerAbsent("no CUDA device")
    major, _ = torch.cuda.get_device_capability()
    if major != 9:
        raise PeerAbsent(f"the peer is built for {ARCH} (this device is sm_{major}x)")
    return torch


class Peer:
    """The loaded launcher: `store(kind, ...)` launches SGLang's kernel on torch's current stream."""

    def __init__(self, path: Path):
        self.path = path
        self.lib = lib = ctypes.CDLL(str(path))
        p = ctypes.c_void_p
        lib.kgen_sglang_store.argtypes = [ctypes.c_int, p, p, p, ctypes.c_float, p, p, p, ctypes.c_uint32,
                                          ctypes.c_uint32, p]
        lib.kgen_sglang_store.restype = ctypes.c_int
        lib.kgen_sglang_error.argtypes = [ctypes.c_int]
        lib.kgen_sglang_error.restype = ctypes.c_char_p

    @classmethod
    def load(cls, kit: Path | None = None) -> Peer:
        sm90_torch()
        path = build(kit)
        try:
            return cls(path)
        except OSError as e:
            raise PeerAbsent(f"the launcher does not load: {e}") from e

    def store(self, kind: str, x, plan, weight, eps: float, freqs, out_loc, cache, ratio: int) -> None:
        """SGLang's kernel on tensors: x fp32 [N, 128], plan uint8 [N, 16] (DecodePlan rows), weight fp32
        [128], freqs fp32 [rows, 64], out_loc int64 [N], cache uint8 [pages, page_bytes]."""
        import torch

        rc = self.lib.kgen_sglang_store(int(kind == "fp4"), x.data_ptr(), plan.data_ptr(), weight.data_ptr(), eps,
                                        freqs.data_ptr(), out_loc.data_ptr(), cache.data_ptr(), ratio,
                                        x.shape[0], torch.cuda.current_stream().cuda_stream)
        if rc:
            raise RuntimeError(f"SGLang's store kernel did not launch: {self.lib.kgen_sglang_error(rc).decode()}")


def peer_plan(torch, positions, ratio: int = 1):
    """DecodePlan rows [N, 16] under which SGLang's kernel reads `positions` and writes every token:
    seq_len = position + ratio (a multiple of ratio: with ratio 1, any position), write_loc and the read
    pages 0 (the store ignores them; kgen's plan reader writes only where they are >= 0)."""
    from .reference import make_decode_plan

    seq = positions.to(torch.int64) + ratio
    z = torch.zeros_like(seq)
    return make_decode_plan(seq.cpu(), z.cpu(), z.cpu(), z.cpu()).to(positions.device)
