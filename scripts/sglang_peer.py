"""Prepare the kit SGLang's store-kernel peer is built from (kgen.peer_sglang), outside the project tree.

    python scripts/sglang_peer.py prepare .peers/sglang [--sglang-wheel W] [--tvm-ffi-wheel W]
    python scripts/sglang_peer.py build .peers/sglang      # compile kgen's launcher against it (nvcc)

`prepare` takes SGLang's JIT header (kgen.peer_sglang.KIT_HEADER) from the SGLang wheel `make releases`
cached (.releases/wheels/sglang-<SGLANG_VERSION>-*.whl, here or in the working directory) and the
headers it includes, followed through `#include` to the files that resolve in SGLang's
`sglang/kernels/jit/include/` or tvm-ffi's `tvm_ffi/include/` (the apache-tvm-ffi wheel SGLang pins:
given, or cached beside SGLang's wheel, else fetched there with `pip download --no-deps`): nothing
else. Headers that resolve in neither (CUDA's, the C++ library's, HIP's on the ROCm branches) are left
to the compiler. KIT.json records the
wheels, their sha256 and the files. /.peers/ is git-ignored (.git/info/exclude): the kit never enters
the project.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path, PurePosixPath

ROOT = Path(__file__).resolve().parents[1]
for _p in (str(ROOT), str(ROOT / "scripts")):
    if _p not in sys.path:
        sys.path.insert(0, _p)

from engine_releases import releases_dir, sha256_file  # noqa: E402 - the wheel cache make releases fills

from kgen import peer_sglang as P  # noqa: E402

SGLANG_JIT = "sglang/kernels/jit/"
SGLANG_INCLUDE = SGLANG_JIT + "include/"
TVM_INCLUDE = "tvm_ffi/include/"
_INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]([^>"]+)[>"]', re.M)


def find_cached_wheel(pattern: str) -> Path | None:
    """The first cached wheel matching `pattern` in the releases' wheel cache (engine_releases.releases_dir:
    KGEN_RELEASES_DIR or this checkout's .releases), else the working directory's .releases/wheels."""
    for d in (releases_dir() / "wheels", Path.cwd() / ".releases" / "wheels"):
        hits = sorted(d.glob(pattern))
        if hits:
            return hits[0]
    return None


def find_sglang_wheel() -> Path | None:
    """The cached SGLang wheel of P.SGLANG_VERSION."""
    return find_cached_wheel(f"sglang-{P.SGLANG_VERSION}-*.whl")


def wheels_record(sglang_wheel: Path, tvm_wheel: Path) -> dict:
    """What a kit's KIT.json says of the wheels it came from: version, file name and sha256 of each."""
    return {"sglang": {"version": P.SGLANG_VERSION, "wheel": sglang_wheel.name, "sha256": sha256_file(sglang_wheel)},
            "tvm_ffi": {"version": P.TVM_FFI_VERSION, "wheel": tvm_wheel.name, "sha256": sha256_file(tvm_wheel)}}


def fetch_tvm_ffi_wheel(into: Path) -> Path:
    """apache-tvm-ffi==P.TVM_FFI_VERSION from the package index (pip download --no-deps)."""
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "-d", str(into),
           f"apache-tvm-ffi=={P.TVM_FFI_VERSION}"]
    subprocess.run(cmd, check=True, timeout=300)
    hits = sorted(into.glob("apache_tvm_ffi-*.whl"))
    if not hits:
        raise SystemExit(f"pip download left no apache_tvm_ffi wheel in {into}")
    return hits[0]


def include_closure(header: str, archives: list[tuple[zipfile.ZipFile, str]], start: tuple[int, str]) -> dict:
    """{kit path: (archive index, member name)} of `start` and every header it includes that resolves in
    one of `archives`' include roots (or beside the including file)."""
    names = [set(z.namelist()) for z, _ in archives]
    out: dict[str, tuple[int, str]] = {header: start}
    todo = [(header, start)]
    while todo:
        kit_path, (ai, member) = todo.pop()
        text = archives[ai][0].read(member).decode("utf-8", "replace")
        for inc in _INCLUDE.findall(text):
            beside = str(PurePosixPath(member).parent / inc)
            hits = [(ai, beside, str(PurePosixPath(kit_path).parent / inc))] if beside in names[ai] else []
            hits += [(j, root + inc, f"{P.KIT_INCLUDE}/{inc}") for j, (_, root) in enumerate(archives)
                     if root + inc in names[j]]
            if not hits:
                continue  # a toolkit or system header
            j, m, k = hits[0]
            if k not in out:
                out[k] = (j, m)
                todo.append((k, (j, m)))
    return out


def prepare(dest: Path, sglang_wheel: Path | None, tvm_wheel: Path | None) -> dict:
    sglang_wheel = sglang_wheel or find_sglang_wheel()
    if sglang_wheel is None or not sglang_wheel.is_file():
        raise SystemExit(f"no SGLang {P.SGLANG_VERSION} wheel: run `make releases` or pass --sglang-wheel")
    if tvm_wheel is None:  # the download cache beside SGLang's wheel, else the package index into it
        cached = sorted(sglang_wheel.parent.glob(f"apache_tvm_ffi-{P.TVM_FFI_VERSION}-*.whl"))
        tvm_wheel = cached[0] if cached else None
    with tempfile.TemporaryDirectory() as td:
        if tvm_wheel is None:
            into = sglang_wheel.parent if os.access(sglang_wheel.parent, os.W_OK) else Path(td)
            tvm_wheel = fetch_tvm_ffi_wheel(into)
        with zipfile.ZipFile(sglang_wheel) as zs, zipfile.ZipFile(tvm_wheel) as zt:
            archives = [(zs, SGLANG_INCLUDE), (zt, TVM_INCLUDE)]
            header_member = SGLANG_JIT + P.KIT_HEADER
            if header_member not in zs.namelist():
                raise SystemExit(f"{sglang_wheel.name} has no {header_member}")
            files = include_closure(P.KIT_HEADER, archives, (0, header_member))
            if dest.exists():
                shutil.rmtree(dest)
            for kit_path, (ai, member) in sorted(files.items()):
                target = dest / kit_path
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(archives[ai][0].read(member))
        record = {**wheels_record(sglang_wheel, tvm_wheel), "files": sorted(files)}
    (dest / P.KIT_RECORD).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    return record


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("prepare", help="extract the header set into DEST")
    p.add_argument("dest", type=Path)
    p.add_argument("--sglang-wheel", type=Path)
    p.add_argument("--tvm-ffi-wheel", type=Path)
    b = sub.add_parser("build", help="compile kgen's launcher against the kit (nvcc)")
    b.add_argument("kit", type=Path)
    a = ap.parse_args(argv)
    if a.cmd == "prepare":
        rec = prepare(a.dest, a.sglang_wheel, a.tvm_ffi_wheel)
        size = sum(f.stat().st_size for f in a.dest.rglob("*") if f.is_file())
        print(f"{a.dest}: {len(rec['files'])} files, {size / 1024:.0f} KiB (SGLang {P.SGLANG_VERSION}, "
              f"tvm-ffi {P.TVM_FFI_VERSION})")
        return 0
    try:
        print(P.build(a.kit))
    except P.PeerAbsent as e:
        print(f"absent: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
