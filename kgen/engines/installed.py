"""Engines as users have them: the installed package directory (`.../site-packages/sglang`,
`.../site-packages/vllm`) read in the repository layout the site tables name (`python/sglang/...`
for SGLang, `vllm/...` for vLLM), and the short per-site summary `kgen patch` prints for a PR body.
"""

from __future__ import annotations

from pathlib import Path

from .sites import Adapter
from .tree import EngineTree


def package_prefix(root: Path, adapter: Adapter) -> str | None:
    """The checkout path of the package when `root` is the package directory itself (`python/sglang`
    for an installed sglang), else None."""
    package = adapter.package_module.split(".")[0]
    marker = adapter.markers[0]
    head, _, rest = marker.partition(f"{package}/")
    root = Path(root)
    if root.name == package and (root / "__init__.py").is_file() and rest and (root / rest).exists():
        return f"{head}{package}"
    return None


class PackageTree(EngineTree):
    """An EngineTree over an installed package: checkout paths under `prefix` map into `root`."""

    def __init__(self, root: Path, prefix: str):
        super().__init__(root)
        self.prefix = prefix.rstrip("/") + "/"

    def disk_path(self, rel: str) -> Path:
        return self.root / rel[len(self.prefix):] if rel.startswith(self.prefix) else self.root / "__outside__" / rel

    def path(self, rel: str) -> Path:
        return self.disk_path(rel)


# what the patch does at each site, for the PR body (the file names come from the diff)
_SGLANG = {
    "arg_groups/fields/": "server flag `enable_kgen_indexer` (bool, default False) beside the fp4 indexer flag",
    "server_args.py": "server flag `enable_kgen_indexer` (bool, default False) beside the fp4 indexer flag",
    "arg_groups/field_order.py": "the new field appended to ServerArgs' positional field order",
    "mem_cache/deepseek_v4_memory_pool.py": "`use_kgen_indexer` for the shared bytes helper and the indexer "
    "pool's constructor (default False); the C4 factory passes `kgen_indexer.enabled()` (force_fp4 low-ratio "
    "pools do not); the pool's fp8-layout helpers refuse under the flag; pd_kv_layout names kgen's layout",
    "model_executor/pool_configurator.py": "the budget passes the flag to the shared helper (C4 only)",
    "dsv4/compressor_v2.py": "the C4 indexer store goes to kgen's op with the plan rows and the model's eps",
    "dsv4/indexer.py": "bf16 query without fp8 quantization, the reader view's width, kgen's scorer, "
    "the fp8-only non-paged path off, all only where the C4 pool holds kgen's keys",
    "dsv4/metadata.py": "no DeepGEMM schedule for the C4 indexer under the flag",
    "pyproject.toml": "kgen declared as an optional dependency",
    "kgen_indexer/": "new package: the flag (refused on HIP/XPU and with the fp4 flag), host constants, the "
    "variant's spec; no kernel sources (the installed kgen compiles them)",
}


_VLLM = {
    "v1/attention/backends/mla/indexer.py": "dsa_indexer_uses_fp4 admits indexer_kv_dtype='kgen' through "
    "`kgen_indexer.enabled(vllm_config)`, which refuses it at start-up on ROCm/HIP, XPU and CPU, outside "
    "DeepSeek-V4 and with context parallelism",
    "models/deepseek_v4/attention.py": "DeepseekV4Attention._get_indexer_cls returns kgen's indexer under the "
    "option (vLLM's platform hook; its own hooks give the cache, compressor and scoring layer)",
    "model_executor/layers/sparse_attn_indexer.py": "the sparse_attn_indexer op and its fake take "
    "`kgen_variant` (default None: vLLM's path); with it the prefill and decode scorers call kgen's reader "
    "and the fp8 key gather is skipped; SparseAttnIndexer passes its class attribute",
    "kgen_indexer/": "new package: the option check, the cache spec from the host constants (page bytes, "
    "alignment), the compressor subclass (vLLM's compress_pool, then kgen's store with the model's eps), "
    "the bf16 query, the scorer glue, the variant's spec; no kernel sources (the installed kgen compiles "
    "them)",
}


def site_summaries(adapter: Adapter, tree: EngineTree, changed: dict[str, str | None]) -> list[str]:
    table = {"sglang": _SGLANG, "vllm": _VLLM}.get(adapter.name, {})
    out: list[str] = []
    seen: set[str] = set()
    for rel in sorted(changed):
        key = next((k for k in table if k in rel), None)
        if key is None or key in seen:
            continue
        seen.add(key)
        where = rel if key != "kgen_indexer/" else rel.rpartition("/")[0] + "/"
        out.append(f"{where}: {table[key]}")
    if adapter.name == "sglang" and not any("pyproject.toml" in rel for rel in changed):
        out.append("kgen is not declared as a dependency here (no python/pyproject.toml in this tree): add "
                   '`kgen = ["kgen"]` to [project.optional-dependencies]')
    if adapter.name == "vllm":
        out.append("kgen is an optional run-time dependency (`pip install kgen`): vLLM's wheel has no "
                   "pyproject.toml to declare it in; add it to vLLM's requirements for the option")
    return out
