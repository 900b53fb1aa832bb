"""Prebuilt cubins: a directory of every variant's cubins plus a manifest, loadable without a compiler.

    kgen compile specs/dsv4.yaml specs/dsv32_indexer.yaml --out build/kgen-aot   # writes the directory
    KGEN_AOT_DIR=build/kgen-aot python serve.py     # kgen.ops loads from it (or kgen.ops.use_aot(dir))

Layout of DIR (a wheel can ship it as package data):
    manifest.json                       {"format": "kgen-aot/1", "kernels": [entry, ...]}
    <variant>.<arch>.cubin              one per (variant, arch)

An entry records what the loader checks before it hands a cubin to the driver:
    variant, arch, kernel       which kernel template (its ABI table is kgen.abi.KERNELS[kernel])
    spec_sha256                 sha256 of the spec's canonical JSON (`spec_hash`): every field,
                                defaults included, so any change to the spec changes it
    abi                         `KernelAbi.manifest()` at build time: kernel, ABI version, Params size
    symbol, name_expression     the mangled kernel name in the cubin and the C++ expression it names
    cubin, cubin_sha256         file name and its content hash (a damaged file is refused)
plus information only: registers, spill_bytes, spec_path, nvrtc.

`AotDir.find(spec, arch)` refuses, with a message naming the directory, the variant and the fix,
a cubin built from another spec (hash differs), for another kernel ABI (`KernelAbi.check_manifest`),
or whose bytes changed. Reading a directory imports neither jinja2 nor NVRTC (nor cuda.core, which
imports NVRTC): only json, hashlib and kgen.abi. Writing one (`write_dir`) compiles through kgen.compile.

The cubins and the manifest are written all or none (kgen.files.write_all), so a failed write leaves
the previous directory intact; an existing directory that is not a kgen AOT directory (no manifest
of this format, not empty) is refused rather than written into.
"""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .diagnostics import KgenError, Problem
from .spec import Spec

FORMAT = "kgen-aot/1"
MANIFEST = "manifest.json"


def spec_hash(spec: Spec) -> str:
    """sha256 of the spec's canonical JSON (every field, defaults included)."""
    return hashlib.sha256(spec.model_dump_json().encode()).hexdigest()


def cubin_name(variant: str, arch: str) -> str:
    return f"{variant}.{arch}.cubin"


def _problem(message: str, fix: str = "", code: int = 1) -> KgenError:
    return KgenError([Problem("aot", message, fix=fix)], exit_code=code)


# ---------------------------------------------------------------------------------------------
# reading


@dataclass(frozen=True)
class AotKernel:
    uri: str
    arch: str
    cubin: bytes
    symbol: str
    abi: dict
    entry: dict


class AotDir:
    """A directory written by `write_dir`, its manifest read once."""

    def __init__(self, path: Path):
        self.path = Path(path)
        mf = self.path / MANIFEST
        try:
            data = json.loads(mf.read_text())
        except FileNotFoundError:
            raise _problem(f"{mf}: no such file: {self.path} is not a kgen AOT directory",
                           fix=f"write one with `kgen compile SPEC... --out {self.path}`", code=2) from None
        except (OSError, ValueError) as e:
            raise _problem(f"{mf}: unreadable manifest ({e})",
                           fix=f"rewrite it with `kgen compile SPEC... --out {self.path}`") from None
        if not isinstance(data, dict) or data.get("format") != FORMAT or not isinstance(data.get("kernels"), list):
            got = data.get("format") if isinstance(data, dict) else type(data).__name__
            raise _problem(f"{mf}: manifest format {got!r}, this kgen reads {FORMAT!r}",
                           fix=f"rewrite it with `kgen compile SPEC... --out {self.path}`")
        self.manifest = data
        self.entries: dict[tuple[str, str], dict] = {}
        for item in data["kernels"]:
            try:
                self.entries[(str(item["variant"]), str(item["arch"]))] = item
            except (KeyError, TypeError):
                raise _problem(f"{mf}: an entry without variant/arch: {item!r}") from None

    def variants(self) -> list[str]:
        return sorted({v for v, _ in self.entries})

    def find(self, spec: Spec, arch: str) -> AotKernel:
        """The cubin of `spec` for `arch`, after every check (else a KgenError saying which and why)."""
        mf = self.path / MANIFEST
        e = self.entries.get((spec.name, arch))
        if e is None:
            archs = sorted(a for v, a in self.entries if v == spec.name)
            have = (f"it has {spec.name} only for {', '.join(archs)}" if archs
                    else f"its variants: {', '.join(self.variants()) or 'none'}")
            raise _problem(f"{mf}: no cubin of {spec.name} for {arch} ({have})",
                           fix=f"rebuild it with `kgen compile <spec of {spec.name}> --arch {arch} --out {self.path}`")
        want = spec_hash(spec)
        if e.get("spec_sha256") != want:
            raise _problem(
                f"{mf}: the cubin of {spec.name} for {arch} was built from another spec (spec sha256 "
                f"{str(e.get('spec_sha256'))[:12]}..., this spec's {want[:12]}...; built from "
                f"{e.get('spec_path', '?')})",
                fix=f"rebuild the directory from this spec: `kgen compile <spec> --out {self.path}`")
        from .abi import KERNELS

        kernel = e.get("kernel")
        table = KERNELS.get(kernel) if isinstance(kernel, str) else None
        if table is None:
            raise _problem(f"{mf}: {spec.name} for {arch} is a {kernel!r} kernel, which this kgen does not know "
                           f"(it knows {', '.join(sorted(KERNELS))})", fix=f"rebuild with this kgen: --out {self.path}")
        table.check_manifest(e.get("abi") or {"missing": True}, f"{mf}: {spec.name} for {arch}")
        path = self.path / str(e.get("cubin", ""))
        try:
            data = path.read_bytes()
        except OSError as err:
            raise _problem(f"{path}: cannot read the cubin of {spec.name} for {arch} ({err.strerror})",
                           fix=f"rebuild with `kgen compile <spec> --out {self.path}`") from None
        if hashlib.sha256(data).hexdigest() != e.get("cubin_sha256"):
            raise _problem(f"{path}: the cubin's bytes do not match the manifest's sha256 (damaged or replaced)",
                           fix=f"rebuild with `kgen compile <spec> --out {self.path}`")
        return AotKernel(uri=spec.name, arch=arch, cubin=data, symbol=str(e["symbol"]), abi=dict(e["abi"]), entry=e)


