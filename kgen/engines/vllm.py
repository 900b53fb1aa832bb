"""vLLM's DeepSeek-V4 indexer keys as a table of sites (filled in below)."""

from __future__ import annotations

from .sites import Adapter, Encoding

ADAPTER = Adapter(name="vllm", markers=("vllm/v1",), native={"fp8": Encoding("fp8_e4m3", "fp32_pow2", 128)},
                  default_native="fp8", package_dir="vllm/kgen_indexer", package_module="vllm.kgen_indexer",
                  package_alias="kgen_indexer", sites=(), env=lambda ctx: {})
