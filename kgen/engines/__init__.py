"""The engine bridge: `kgen audit` (where an engine checkout disagrees with a spec) and `kgen patch`
(a diff that wires a variant into the engine behind one flag). One adapter per engine, each a
table of sites (kgen/engines/sites.py); `sglang.py` and `vllm.py` are the tables."""

from __future__ import annotations

from .sites import Adapter


def adapters() -> dict[str, Adapter]:
    from . import sglang, vllm

    return {"sglang": sglang.ADAPTER, "vllm": vllm.ADAPTER}
