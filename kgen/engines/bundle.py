"""kgen's generated files for one variant, laid out in a kgen-owned directory of an engine tree:
the host constants (the byte math an engine sizes its pool and budget from), the kernel sources
(config, instantiation and the real headers, as `kgen render` writes them) and the spec itself
(what kgen's torch ops resolve the variant from), and for an engine whose store passes prefill plans
the variant's prefill twin (`prefill_twin`: the same bytes, positions from the CompressPlan)."""

from __future__ import annotations

from ..spec import Spec
from .sites import Ctx

PREFILL_SPEC = "spec_prefill.yaml"


def prefill_twin(spec: Spec) -> Spec | None:
    """The variant as SGLang's prefill step calls it: the same spec reading the CompressPlan rows
    (positions.source compress_plan) under its own name. SGLang's store is one call for both steps
    (its plan's second element is the DecodePlan or the CompressPlan, `is_decode` picks one of two
    kernels); kgen's two readings are two variants for the same reason: the row kinds are both
    uint8 [N, 16], only the caller knows which it holds. None without RoPE (nothing reads a position)."""
    if spec.rope.dim <= 0:
        return None
    data = spec.model_dump(mode="json", exclude_defaults=True)
    data["name"] = f"{spec.name}_prefill"
    data["description"] = f"{spec.name} as SGLang's prefill store calls it: positions from its CompressPlan rows"
    data["positions"] = {"source": "compress_plan", "compress_ratio": spec.positions.compress_ratio}
    return Spec.model_validate(data)


def variant_files(ctx: Ctx, package_dir: str) -> dict[str, str]:
    from ..render import header_files, render_variant

    rendered = render_variant(ctx.spec)
    files = {f"{package_dir}/host.py": rendered.files[f"{ctx.name}/host.py"],
             f"{package_dir}/spec.yaml": ctx.spec_path.read_text(encoding="utf-8")}
    for rel, text in rendered.files.items():
        if not rel.endswith("host.py"):
            files[f"{package_dir}/kernel/{rel}"] = text
    twin = prefill_twin(ctx.spec)
    if twin is not None:
        from ..gpurun import spec_yaml

        files[f"{package_dir}/{PREFILL_SPEC}"] = spec_yaml(twin)
        for rel, text in render_variant(twin).files.items():
            if rel.endswith(("/kernel.cu", "/config.cuh")):  # its store kernel; the host and reader are the variant's
                files[f"{package_dir}/kernel/{rel}"] = text
    for rel, text in header_files().items():
        files[f"{package_dir}/kernel/{rel}"] = text
    return files
