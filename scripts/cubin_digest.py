"""The machine code of every shipped kernel, one digest per cubin: what a formatting-only change of the
headers (clang-format) must leave unchanged.

    KGEN_CACHE_DIR=$(mktemp -d) python scripts/cubin_digest.py > before.txt
    (change the headers)
    KGEN_CACHE_DIR=$(mktemp -d) python scripts/cubin_digest.py > after.txt && cmp before.txt after.txt

or against a commit, from a plain export of its tree (one cache for both: the writers' cubins are reused
where their headers did not change):

    git archive main | tar -x -C /tmp/before
    KGEN_CACHE_DIR=/tmp/c PYTHONPATH=/tmp/before python /tmp/before/scripts/cubin_digest.py --text > before.txt
    KGEN_CACHE_DIR=/tmp/c python scripts/cubin_digest.py --text > after.txt && cmp before.txt after.txt

Compiles (NVRTC, no GPU needed) every shipped writer variant and, where a variant is readable, its
reader under several tunings and its top-k kernels, for every target. A digest is the sha256 of every ELF section of the
cubin but the string tables, with the symbol tables' name offsets zeroed: NVRTC names internal
symbols after its temporary directory, so two compiles of the same source differ there and only there.
`--text`: the machine code alone (the .text sections), for a change that may move constants in the
cubin's data (a static data member added or removed) but must leave every instruction as it was.
`--default-tuning`: the readers with their shipped tuning only (a third of the compiles).
"""

from __future__ import annotations

import hashlib
import struct
from pathlib import Path

from kgen.abi import INDEXER_LOGITS, KERNELS, NORM_ROPE_STORE
from kgen.compile import compile_rendered
from kgen.diagnostics import KgenError
from kgen.reader_layout import readable
from kgen.render import render_kernel, render_reader, render_variant
from kgen.validate import validate_paths

ROOT = Path(__file__).resolve().parents[1]
READ_SIDE = tuple(k for k in KERNELS.values() if k not in (NORM_ROPE_STORE, INDEXER_LOGITS))  # the top-k kernels
TUNINGS = (None, {"kReaderWgmma": 0}, {"kReaderPrefetch": 1}, {"kReaderHeadPasses": 1}, {"kReaderWgL2Prefetch": 1},
           {"kReaderMinBlocks": 2}, {"kReaderWgTma": 0}, {"kReaderWgEvictFirst": 1},
           {"kReaderWgTmaStages": 12, "kReaderWgConsumers": 3})
SHT_NOBITS = 8
SYM_BYTES = 24  # Elf64_Sym; st_name is its first 4 bytes


def digest(cubin: bytes, text_only: bool = False) -> str:
    shoff = struct.unpack_from("<Q", cubin, 0x28)[0]
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", cubin, 0x3A)
    headers = [struct.unpack_from("<IIQQQQ", cubin, shoff + i * shentsize) for i in range(shnum)]
    names = headers[shstrndx][4]
    h = hashlib.sha256()
    for name_at, kind, flags, _addr, offset, size in headers:
        name = cubin[names + name_at:cubin.index(b"\0", names + name_at)]
        if name.endswith(b"strtab") or (text_only and not name.startswith(b".text")):
            continue
        body = cubin[offset:offset + size] if kind != SHT_NOBITS else struct.pack("<Q", size)
        if name.endswith(b"symtab"):
            body = b"".join(b"\0\0\0\0" + body[i + 4:i + SYM_BYTES] for i in range(0, len(body), SYM_BYTES))
        h.update(name + b"\0" + struct.pack("<IQ", kind, flags) + body)
    return h.hexdigest()


def main() -> None:
    import sys

    text_only = "--text" in sys.argv[1:]
    tunings = (None,) if "--default-tuning" in sys.argv[1:] else TUNINGS
    specs = {s.name: s for s in validate_paths(sorted((ROOT / "specs").glob("*.yaml"))).specs()}
    for name, spec in sorted(specs.items()):
        for arch in spec.targets:
            writer = compile_rendered(render_variant(spec), arch, progress=None)
            print(f"writer {name} {arch} {digest(writer.cubin, text_only)}")
            if not readable(spec):
                continue
            for tune in tunings:
                try:
                    kernel = compile_rendered(render_reader(spec, tune=tune), arch, progress=None)
                except KgenError as e:  # a tuning this spec or arch does not take
                    print(f"reader {name} {arch} {tune} refused [{e.problems[0].rule}]")
                    continue
                print(f"reader {name} {arch} {tune} {digest(kernel.cubin, text_only)}")
            for kabi in READ_SIDE:
                kernel = compile_rendered(render_kernel(spec, kabi), arch, progress=None)
                print(f"{kabi.kernel} {name} {arch} {digest(kernel.cubin, text_only)}")


if __name__ == "__main__":
    main()
