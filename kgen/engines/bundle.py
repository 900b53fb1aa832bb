"""kgen's generated files for one variant, laid out in a kgen-owned directory of an engine tree:
the host constants (the byte math an engine sizes its pool and budget from), the kernel sources
(config, instantiation and the real headers, as `kgen render` writes them) and the spec itself
(what kgen's torch ops resolve the variant from)."""

from __future__ import annotations

from .sites import Ctx


def variant_files(ctx: Ctx, package_dir: str) -> dict[str, str]:
    from ..render import header_files, render_variant

    rendered = render_variant(ctx.spec)
    files = {f"{package_dir}/host.py": rendered.files[f"{ctx.name}/host.py"],
             f"{package_dir}/spec.yaml": ctx.spec_path.read_text(encoding="utf-8")}
    for rel, text in rendered.files.items():
        if not rel.endswith("host.py"):
            files[f"{package_dir}/kernel/{rel}"] = text
    for rel, text in header_files().items():
        files[f"{package_dir}/kernel/{rel}"] = text
    return files
