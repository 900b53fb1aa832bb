"""The compile cache, on a small fake rendered variant (independent of templates/)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from kgen import cache as C
from kgen.compile import CompileError, compile_options, compile_rendered, first_errors, lookup, parse_ptxas, variant_key
from kgen.diagnostics import KgenError

ARCH = "sm_90a"


@dataclass(frozen=True)
class FakeRendered:
    uri: str
    files: dict
    kernel_file: str
    name_expression: str


KERNEL = """#include "fake_top.h"
#include "fake_cfg.h"
#include <cuda_bf16.h>
template <int N> __global__ void __launch_bounds__(256) fake_kernel(float* x) {
  static_assert(N > 0, "[head-dim] N must be > 0");
  x[threadIdx.x] = x[threadIdx.x] * (N * FAKE_SCALE * CFG);
}
template __global__ void fake_kernel<@N@>(float*);
"""


def fake(n: int = 4, uri: str = "fake_variant", cfg: int = 3) -> FakeRendered:
    return FakeRendered(uri, {f"{uri}.cu": KERNEL.replace("@N@", str(n)), "fake_cfg.h": f"#define CFG {cfg}\n"},
                        f"{uri}.cu", f"fake_kernel<{n}>")


@pytest.fixture
def inc(tmp_path) -> Path:
    d = tmp_path / "include"
    (d / "sub").mkdir(parents=True)
    (d / "fake_top.h").write_text('#pragma once\n#include "sub/fake_inner.h"\n')
    (d / "sub" / "fake_inner.h").write_text("#pragma once\n#define FAKE_SCALE 2.0f\n")
    return d


@pytest.fixture
def cache(tmp_path) -> C.Cache:
    return C.Cache(tmp_path / "cache", timeout=0.5)


def build(rv, cache, inc, **kw):
    return compile_rendered(rv, ARCH, include_dirs=[inc], cache=cache, progress=kw.pop("progress", None), **kw)


def test_miss_then_hit(cache, inc, capsys):
    cold = compile_rendered(fake(), ARCH, include_dirs=[inc], cache=cache)
    err = capsys.readouterr().err
    assert "compiling fake_variant for sm_90a ..." in err and "compiled fake_variant for sm_90a in" in err
    assert not cold.cached and cold.cubin and cold.symbol == "_Z11fake_kernelILi4EEvPf"
    assert cold.registers and cold.spill_bytes == 0
    assert cold.cache_dir.parent == cache.root / "fake_variant" and cold.cache_dir.name.startswith("sm_90a-")
    warm = compile_rendered(fake(), ARCH, include_dirs=[inc], cache=cache)
    assert capsys.readouterr().err == ""  # hits are quiet
    assert warm.cached and warm.cubin == cold.cubin and warm.symbol == cold.symbol
    assert (warm.registers, warm.spill_bytes, warm.log) == (cold.registers, cold.spill_bytes, cold.log)
    meta = json.loads((warm.cache_dir / "meta.json").read_text())
    assert meta["symbol_mapping"] == {"fake_kernel<4>": cold.symbol}
    assert meta["uri"] == "fake_variant" and meta["arch"] == ARCH and len(meta["key"]) == 64
    assert (warm.cache_dir / "src" / "fake_variant.cu").read_text() == fake().files["fake_variant.cu"]


def test_reload_with_symbol_mapping(cache, inc):
    from cuda.core import ObjectCode

    k = build(fake(), cache, inc)
    obj = k.object_code()
    assert isinstance(obj, ObjectCode) and obj.symbol_mapping == {"fake_kernel<4>": k.symbol.encode()}


def key(rv, inc, arch=ARCH):
    return variant_key(rv, arch, [inc])


def test_key_changes_with_every_input(inc, monkeypatch):
    base = key(fake(), inc)
    assert key(fake(), inc) == base  # deterministic
    assert key(fake(5), inc) != base  # kernel source
    assert key(fake(cfg=4), inc) != base  # a rendered sibling header
    assert key(fake(), inc, "sm_100a") != base  # arch
    (inc / "sub" / "fake_inner.h").write_text("#pragma once\n#define FAKE_SCALE 3.0f\n")
    assert key(fake(), inc) != base  # a header two includes deep
    (inc / "sub" / "fake_inner.h").write_text("#pragma once\n#define FAKE_SCALE 2.0f\n")
    assert key(fake(), inc) == base
    import kgen.compile as K

    monkeypatch.setattr(K, "compile_options", lambda uri, arch: {**compile_options(uri, arch), "fma": True})
    assert key(fake(), inc) != base  # an option
    monkeypatch.undo()
    from kgen.toolchain import toolchain_fingerprint

    tc = toolchain_fingerprint()
    other = C.compute_key(files=fake().files, kernel_file="fake_variant.cu", name_expression="fake_kernel<4>",
                          arch=ARCH, options=compile_options("fake_variant", ARCH), include_dirs=[inc],
                          toolchain={**tc, "nvrtc": "NVRTC 99.0"})
    assert other != base  # the NVRTC version
    monkeypatch.setattr(C, "FORMAT", C.FORMAT + 1)
    assert key(fake(), inc) != base  # kgen's cache format


def test_key_ignores_mtimes_and_location(inc, tmp_path):
    base = key(fake(), inc)
    hdr = inc / "sub" / "fake_inner.h"
    os.utime(hdr, (1, 1))
    assert key(fake(), inc) == base
    moved = tmp_path / "elsewhere"
    inc.rename(moved)
    assert key(fake(), moved) == base  # headers are named relative to their include dir


def test_include_closure_lists_kgen_headers_only(inc):
    rv = fake()
    names = [n for n, _ in C.include_closure(rv.files, rv.kernel_file, [inc])]
    assert names == ["fake_top.h", "rendered:fake_cfg.h", "sub/fake_inner.h"]  # cuda_bf16.h: the toolchain


def test_changed_header_recompiles(cache, inc):
    a = build(fake(), cache, inc)
    (inc / "sub" / "fake_inner.h").write_text("#pragma once\n#define FAKE_SCALE 5.0f\n")
    b = build(fake(), cache, inc)
    assert not b.cached and b.cache_dir != a.cache_dir and b.cubin != a.cubin


@pytest.mark.parametrize("damage", ["corrupt_cubin", "truncate_cubin", "truncate_meta", "missing_cubin",
                                    "missing_meta", "wrong_key", "garbage_meta"])
def test_damaged_entry_is_rebuilt(cache, inc, damage, capsys):
    good = build(fake(), cache, inc)
    d = good.cache_dir
    cubin, meta = d / "kernel.cubin", d / "meta.json"
    if damage == "corrupt_cubin":
        data = bytearray(cubin.read_bytes())
        data[len(data) // 2] ^= 0xFF
        cubin.write_bytes(bytes(data))
    elif damage == "truncate_cubin":
        cubin.write_bytes(cubin.read_bytes()[:100])
    elif damage == "truncate_meta":
        meta.write_text(meta.read_text()[:40])
    elif damage == "missing_cubin":
        cubin.unlink()
    elif damage == "missing_meta":
        meta.unlink()
    elif damage == "wrong_key":
        m = json.loads(meta.read_text())
        meta.write_text(json.dumps({**m, "key": "0" * 64}))
    else:
        meta.write_bytes(b"\xff\xfe[1, 2")
    assert lookup(fake(), ARCH, include_dirs=[inc], cache=cache) is None
    capsys.readouterr()
    again = compile_rendered(fake(), ARCH, include_dirs=[inc], cache=cache)
    assert "damaged" in capsys.readouterr().err
    assert not again.cached and again.cubin == good.cubin and again.cache_dir == d
    assert build(fake(), cache, inc).cached
    assert not [p for p in d.parent.iterdir() if p.name.startswith((".tmp", ".trash"))]


def test_lock_timeout_names_the_lock(cache, inc):
    from filelock import FileLock

    rv = fake(7)
    lock_path = cache.lock_path(rv.uri, ARCH, key(rv, inc))
    lock_path.parent.mkdir(parents=True)
    with FileLock(str(lock_path)):
        t = threading.Thread  # the holder is this thread; the compile runs in another
        box = {}

        def run():
            try:
                build(rv, cache, inc)
            except KgenError as e:
                box["e"] = e

        th = t(target=run)
        th.start()
        th.join(10)
    e = box["e"]
    text = e.problems[0].format()
    assert str(lock_path) in text and "timed out" in text and e.problems[0].rule == "cache-lock"


def test_failure_shows_first_error_and_rendered_path(cache, inc):
    with pytest.raises(CompileError) as ei:
        build(fake(0), cache, inc, spec_path=Path("specs/broken.yaml"))
    e = ei.value
    text = e.problems[0].format()
    assert e.rule == "head-dim" and e.problems[0].rule == "head-dim"
    assert 'error: static assertion failed with "[head-dim] N must be > 0"' in text
    assert str(e.source_path) in text and e.source_path.is_file()
    assert f"{e.source_path}(5): error" in text  # editors can jump to it
    assert "specs/broken.yaml" in text
    assert (e.source_path.parent / "nvrtc.log").read_text().count("static assertion failed") == 1
    assert "Traceback" not in text


def test_failure_without_twin_is_a_compile_error(cache, inc):
    rv = fake()
    rv = replace(rv, files={**rv.files, "fake_cfg.h": "#define CFG (\n"})
    with pytest.raises(CompileError) as ei:
        build(rv, cache, inc)
    assert ei.value.rule is None and ei.value.problems[0].rule == "compile"
    assert "error" in ei.value.problems[0].message


def test_unwritable_cache_is_a_user_error(tmp_path, inc):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(KgenError) as ei:
        build(fake(), C.Cache(blocker / "cache"), inc)
    assert ei.value.problems[0].rule == "cache-dir" and "KGEN_CACHE_DIR" in ei.value.problems[0].format()


def test_cache_root_env(monkeypatch, tmp_path):
    monkeypatch.setenv("KGEN_CACHE_DIR", str(tmp_path / "x"))
    assert C.cache_root() == tmp_path / "x"
    monkeypatch.delenv("KGEN_CACHE_DIR")
    assert C.cache_root().name == "kgen"


def test_parse_ptxas():
    log = ("ptxas info    : Function properties for f\n"
           "ptxas         .     24 bytes stack frame, 8 bytes spill stores, 12 bytes spill loads\n"
           "ptxas info    : Used 255 registers, used 1 barriers\n"
           "ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
           "ptxas info    : Used 40 registers\n")
    assert parse_ptxas(log) == {"registers": 255, "spill_bytes": 20, "stack_bytes": 24}
    assert parse_ptxas("") == {"registers": None, "spill_bytes": None, "stack_bytes": None}


def test_first_errors_skips_summary():
    log = 'a.cu(3): error: x\n  code\n  ^\na.cu(9): error: y\n\n2 errors detected in the compilation of "a.cu".\n'
    assert first_errors(log) == ["a.cu(3): error: x", "a.cu(9): error: y"]


# a subprocess: a cache hit must not import cuda-python; concurrent compiles build once
_CHILD = """
import sys
from pathlib import Path
sys.path.insert(0, {tests!r})
from test_cache import fake
from kgen.cache import Cache
from kgen.compile import compile_rendered, lookup
inc = [Path({inc!r})]
if sys.argv[1] == "lookup":
    k = lookup(fake(), "sm_90a", include_dirs=inc, cache=Cache(Path({root!r})))
    print(k is not None and k.cached, "cuda.core" in sys.modules, "cuda.bindings" in sys.modules)
