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


def site_summaries(adapter: Adapter, tree: EngineTree, changed: dict[str, str | None]) -> list[str]:
    table = _SGLANG if adapter.name == "sglang" else {}
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
    return out
