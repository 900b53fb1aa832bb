"""Prepare the kit SGLang's top-k peer is built from (kgen.peer_sglang_topk), outside the project tree.

    python scripts/sglang_topk_peer.py prepare .peers/sglang_topk [--sglang-wheel W] [--tvm-ffi-wheel W]
    python scripts/sglang_topk_peer.py build .peers/sglang_topk   # the probe and the top-k (probe needs a GPU)
    python scripts/sglang_topk_peer.py compile .peers/sglang_topk # the top-k alone, no GPU (OFFLINE_DEFINES)

`prepare` takes SGLang's top-k and occupancy-probe sources (kgen.peer_sglang_topk.KIT_SOURCES) from the SGLang
wheel and the headers they include, followed through `#include` by scripts/sglang_peer.py's include_closure
into SGLang's `sglang/kernels/jit/include/` and tvm-ffi's `tvm_ffi/include/`, and tvm-ffi's runtime library
from the apache-tvm-ffi wheel SGLang pins (a cached one in the releases' wheels directory, else `pip download
--no-deps`). KIT.json records the wheels, their sha256 and the files. /.peers/ is git-ignored.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for p in (str(ROOT), str(ROOT / "scripts")):
    if p not in sys.path:
        sys.path.insert(0, p)

import sglang_peer as W  # noqa: E402 - the store peer's kit functions

from kgen import peer_sglang as S  # noqa: E402
from kgen import peer_sglang_topk as P  # noqa: E402


def find_tvm_ffi_wheel() -> Path | None:
    """A cached apache-tvm-ffi wheel of the pinned version (`make releases` caches it)."""
    return W.find_cached_wheel(f"apache_tvm_ffi-{S.TVM_FFI_VERSION}-*.whl")


def prepare(dest: Path, sglang_wheel: Path | None, tvm_wheel: Path | None) -> dict:
    sglang_wheel = sglang_wheel or W.find_sglang_wheel()
    if sglang_wheel is None or not sglang_wheel.is_file():
        raise SystemExit(f"no SGLang {S.SGLANG_VERSION} wheel: run `make releases` or pass --sglang-wheel")
    with tempfile.TemporaryDirectory() as td:
        tvm_wheel = tvm_wheel or find_tvm_ffi_wheel() or W.fetch_tvm_ffi_wheel(Path(td))
        with zipfile.ZipFile(sglang_wheel) as zs, zipfile.ZipFile(tvm_wheel) as zt:
            archives = [(zs, W.SGLANG_INCLUDE), (zt, W.TVM_INCLUDE)]
            files: dict[str, tuple[int, str]] = {}
            for src in P.KIT_SOURCES:
                member = W.SGLANG_JIT + src
                if member not in zs.namelist():
                    raise SystemExit(f"{sglang_wheel.name} has no {member}")
                files.update(W.include_closure(src, archives, (0, member)))
            for h in P.KIT_EXTRA_HEADERS:
                files.update(W.include_closure(f"{P.KIT_INCLUDE}/{h}", archives, (1, W.TVM_INCLUDE + h)))
            if P.KIT_LIB_MEMBER not in zt.namelist():
                raise SystemExit(f"{tvm_wheel.name} has no {P.KIT_LIB_MEMBER}")
            files[P.KIT_LIB] = (1, P.KIT_LIB_MEMBER)
            if dest.exists():
                shutil.rmtree(dest)
            for kit_path, (ai, member) in sorted(files.items()):
                target = dest / kit_path
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(archives[ai][0].read(member))
            (dest / P.KIT_LIB).chmod(0o755)
        record = {**W.wheels_record(sglang_wheel, tvm_wheel), "sources": list(P.KIT_SOURCES), "files": sorted(files)}
    (dest / P.KIT_RECORD).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    return record


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("prepare", help="extract the sources, their headers and tvm-ffi's library into DEST")
    p.add_argument("dest", type=Path)
    p.add_argument("--sglang-wheel", type=Path)
    p.add_argument("--tvm-ffi-wheel", type=Path)
    for name, what in (("build", "probe this GPU, then compile the top-k with its answers"),
                       ("compile", "compile the top-k with OFFLINE_DEFINES (no GPU needed)")):
        b = sub.add_parser(name, help=what)
        b.add_argument("kit", type=Path)
    a = ap.parse_args(argv)
    if a.cmd == "prepare":
        rec = prepare(a.dest, a.sglang_wheel, a.tvm_ffi_wheel)
        size = sum(f.stat().st_size for f in a.dest.rglob("*") if f.is_file())
        print(f"{a.dest}: {len(rec['files'])} files, {size / 1024:.0f} KiB (SGLang {S.SGLANG_VERSION}, "
              f"tvm-ffi {S.TVM_FFI_VERSION})")
        return 0
    try:
        if a.cmd == "build":
            defines = P.probe(a.kit)
            print(json.dumps(defines))
        else:
            defines = dict(P.OFFLINE_DEFINES)
        print(P.build(a.kit, defines=defines))
    except P.PeerAbsent as e:
        print(f"absent: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
