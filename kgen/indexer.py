"""The read side's host half: which specs `kgen::indexer_logits` can read, and the checked launch.

`reader_problems(spec)` says why the kernel cannot read a spec's cache (empty: it can); the kernel's
`[reader-support]` static_assert is its twin. The byte math (constants, launch split) is kgen.layout's
`reader_*` functions; the Torch path (the reference) is kgen.score.
"""

from __future__ import annotations

from . import layout as L
from .arch import has_wgmma
from .spec import Spec

READER_DTYPES = ("bf16", "fp8_e4m3", "fp4_e2m1")  # q: bf16, fp8 e4m3, bf16 (kgen.score takes these)


def reader_problems(spec: Spec) -> list[str]:
    """Why indexer_logits cannot read this spec's pages (one line each); [] if it can."""
    try:
        lay = L.compute(spec)
    except (ValueError, ZeroDivisionError, OverflowError) as e:
        return [f"kgen cannot compute its byte layout ({e})"]
    s = spec.store
    out = []
    if s.dtype not in READER_DTYPES:
        out.append(f"store.dtype {s.dtype} is not a key dtype the reader multiplies")
    if lay.kept_span.size:
        out.append("keys with a kept RoPE span (store.rope_dtype) are not read: the reader multiplies one "
                   "dtype per row")
    if s.dtype == "fp8_e4m3" and lay.blocks_per_token > 1:
        out.append(f"fp8 keys need one scale per token (block = head_dim), got {lay.blocks_per_token} blocks")
    if s.dtype == "fp4_e2m1" and lay.block != 32:
        out.append(f"fp4 keys need a ue8m0 scale per 32 values, got block {lay.block}")
    if lay.row_bytes % L.READER_GROUP_BYTES:
        out.append(f"a key row of {lay.row_bytes} B is not a multiple of {L.READER_GROUP_BYTES} B "
                   "(4 lanes x 16-B chunks)")
    if not L.reader_key_vector_bytes(lay):
        out.append(f"pages of {lay.page_bytes} B are not 4-B aligned (page_align)")
    if L.reader_tokens_per_cta(spec) < 1:
        out.append(f"q of one token ({L.READER_HEADS} heads x {spec.head_dim}) does not fit "
                   f"{L.READER_SMEM_BYTES // 1024} KB of shared memory")
    return out


def readable(spec: Spec) -> bool:
    return not reader_problems(spec)


# ---------------------------------------------------------------------------------------------
# the launch (kgen.abi.INDEXER_LOGITS describes the parameters; these are its shape)

_sm_counts: dict[int, int] = {}
_l2_bytes: dict[int, int] = {}


def sm_count(device) -> int:
    """Multiprocessors of a torch CUDA device (cached)."""
    idx = device.index if device.index is not None else 0
    n = _sm_counts.get(idx)
    if n is None:
        import torch

        n = _sm_counts[idx] = int(torch.cuda.get_device_properties(idx).multi_processor_count)
    return n


def l2_bytes(device) -> int:
    """The L2 cache of a torch CUDA device, bytes (cached; 0 where torch does not say, and for a CPU
    tensor's device: the CPU emulation)."""
    if getattr(device, "type", "cuda") != "cuda":
        return 0
    idx = device.index if device.index is not None else 0
    n = _l2_bytes.get(idx)
    if n is None:
        import torch

        n = _l2_bytes[idx] = int(getattr(torch.cuda.get_device_properties(idx), "L2_cache_size", 0) or 0)
    return n


_launches: dict[tuple, tuple] = {}  # launch_of's and launch_tune's memo: key -> (spec, value)


def _memo(key: tuple, spec: Spec, compute):
    """The value _launches holds for `key` (which starts with id(spec)) while it belongs to this spec
    object: the memo keeps the spec, so its id is not reused meanwhile. Else compute()'s, stored."""
    hit = _launches.get(key)
    if hit is not None and hit[0] is spec:
        return hit[1]
    if len(_launches) >= 256:
        _launches.clear()
    value = compute()
    _launches[key] = (spec, value)
    return value


