"""Prebuilt cubins: a directory of every kernel of every variant plus a manifest, loadable without a compiler.

    kgen compile specs/dsv4.yaml specs/dsv32_indexer.yaml --out build/kgen-aot   # writes the directory
    KGEN_AOT_DIR=build/kgen-aot python serve.py     # the ops load from it (or kgen.ops.use_aot(dir))

Layout of DIR (a wheel can ship it as package data):
    manifest.json                        {"format": "kgen-aot/1", "kernels": [entry, ...]}
    <uri>[.t<tuning hash>].<arch>.cubin  one per (variant, kernel, tuning, arch)

Every kernel of the registry (kgen.abi.KERNELS) that a spec has is written, with every tuning a launch
may load (`KernelAbi.tunings`: the reader's rings per launch shape). An entry records what the loader
checks before it hands a cubin to the driver:
    variant, arch, kernel, tune  which kernel template (its ABI table is kgen.abi.KERNELS[kernel]) and
                                 tuning ("" the default; kgen.abi.tune_key)
    spec_sha256                  sha256 of the spec's canonical JSON (kgen.resolve.spec_digest)
    abi                          `KernelAbi.manifest()` at build time: kernel, ABI version, Params size
    symbol, name_expression      the mangled kernel name and the C++ expression it names
    cubin, cubin_sha256          file name and its content hash (a damaged file is refused)
plus information only: registers, spill_bytes, spec_path, nvrtc.

The loader trusts nothing it can recompute: the symbol and the cubin's file name are derived from the
spec and the table (a recorded one that differs is refused, and the cubin must hold the symbol), cubins
are plain files inside DIR (no path, no link, no FIFO: read non-blocking), an entry listed twice or with
a field of the wrong type is a located error naming the manifest and the entry. Reading a directory
imports neither jinja2 nor NVRTC (nor cuda.core). Writing one (`write_dir`) happens under DIR's lock
(kgen.files.locked: two concurrent `kgen compile --out DIR` take turns, and neither sees the other's
half-written directory) and writes the cubins and the manifest all or none (kgen.files.write_all); an
existing directory that is not a kgen AOT directory is refused, checked under the same lock.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .abi import KERNELS, NORM_ROPE_STORE, KernelAbi, tune_key
from .cache import lock_timeout
from .compile import CompiledKernel
from .diagnostics import KgenError, Problem
from .files import LockBusy, locked, unfinished, write_all
from .resolve import spec_digest
from .source import NotRegularFile, read_regular
from .spec import Spec

FORMAT = "kgen-aot/1"
MANIFEST = "manifest.json"
MAX_MANIFEST_BYTES = 16 << 20
MAX_CUBIN_BYTES = 256 << 20


spec_hash = spec_digest  # the manifest's spec_sha256


def cubin_name(uri: str, arch: str, tune: str = "") -> str:
    """The file of a kernel's cubin: its cache uri, a short hash of a non-default tuning, the arch."""
    t = f".t{hashlib.sha256(tune.encode()).hexdigest()[:12]}" if tune else ""
    return f"{uri}{t}.{arch}.cubin"


def _problem(message: str, fix: str = "", code: int = 1) -> KgenError:
    return KgenError([Problem("aot", message, fix=fix)], exit_code=code)


# ---------------------------------------------------------------------------------------------
# reading

_FIELDS: dict[str, type | tuple[type, ...]] = {
    "variant": str, "arch": str, "kernel": str, "tune": str, "spec_sha256": str, "abi": dict, "symbol": str,
    "name_expression": str, "cubin": str, "cubin_sha256": str,
}
_OPTIONAL = {"tune": ""}


def _read(path: Path, limit: int, what: str, rebuild: str) -> bytes:
    """The bytes of a regular file that is not a symlink (never blocks on a FIFO)."""
    try:
        if stat.S_ISLNK(os.lstat(path).st_mode):
            raise _problem(f"{path}: {what} is a symbolic link; kgen reads only plain files of the directory",
                           fix=rebuild)
        return read_regular(path, limit)
    except NotRegularFile as e:
        raise _problem(f"{path}: {what} is {e.kind}, not a regular file", fix=rebuild) from None
    except FileNotFoundError:
        raise _problem(f"{path}: no such file ({what})", fix=rebuild, code=2) from None
    except OSError as e:
        raise _problem(f"{path}: cannot read {what} ({e.strerror or e})", fix=rebuild) from None