# ---------------------------------------------------------------------------------------------
# writing


def entry(spec: Spec, compiled: Any, *, spec_path: Path | None = None) -> dict:
    """The manifest entry of one compiled kernel (a kgen.compile.CompiledKernel)."""
    from .abi import KERNELS
    from .render import KERNEL

    # a cache hit is keyed by the rendered sources, which spell the current ABI's Params struct
    abi = getattr(compiled, "abi", None) or KERNELS[KERNEL].manifest()
    return {"variant": spec.name, "arch": compiled.arch, "kernel": KERNEL, "spec_sha256": spec_hash(spec),
            "abi": abi, "symbol": compiled.symbol, "name_expression": compiled.name_expression,
            "cubin": cubin_name(spec.name, compiled.arch), "cubin_sha256": hashlib.sha256(compiled.cubin).hexdigest(),
            "registers": compiled.registers, "spill_bytes": compiled.spill_bytes,
            "spec_path": str(spec_path) if spec_path else None}


def write_dir(out: Path, kernels: Sequence[tuple[Spec, Any, Path | None]]) -> dict:
    """Write `out`: one cubin per (spec, CompiledKernel, spec path) and the manifest, all or none
    (kgen.files.write_all); cubins the new manifest does not list are removed. Returns the manifest."""
    from .files import write_all
    from .toolchain import nvrtc_version

    out = Path(out)
    _refuse_foreign(out)
    entries, seen = [], set()
    for spec, ck, path in kernels:
        key = (spec.name, ck.arch)
        if key in seen:
            continue
        seen.add(key)
        entries.append((entry(spec, ck, spec_path=path), ck.cubin))
    try:
        nvrtc = nvrtc_version()
    except Exception:  # noqa: BLE001 - information only
        nvrtc = None
    manifest = {"format": FORMAT, "nvrtc": nvrtc, "kernels": [e for e, _ in entries]}
    files: dict[Path, str | bytes] = {out / e["cubin"]: cubin for e, cubin in entries}
    files[out / MANIFEST] = json.dumps(manifest, indent=1) + "\n"
    try:
        write_all(files)  # every cubin and the manifest, or none of them
    except OSError as e:
        raise _problem(f"{out}: cannot write the AOT directory ({e.strerror or e})") from None
    for old in out.glob("*.cubin"):  # cubins of an earlier build that the manifest no longer lists
        if old not in files:
            old.unlink(missing_ok=True)
    return manifest


def _refuse_foreign(out: Path) -> None:
    if not out.exists():
        return
    if not out.is_dir():
        raise _problem(f"--out {out}: exists and is not a directory", code=2)
    try:
        fmt = json.loads((out / MANIFEST).read_text()).get("format")
    except (OSError, ValueError, AttributeError):
        fmt = None
    if fmt != FORMAT and any(out.iterdir()):
        raise _problem(f"--out {out}: an existing directory that is not a kgen AOT directory (no {MANIFEST} of "
                       f"format {FORMAT}); kgen replaces the whole directory, so it will not touch this one",
                       fix="pass a new or empty directory", code=2)


def write_command(paths: list[Path], archs: list[str] | None, out: Path, *, validate: bool = True) -> int:
    """`kgen compile PATH... --out DIR`: after the compile (cached: these are lookups), write DIR."""
    from .arch import check_option
    from .build import load_variants
    from .compile import compile_variant

    archs = check_option(archs)
    found, _ = load_variants(paths, validate)
    kernels = []
    for _variant, spec, path in found:
        for arch in archs or spec.targets:
            kernels.append((spec, compile_variant(spec, arch, spec_path=path), path))
    manifest = write_dir(out, kernels)
    sys.stderr.write(f"kgen: wrote {out / MANIFEST} ({len(manifest['kernels'])} cubins)\n")
    return 0
