"""The registered torch ops (`torch.ops.kgen.*`) and the Python API over them.

    import kgen.ops   # registers the ops
    torch.ops.kgen.norm_rope_store("specs/dsv4.yaml::dsv4_indexer_fp8",
                                   x, weight, bias, freqs, positions, out_loc, cache)   # -> (), cache written

Schemas (docs/ops.md):
    kgen::norm_rope_store(str variant, Tensor x, Tensor? weight, Tensor? bias, Tensor? freqs,
                          Tensor? positions, Tensor out_loc, Tensor(a!) cache) -> ()
    kgen::indexer_logits(str variant, Tensor q, Tensor weights, Tensor cache, Tensor block_table,
                         Tensor seq_lens, int max_seq_len) -> Tensor
    kgen::indexer_topk(str variant, Tensor q, Tensor weights, Tensor cache, Tensor block_table,
                       Tensor seq_lens, int max_seq_len, int k) -> Tensor
    kgen::indexer_topk_logits(str variant, Tensor logits, Tensor seq_lens, int k) -> Tensor
    kgen::indexer_topk_slots(...as indexer_topk...) -> Tensor        # the selection as cache slots
    kgen::indexer_topk_logits_slots(str variant, Tensor logits, Tensor seq_lens, Tensor block_table, int k) -> Tensor

* CPU: the Torch reference (kgen.reference: the same bytes as the kernel). CUDA: the kernel, on
  torch's current stream, no device sync (so CUDA-graph capture records it). Meta/fake: shape checks
  only (torch.compile traces through it; `cache` is declared mutated, so it is functionalized).
* `variant` is a spec path or "family.yaml::variant_name", resolved ONCE per process into a
  `Variant` (spec, layout, per-device loaded kernel and prepacked launch): a call never re-reads or
  re-hashes a spec file (`forget()` drops the cache). A `Spec` object goes through the op under the
  name `variant_name(spec)` returns.
* Argument checks come from the kernel's ABI table (kgen/abi.py): the CUDA path runs a check
  generated from that table per variant (kgen/fastpath.py), and on any doubt the table's own
  `check`, which names the argument: ``x: expected float32 [N, 128], got bfloat16 [7, 128]``.
  Not checked (it would need a sync): `positions` inside freqs' rows (`check_bounds=True` in the
  Python API does it); `out_loc` outside [0, num_pages * page_size) is skipped by the kernel
  (numerics.md §7); duplicate slots race.
* Kernels (both ops') come from the JIT path (kgen.compile: render + NVRTC, content-hash cached) or,
  when an AOT directory is set (`use_aot(dir)` or KGEN_AOT_DIR; written by `kgen compile ... --out DIR`),
  from its prebuilt cubins, with neither jinja2 nor NVRTC imported (kgen/aot.py).

Registration is plain `torch.library` (define + impl + register_fake), not `torch.library.custom_op`,
whose Python autograd, ADInplaceOrView and alias-check layers cost more host time per call than the
kernel (docs/ops.md, "Host cost"). The writer has no autograd formula (it writes uint8 bytes) and bumps
the cache's version counter itself. On the first CUDA load of each op, `kgen.native` installs a C++
kernel at its CUDA key that runs the same table's check and the launch without entering Python; every
call it declines goes to the op's checked twin (`torch.ops.kgen._norm_rope_store_checked`,
`torch.ops.kgen._indexer_logits_checked`), the Python kernel.
Another op is added with `define_op` (schema, fake, CPU impl) and `implement(name, "cuda", fn)`; its
kernel is one more table in kgen.abi.KERNELS, run by a `KernelOp` (kgen.ops.registry).

The package: kgen.ops.registry (registration, variants, KernelOp), kgen.ops.writer (norm_rope_store),
kgen.ops.reader (indexer_logits), kgen.ops.topk (indexer_topk, indexer_topk_logits and their _slots twins).
"""

from __future__ import annotations

from ..abi import ArgumentError
from ..resolve import resolve_spec
from ..runtime import aot_dir, use_aot
from .reader import indexer_logits, indexer_logits_op
from .registry import (
    NAMESPACE,
    KernelOp,
    Variant,
    _native_kernel,
    _variants,
    define_op,
    forget,
    implement,
    kernel_op,
    native_kernel,
    resolve,
    variant_name,
)
from .topk import (
    indexer_topk,
    indexer_topk_logits,
    indexer_topk_logits_op,
    indexer_topk_logits_slots,
    indexer_topk_logits_slots_op,
    indexer_topk_op,
    indexer_topk_slots,
    indexer_topk_slots_op,
)
from .writer import NORM_ROPE_STORE_SCHEMA, check_arguments, norm_rope_store, norm_rope_store_op, prepare

__all__ = ["NAMESPACE", "NORM_ROPE_STORE_SCHEMA", "ArgumentError", "KernelOp", "Variant", "_native_kernel",
           "_variants", "aot_dir", "check_arguments", "define_op", "forget", "implement", "indexer_logits",
           "indexer_logits_op", "indexer_topk", "indexer_topk_logits", "indexer_topk_logits_op",
           "indexer_topk_logits_slots", "indexer_topk_logits_slots_op", "indexer_topk_op", "indexer_topk_slots",
           "indexer_topk_slots_op", "kernel_op", "native_kernel", "norm_rope_store", "norm_rope_store_op", "prepare",
           "resolve", "resolve_spec", "use_aot", "variant_name"]