class AotDir:
    """A directory written by `write_dir`, its manifest read and checked once."""

    def __init__(self, path: Path):
        self.path = Path(path)
        mf = self.path / MANIFEST
        rebuild = f"write it with `kgen compile SPEC... --out {self.path}`"
        if not self.path.is_dir():
            raise _problem(f"{self.path}: not a directory, so no kgen AOT directory", fix=rebuild, code=2)
        raw = _read(mf, MAX_MANIFEST_BYTES, "the manifest", rebuild)
        try:
            data = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as e:
            raise _problem(f"{mf}: unreadable manifest ({e})", fix=rebuild) from None
        if not isinstance(data, dict) or data.get("format") != FORMAT or not isinstance(data.get("kernels"), list):
            got = data.get("format") if isinstance(data, dict) else type(data).__name__
            raise _problem(f"{mf}: manifest format {got!r}, this kgen reads {FORMAT!r}", fix=rebuild)
        self.manifest = data
        self.entries: dict[tuple[str, str, str, str], dict] = {}
        for i, item in enumerate(data["kernels"]):
            entry = self._entry(mf, i, item)
            key = (entry["variant"], entry["arch"], entry["kernel"], entry["tune"])
            if key in self.entries:
                raise _problem(f"{mf}: kernels[{i}]: {key[0]} {key[2]} for {key[1]}"
                               f"{' (tune ' + key[3] + ')' if key[3] else ''} is listed twice", fix=rebuild)
            self.entries[key] = entry

    @staticmethod
    def _entry(mf: Path, i: int, item: Any) -> dict:
        where = f"{mf}: kernels[{i}]"
        if not isinstance(item, dict):
            raise _problem(f"{where}: an entry must be an object, got {type(item).__name__}")
        out = dict(item)
        for name, kind in _FIELDS.items():
            if name not in out and name in _OPTIONAL:
                out[name] = _OPTIONAL[name]
            if name not in out:
                raise _problem(f"{where}: no '{name}' field", fix="rebuild the directory with this kgen")
            if not isinstance(out[name], kind):
                want = kind.__name__ if isinstance(kind, type) else "/".join(k.__name__ for k in kind)
                raise _problem(f"{where}: '{name}' must be a {'object' if want == 'dict' else want}, got "
                               f"{type(out[name]).__name__} {json.dumps(out[name])[:60]}")
        return out

    def variants(self) -> list[str]:
        return sorted({v for v, *_ in self.entries})

    def find(self, spec: Spec, arch: str, kabi: KernelAbi = NORM_ROPE_STORE,
             tune: Mapping[str, int] | None = None) -> CompiledKernel:
        """The cubin of kernel `kabi` of `spec` for `arch` and `tune`, after every check (else a KgenError
        saying which and why)."""
        mf = self.path / MANIFEST
        t = tune_key(tune)
        what = f"{spec.name} {kabi.kernel}" + (f" (tune {t})" if t else "")
        rebuild = f"rebuild it with `kgen compile <spec of {spec.name}> --arch {arch} --out {self.path}`"
        e = self.entries.get((spec.name, arch, kabi.kernel, t))
        if e is None:
            archs = sorted(a for v, a, k, tt in self.entries if (v, k, tt) == (spec.name, kabi.kernel, t))
            have = (f"it has {what} only for {', '.join(archs)}" if archs
                    else f"its variants: {', '.join(self.variants()) or 'none'}")
            raise _problem(f"{mf}: no cubin of {what} for {arch} ({have})", fix=rebuild)
        want = spec_digest(spec)
        if e["spec_sha256"] != want:
            raise _problem(
                f"{mf}: the cubin of {what} for {arch} was built from another spec (spec sha256 "
                f"{e['spec_sha256'][:12]}..., this spec's {want[:12]}...; built from {e.get('spec_path', '?')})",
                fix=f"rebuild the directory from this spec: `kgen compile <spec> --out {self.path}`")
        table = KERNELS.get(e["kernel"])
        if table is not kabi:
            raise _problem(f"{mf}: {what} for {arch} is a {e['kernel']!r} kernel, which this kgen does not know",
                           fix=rebuild)
        kabi.check_manifest(e["abi"], f"{mf}: {what} for {arch}")
        uri, symbol, expr = kabi.uri(spec.name), kabi.symbol(spec.name), kabi.name_expression(spec.name)
        for field, right in (("symbol", symbol), ("name_expression", expr), ("cubin", cubin_name(uri, arch, t))):
            if e[field] != right:
                raise _problem(f"{mf}: {what} for {arch}: '{field}' is {e[field]!r}, but this spec's is {right!r} "
                               "(an entry edited or copied from another kernel)", fix=rebuild)
        path = self.path / e["cubin"]
        data = _read(path, MAX_CUBIN_BYTES, f"the cubin of {what} for {arch}", rebuild)
        if hashlib.sha256(data).hexdigest() != e["cubin_sha256"]:
            raise _problem(f"{path}: the cubin's bytes do not match the manifest's sha256 (damaged or replaced)",
                           fix=rebuild)
        if symbol.encode() not in data:
            raise _problem(f"{path}: the cubin holds no kernel {symbol} ({what}): it is another kernel's",
                           fix=rebuild)
        return CompiledKernel(uri=uri, arch=arch, cubin=data, symbol=symbol, name_expression=expr,
                              registers=e.get("registers") if isinstance(e.get("registers"), int) else None,
                              spill_bytes=e.get("spill_bytes") if isinstance(e.get("spill_bytes"), int) else None,
                              cached=True, seconds=0.0, log="", cache_dir=self.path, abi=dict(e["abi"]))