def _sizes(args) -> tuple[int, int, int, int]:
    """(B, next_n, max_seq_len, SMs of q's device): what a reader launch's shape depends on."""
    return (int(args.dims["B"]), int(args.dims["next_n"]), int(args.dims["max_seq_len"]),
            sm_count(args.tensors["q"].device))


def _tune_key(tune: dict | None) -> tuple:
    return tuple(sorted(tune.items())) if tune else ()


def _launch_entry(args) -> tuple:
    """((grid, threads, dynamic shared bytes), wgmma) of the checked arguments, memoized."""
    spec, sizes = args.spec, _sizes(args)

    def compute() -> tuple:
        wgmma = runs_wgmma(spec, args.target, args.tune, args.layout)
        grid, threads, smem, _ = L.reader_launch(spec, *sizes, wgmma=wgmma, tune=args.tune, lay=args.layout)
        return (grid, threads, smem), wgmma

    return _memo((id(spec), "launch", args.target, _tune_key(args.tune), *sizes), spec, compute)


def launch_of(args) -> tuple:
    """(grid (x, y, z), threads, dynamic shared bytes) of the checked arguments `args` (kgen.abi.Args),
    for the path the loaded cubin runs (args.target, args.tune). Memoized per spec object and sizes:
    the op asks on every call (grid, shared memory, carveout), the layout arithmetic runs once."""
    return _launch_entry(args)[0]


def launch_wgmma(args) -> bool:
    """Does the launch of `args` run the wgmma path (kgen.abi: the SM's largest shared carveout)?"""
    return _launch_entry(args)[1]


def runs_wgmma(spec: Spec, target: str | None, tune: dict | None = None, lay: L.Layout | None = None) -> bool:
    """Does the reader rendered with `tune` and compiled for `target` (None: not a GPU cubin, e.g. the
    CPU emulation) run the wgmma path? The kernel's twin is KGEN_READER_WGMMA and kReaderWgmma."""
    return target is not None and has_wgmma(target) and L.reader_wg_enabled(lay or L.compute(spec), tune)


def runs_tma(spec: Spec, target: str | None, tune: dict | None = None, lay: L.Layout | None = None) -> bool:
    """Does the reader rendered with `tune` and compiled for `target` run the wgmma path's TMA variant
    (which reads the cache through the tensor map Params.cache_map)? Its twin is kReaderWgTma."""
    return target is not None and has_wgmma(target) and L.reader_wg_tma(lay or L.compute(spec), tune)


def launch_tma(args) -> bool:
    """Does the launch of the checked arguments `args` run the TMA variant (args.target, args.tune: the
    loaded cubin's, kgen.runtime sets them)? Memoized per spec object, target and tuning."""
    spec, target = args.spec, args.target
    if target is None:  # the CPU emulation, or arguments no cubin was picked for yet
        return False
    return _memo((id(spec), "tma", target, _tune_key(args.tune)), spec,
                 lambda: runs_tma(spec, target, args.tune, args.layout))


def cache_map(args) -> bytes:
    """kgen.abi.INDEXER_LOGITS's `cache_map` for the checked arguments `args`: the tensor map of the
    cache's key region (kgen.tma) where the launch runs the TMA variant, else zeros (other archs, the
    cp.async variant, the CPU emulation: the kernel reads no map). An empty cache has no key to read and
    no map either (the driver encodes no empty dimension)."""
    from .abi import NO_TENSOR_MAP

    cache = args.tensors["cache"]
    if not launch_tma(args) or not cache.shape[0]:
        return NO_TENSOR_MAP
    from .tma import cache_key_map

    return cache_key_map(args.layout, cache)


