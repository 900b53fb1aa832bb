"""Prebuilt cubins: `kgen compile ... --out DIR` writes cubins + a manifest; kgen.ops reads them in a
process where importing jinja2, NVRTC or cuda.core fails, and refuses a cubin built from another
spec, for another kernel ABI, or with changed bytes. The CPU parts need NVRTC only to build the
directory (no GPU); loading onto a GPU runs only where there is one."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from kgen import aot
from kgen.diagnostics import KgenError
from kgen.validate import validate_paths

ROOT = Path(__file__).resolve().parents[1]
BF16 = ROOT / "specs" / "indexer_bf16.yaml"
ARCH = "sm_90a"


def _kgen(*args, env=None, cwd=ROOT):
    return subprocess.run([sys.executable, "-m", "kgen", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, timeout=600, env={**os.environ, **(env or {})})


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    out = tmp_path_factory.mktemp("aot") / "kgen-aot"
    r = _kgen("compile", BF16, "--arch", ARCH, "--out", out)
    assert r.returncode == 0, r.stderr[-3000:]
    assert f"wrote {out / 'manifest.json'} (1 cubins)" in r.stderr
    return out


def _copy(built: Path, tmp_path: Path) -> Path:
    d = tmp_path / "copy"
    shutil.copytree(built, d)
    return d


def test_manifest_records_spec_hash_arch_symbol_and_abi(built):
    from kgen.abi import KERNELS

    spec = validate_paths([BF16]).specs()[0]
    m = json.loads((built / "manifest.json").read_text())
    assert m["format"] == aot.FORMAT
    (e,) = m["kernels"]
    assert (e["variant"], e["arch"], e["kernel"]) == (spec.name, ARCH, "norm_rope_store")
    assert e["spec_sha256"] == hashlib.sha256(spec.model_dump_json().encode()).hexdigest() == aot.spec_hash(spec)
    assert e["abi"] == KERNELS["norm_rope_store"].manifest() and e["abi"]["version"] >= 1
    cubin = (built / e["cubin"]).read_bytes()
    assert cubin[:4] == b"\x7fELF" and hashlib.sha256(cubin).hexdigest() == e["cubin_sha256"]
    assert e["symbol"].encode() in cubin  # the mangled kernel name is in the cubin's symbol table
    k = aot.AotDir(built).find(spec, ARCH)
    assert k.cubin == cubin and k.symbol == e["symbol"]


def test_refuses_another_spec(built, tmp_path):
    text = BF16.read_text().replace("eps: 1.0e-6", "eps: 1.0e-5")
    assert text != BF16.read_text()
    (tmp_path / "s.yaml").write_text(text)
    other = validate_paths([tmp_path / "s.yaml"]).specs()[0]
    with pytest.raises(KgenError) as e:
        aot.AotDir(built).find(other, ARCH)
    msg = e.value.problems[0].message
    assert "was built from another spec" in msg and other.name in msg and str(built) in msg


def test_refuses_another_abi_version(built, tmp_path):
    d = _copy(built, tmp_path)
    m = json.loads((d / "manifest.json").read_text())
    m["kernels"][0]["abi"]["version"] += 1
    (d / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(KgenError) as e:
        aot.AotDir(d).find(validate_paths([BF16]).specs()[0], ARCH)
    text = e.value.problems[0].message
    assert "ABI" in text and "built for" in text


def test_refuses_changed_cubin_bytes_and_missing_arch(built, tmp_path):
    d = _copy(built, tmp_path)
    spec = validate_paths([BF16]).specs()[0]
    f = d / aot.cubin_name(spec.name, ARCH)
    data = bytearray(f.read_bytes())
    data[-1] ^= 1
    f.write_bytes(bytes(data))
    with pytest.raises(KgenError, match="do not match the manifest"):
        aot.AotDir(d).find(spec, ARCH)
    with pytest.raises(KgenError) as e:
        aot.AotDir(built).find(spec, "sm_100a")
    assert f"only for {ARCH}" in e.value.problems[0].message


def test_not_an_aot_dir(tmp_path):
    with pytest.raises(KgenError) as e:
        aot.AotDir(tmp_path)
    assert e.value.exit_code == 2 and "not a kgen AOT directory" in e.value.problems[0].message
    (tmp_path / "manifest.json").write_text('{"format": "other"}')
    with pytest.raises(KgenError, match="manifest format 'other'"):
        aot.AotDir(tmp_path)


def test_out_refuses_a_foreign_directory_and_keeps_it(tmp_path):
    (tmp_path / "mine.txt").write_text("keep me")
    r = _kgen("compile", BF16, "--arch", ARCH, "--out", tmp_path)
    assert r.returncode == 2 and "not a kgen AOT directory" in r.stderr and "Traceback" not in r.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine.txt"]


BLOCKER = textwrap.dedent("""
    import importlib.abc, sys
    BLOCKED = ("jinja2", "cuda.bindings.nvrtc", "cuda.core")

    class Blocker(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if any(name == b or name.startswith(b + ".") for b in BLOCKED):
                raise ImportError("blocked by the test: " + name)
            return None

    sys.meta_path.insert(0, Blocker())
""")

SERVE = BLOCKER + textwrap.dedent("""
    import os
    import torch
    import kgen.ops as ops
    from kgen import reference
    from kgen.abi import NORM_ROPE_STORE

    name, arch, gpu = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
    v = ops.resolve(name)
    k = ops.aot_dir().find(v.spec, arch)          # KGEN_AOT_DIR, read without a compiler
    assert k.cubin[:4] == b"\\x7fELF"
    inp = reference.make_inputs(v.spec, 33, seed=5)
    args = tuple(t for k, t in NORM_ROPE_STORE.arguments(v.spec, inp).items() if k != "cache")
    ref = inp["cache"].clone()
    reference.norm_rope_store(v.spec, *args, ref)
    out = inp["cache"].clone()
    torch.ops.kgen.norm_rope_store(name, *args, out)  # CPU: the reference through the op
    assert torch.equal(out, ref)
    if gpu:
        dev = [t.cuda() if t is not None else None for t in args]
        out = inp["cache"].cuda()
        torch.ops.kgen.norm_rope_store(name, *dev, out)   # the prebuilt cubin, loaded by the driver
        torch.cuda.synchronize()
        assert v.kernels[torch.cuda.current_device()]["aot"], v.kernels
        assert torch.equal(out.cpu(), ref), "GPU bytes differ from the reference (bf16 store: exact)"
    bad = sorted(m for m in sys.modules
                 if m.split(".")[0] == "jinja2" or m.startswith(("cuda.core", "cuda.bindings.nvrtc")))
    assert not bad, bad
    print("served", v.spec.name, "gpu" if gpu else "cpu")
""")


def _serve(built: Path, gpu: bool):
    # the repo first, then whatever the caller had (the GPU machine carries pydantic & co. on PYTHONPATH)
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    env = {**os.environ, "KGEN_AOT_DIR": str(built), "PYTHONPATH": path}
    return subprocess.run([sys.executable, "-c", SERVE, str(BF16), ARCH, "1" if gpu else "0"], capture_output=True,
                          text=True, cwd=ROOT, timeout=300, env=env)


def test_blocker_really_blocks():
    r = subprocess.run([sys.executable, "-c", BLOCKER + "import jinja2"], capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "blocked by the test: jinja2" in r.stderr


def test_served_without_jinja_or_nvrtc(built):
    r = _serve(built, gpu=False)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "served dsv4_indexer_bf16 cpu" in r.stdout


@pytest.mark.gpu
def test_served_on_the_gpu_without_jinja_or_nvrtc(built):
    from kgen.runtime import gpu_problem

    reason = gpu_problem()
    if reason is not None:
        pytest.skip(f"needs a CUDA GPU: {reason}")
    import torch

    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip(f"the directory holds {ARCH} only")
    r = _serve(built, gpu=True)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "served dsv4_indexer_bf16 gpu" in r.stdout