# ---------------------------------------------------------------------------------------------
# writing


def entry(spec: Spec, compiled: Any, kabi: KernelAbi = NORM_ROPE_STORE, tune: Mapping[str, int] | None = None, *,
          spec_path: Path | None = None) -> dict:
    """The manifest entry of one compiled kernel (a kgen.compile.CompiledKernel of kernel `kabi`)."""
    t = tune_key(tune)
    # a cache hit is keyed by the rendered sources, which spell the current ABI's Params struct
    abi = getattr(compiled, "abi", None) or kabi.manifest()
    return {"variant": spec.name, "arch": compiled.arch, "kernel": kabi.kernel, "tune": t,
            "spec_sha256": spec_digest(spec), "abi": abi, "symbol": compiled.symbol,
            "name_expression": compiled.name_expression, "cubin": cubin_name(kabi.uri(spec.name), compiled.arch, t),
            "cubin_sha256": hashlib.sha256(compiled.cubin).hexdigest(),
            "registers": compiled.registers, "spill_bytes": compiled.spill_bytes,
            "spec_path": str(spec_path) if spec_path else None}


Built = tuple[Spec, Any, KernelAbi, "Mapping[str, int] | None", "Path | None"]


def check_out(out: Path) -> None:
    """`--out DIR` is usable (a new or empty directory, or a kgen AOT directory), checked before any work."""
    out = Path(out)
    try:
        if out.is_dir():
            with locked(out, lock_timeout()):  # not while another kgen is half-way through writing it
                _refuse_foreign(out)
        else:
            _refuse_foreign(out)
    except LockBusy:
        raise _busy(out) from None


def write_dir(out: Path, kernels: Sequence[Built], *, nvrtc: Any = None) -> dict:
    """Write `out`: one cubin per (spec, CompiledKernel, kernel table, tuning, spec path) and the manifest,
    all or none (kgen.files.write_all), under the directory's lock; cubins the new manifest does not list
    are removed. Returns the manifest."""
    out = Path(out)
    check_out(out)  # before any work; checked again under the lock below
    entries, seen = [], set()
    for spec, ck, kabi, tune, path in kernels:
        e = entry(spec, ck, kabi, tune, spec_path=path)
        key = (e["variant"], e["arch"], e["kernel"], e["tune"])
        if key in seen:
            continue
        seen.add(key)
        entries.append((e, ck.cubin))
    manifest = {"format": FORMAT, "nvrtc": nvrtc, "kernels": [e for e, _ in entries]}
    files: dict[Path, str | bytes] = {out / e["cubin"]: cubin for e, cubin in entries}
    files[out / MANIFEST] = json.dumps(manifest, indent=1) + "\n"
    try:
        out.mkdir(parents=True, exist_ok=True)
        with locked(out, lock_timeout()):
            _refuse_foreign(out)  # checked again: another writer may have finished while this one waited
            write_all(files)  # every cubin and the manifest, or none of them
            for old in out.glob("*.cubin"):  # cubins of an earlier build that the manifest no longer lists
                if old not in files:
                    old.unlink(missing_ok=True)
    except LockBusy:
        raise _busy(out) from None
    except OSError as e:
        raise _problem(f"{out}: cannot write the AOT directory ({e.strerror or e})") from None
    return manifest


def _busy(out: Path) -> KgenError:
    return _problem(f"{out}: another kgen has held the directory's lock for {lock_timeout():.0f} s",
                    fix="wait for it, or raise KGEN_LOCK_TIMEOUT")


def _refuse_foreign(out: Path) -> None:
    if not out.exists() and not out.is_symlink():
        return
    if not out.is_dir():
        raise _problem(f"--out {out}: exists and is not a directory", code=2)
    try:
        fmt = json.loads(read_regular(out / MANIFEST, MAX_MANIFEST_BYTES)).get("format")
    except (OSError, ValueError, AttributeError, NotRegularFile):
        fmt = None
    if fmt == FORMAT:
        return
    left = unfinished(out)  # what an interrupted kgen write left: the next write_all recovers it
    if any(p.name not in left for p in out.iterdir()):
        raise _problem(f"--out {out}: an existing directory that is not a kgen AOT directory (no {MANIFEST} of "
                       f"format {FORMAT}); kgen replaces the whole directory, so it will not touch this one",
                       fix="pass a new or empty directory", code=2)