def check(spec: Spec, q, weights, cache, block_table, seq_lens, max_seq_len, logits=None, *,
          check_bounds: bool = False, require_cuda: bool = True):
    """Every check of a kernel call, each failure an ArgumentError naming the argument, before any
    launch: the reader's arguments (kgen.score: shapes, dtypes, and with `check_bounds` the values:
    seq_lens within the table and max_seq_len, table entries inside the cache; one host sync), then
    what the kernel needs beyond them (kgen.abi.INDEXER_LOGITS: q's dtype for this layout, 64 heads,
    16-B aligned contiguous tensors, one CUDA device). Returns kgen.abi.Args (logits allocated
    when None)."""
    from .abi import INDEXER_LOGITS, ArgumentError
    from .score import check_logits_arguments

    problems = reader_problems(spec)
    if problems:
        raise ArgumentError(f"variant: indexer_logits cannot read {spec.name}'s cache: {'; '.join(problems)}",
                            fix="score it with kgen.score.indexer_logits_torch")
    c = check_logits_arguments(spec, q, weights, cache, block_table, seq_lens, max_seq_len,
                               require_cuda=require_cuda, check_values=check_bounds)
    if logits is None:
        import torch

        logits = torch.empty((c.batch * c.next_n, max_seq_len), dtype=torch.float32, device=q.device)
    tensors = {"q": q, "weights": weights, "cache": cache, "block_table": block_table, "seq_lens": seq_lens,
               "logits": logits}
    return INDEXER_LOGITS.check(spec, tensors, require_cuda=require_cuda)


def launch_tune(args, arch: str, tune: dict | None = None) -> dict | None:
    """The tuning (the cubin) the checked call `args` runs on a GPU of `arch`: on the wgmma path the ring
    of its shape (kgen.layout.reader_wg_shape_tune: fewer stages for launches that stage few keys per
    SM), elsewhere `tune` as given. Memoized with the launch shape."""
    spec, sizes = args.spec, _sizes(args)
    l2 = l2_bytes(args.tensors["q"].device)

    def compute() -> dict | None:
        if not runs_wgmma(spec, arch, tune, args.layout):
            return tune
        return L.reader_wg_shape_tune(args.layout, tune, *sizes, l2)

    return _memo((id(spec), "tune", arch, _tune_key(tune), *sizes, l2), spec, compute)


def prepare(variant, q, weights, cache, block_table, seq_lens, max_seq_len: int, *, logits=None,
            check_bounds: bool = False, tune: dict | None = None):
    """Check once, load the kernel, pack its parameters: returns (launch, logits), where launch() runs
    the kernel on torch's current stream writing `logits` (for benchmarks and CUDA graphs). The cubin is
    the one for this launch shape (launch_tune); `tune`: layout.READER_TUNING_DEFAULTS overrides (the
    bench's comparisons; one that fixes kReaderWgStages fixes the ring at every shape)."""
    from .ops import resolve_spec
    from .runtime import device_arch, load

    spec = resolve_spec(variant)
    args = check(spec, q, weights, cache, block_table, seq_lens, max_seq_len, logits, check_bounds=check_bounds)
    out = args.tensors["logits"]
    if out.numel() == 0:
        return (lambda stream=None: None), out
    picked = launch_tune(args, device_arch(spec, q.device.index), tune)  # the cubin of this shape: one load
    return load(spec, q.device.index, kernel="indexer_logits", tune=picked).prepare(args), out


def indexer_logits(variant, q, weights, cache, block_table, seq_lens, max_seq_len: int, *,
                   check_bounds: bool = False):
    """fp32 [B * next_n, max_seq_len] logits of the kernel (kgen.score documents the arithmetic and the
    visibility rule). Asynchronous on torch's current stream."""
    launch, out = prepare(variant, q, weights, cache, block_table, seq_lens, max_seq_len, check_bounds=check_bounds)
    launch()
    return out


def cuda_impl(variant: str, q, weights, cache, block_table, seq_lens, max_seq_len: int):
    """The CUDA implementation of `torch.ops.kgen.indexer_logits` (kgen.ops registers it; the CPU
    implementation is kgen.score's Torch path): checks (metadata only: no sync, so CUDA graphs capture
    it), then the kernel on torch's current stream."""
    from .ops import resolve

    launch, out = prepare(resolve(variant).spec, q, weights, cache, block_table, seq_lens, max_seq_len)
    launch()
    return out