else:
    k = compile_rendered(fake(11), "sm_90a", include_dirs=inc, cache=Cache(Path({root!r}), timeout=60))
    print(k.cached, k.symbol)
"""


def _child(tmp_path, cache, inc) -> Path:
    p = tmp_path / "child.py"
    p.write_text(_CHILD.format(tests=str(Path(__file__).parent), inc=str(inc), root=str(cache.root)))
    return p


def test_lookup_does_not_import_cuda(cache, inc, tmp_path):
    build(fake(), cache, inc)
    out = subprocess.run([sys.executable, str(_child(tmp_path, cache, inc)), "lookup"], capture_output=True,
                         text=True, check=True).stdout.split()
    assert out == ["True", "False", "False"]


def test_concurrent_processes_compile_once(cache, inc, tmp_path):
    child = _child(tmp_path, cache, inc)
    procs = [subprocess.Popen([sys.executable, str(child), "build"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for _ in range(3)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    cached = sorted(o.split()[0] for o, _ in outs)
    assert cached == ["False", "True", "True"]  # one compiled, the others waited and loaded it
    assert sum(e.count("compiling fake_variant") for _, e in outs) == 1
    assert len({o.split()[1] for o, _ in outs}) == 1


_FAKE_NVRTC = """
int nvrtcVersion(int* major, int* minor) { *major = 12; *minor = 1; return 0; }
int nvrtcGetNumSupportedArchs(int* n) { *n = 1; return 0; }
int nvrtcGetSupportedArchs(int* archs) { archs[0] = 90; return 0; }
"""


def test_the_key_names_the_nvrtc_a_preload_puts_in_place_of_the_wheels(tmp_path):
    """The NVRTC version every compile key holds is the library that compiles: cuda-python takes a libnvrtc the
    process already loaded under the wheel's soname before the wheel's file, so under an LD_PRELOAD (as
    scripts/nvrtc_image.sh's) the key must name the preloaded one, else an image compile finds the pinned NVRTC's
    cubins and compiles nothing. A stand-in library of that soname, preloaded into a child, is what it names."""
    import shutil

    from kgen.toolchain import nvrtc_library

    wheel = nvrtc_library()
    cc = shutil.which("cc") or shutil.which("gcc")
    if wheel is None or cc is None:
        pytest.skip("no NVRTC wheel or no C compiler")
    src, fake = tmp_path / "fake_nvrtc.c", tmp_path / "fake_nvrtc.so"
    src.write_text(_FAKE_NVRTC)
    subprocess.run([cc, "-shared", "-fPIC", f"-Wl,-soname,{wheel.name}", str(src), "-o", str(fake)], check=True)
    ask = [sys.executable, "-c", "from kgen.toolchain import nvrtc_version; print(nvrtc_version())"]
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    preloaded = subprocess.run(ask, env={**env, "LD_PRELOAD": str(fake)}, capture_output=True, text=True, check=True)
    plain = subprocess.run(ask, env=env, capture_output=True, text=True, check=True)
    assert preloaded.stdout.strip() == "NVRTC 12.1"
    assert plain.stdout.strip().startswith("NVRTC ") and plain.stdout.strip() != "NVRTC 12.1"  # the wheel's own
