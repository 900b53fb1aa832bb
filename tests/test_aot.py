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
from strategies import subprocess_pythonpath

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
    # the writer, the reader with its shipped tuning and the reader's per-shape tuning, the top-k and its slots
    # twin (kgen.abi.KERNELS)
    assert f"wrote {out / 'manifest.json'} (5 cubins)" in r.stderr
    return out


def _spec():
    return validate_paths([BF16]).specs()[0]


def _writer_entry(m: dict) -> dict:
    (e,) = [e for e in m["kernels"] if e["kernel"] == "norm_rope_store"]
    return e


def _copy(built: Path, tmp_path: Path) -> Path:
    d = tmp_path / "copy"
    shutil.copytree(built, d)
    return d


def test_manifest_records_spec_hash_arch_symbol_and_abi(built):
    from kgen.abi import KERNELS

    spec = validate_paths([BF16]).specs()[0]
    m = json.loads((built / "manifest.json").read_text())
    assert m["format"] == aot.FORMAT
    e = _writer_entry(m)
    assert (e["variant"], e["arch"], e["kernel"], e["tune"]) == (spec.name, ARCH, "norm_rope_store", "")
    assert e["spec_sha256"] == hashlib.sha256(spec.model_dump_json().encode()).hexdigest() == aot.spec_hash(spec)
    assert e["abi"] == KERNELS["norm_rope_store"].manifest() and e["abi"]["version"] >= 1
    cubin = (built / e["cubin"]).read_bytes()
    assert cubin[:4] == b"\x7fELF" and hashlib.sha256(cubin).hexdigest() == e["cubin_sha256"]
    assert e["symbol"].encode() in cubin  # the mangled kernel name is in the cubin's symbol table
    k = aot.AotDir(built).find(spec, ARCH)
    assert k.cubin == cubin and k.symbol == e["symbol"] == KERNELS["norm_rope_store"].symbol(spec.name)


def test_every_kernel_and_tuning_of_the_spec_is_in_the_directory(built):
    from kgen.abi import INDEXER_LOGITS
    from kgen.reader_plan import ring_tunes

    spec = _spec()
    m = json.loads((built / "manifest.json").read_text())
    readers = sorted(e["tune"] for e in m["kernels"] if e["kernel"] == "indexer_logits")
    tunes = ring_tunes(spec, None)
    assert len(tunes) == 2 and readers == sorted(aot.tune_key(t) for t in tunes)
    d = aot.AotDir(built)
    for t in tunes:
        k = d.find(spec, ARCH, INDEXER_LOGITS, t)
        assert k.symbol == INDEXER_LOGITS.symbol(spec.name) and k.symbol.encode() in k.cubin


def _edited(built: Path, tmp_path: Path, edit) -> Path:
    d = _copy(built, tmp_path)
    m = json.loads((d / "manifest.json").read_text())
    edit(d, m)
    (d / "manifest.json").write_text(json.dumps(m))
    return d


def test_an_entry_carrying_another_kernels_cubin_is_refused(built, tmp_path):
    def swap(d, m):  # the writer's entry edited to carry the reader's cubin, hash and symbol
        w = _writer_entry(m)
        r = next(e for e in m["kernels"] if e["kernel"] == "indexer_logits" and not e["tune"])
        w.update(cubin=r["cubin"], cubin_sha256=r["cubin_sha256"], symbol=r["symbol"])

    with pytest.raises(KgenError, match="'symbol' is .* but this spec's is"):
        aot.AotDir(_edited(built, tmp_path / "a", swap)).find(_spec(), ARCH)

    def swap_bytes(d, m):  # the file itself replaced by another kernel's (hash updated to match)
        w = _writer_entry(m)
        r = next(e for e in m["kernels"] if e["kernel"] == "indexer_logits" and not e["tune"])
        (d / w["cubin"]).write_bytes((d / r["cubin"]).read_bytes())
        w["cubin_sha256"] = r["cubin_sha256"]

    with pytest.raises(KgenError, match="holds no kernel"):
        aot.AotDir(_edited(built, tmp_path / "b", swap_bytes)).find(_spec(), ARCH)


@pytest.mark.parametrize("name", ["../outside.cubin", "/etc/passwd", "sub/x.cubin"])
def test_cubin_names_are_confined_to_the_directory(built, tmp_path, name):
    d = _edited(built, tmp_path, lambda d, m: _writer_entry(m).update(cubin=name))
    with pytest.raises(KgenError, match="'cubin' is"):
        aot.AotDir(d).find(_spec(), ARCH)


def test_a_symlinked_or_fifo_cubin_is_not_read(built, tmp_path):
    d = _copy(built, tmp_path)
    e = _writer_entry(json.loads((d / "manifest.json").read_text()))
    real = tmp_path / "elsewhere.cubin"
    (d / e["cubin"]).rename(real)
    (d / e["cubin"]).symlink_to(real)
    with pytest.raises(KgenError, match="symbolic link"):
        aot.AotDir(d).find(_spec(), ARCH)
    (d / e["cubin"]).unlink()
    os.mkfifo(d / e["cubin"])
    with pytest.raises(KgenError, match="not a regular file"):
        aot.AotDir(d).find(_spec(), ARCH)


def test_duplicate_and_malformed_entries_are_located_errors(built, tmp_path):
    d = _edited(built, tmp_path / "dup", lambda d, m: m["kernels"].append(dict(_writer_entry(m))))
    with pytest.raises(KgenError, match=r"kernels\[\d+\]: .* is listed twice"):
        aot.AotDir(d)
    d = _edited(built, tmp_path / "nosym", lambda d, m: _writer_entry(m).pop("symbol"))
    with pytest.raises(KgenError, match=r"kernels\[\d\]: no 'symbol' field"):
        aot.AotDir(d)
    d = _edited(built, tmp_path / "abi", lambda d, m: _writer_entry(m).update(abi=[1]))
    with pytest.raises(KgenError, match=r"'abi' must be a object, got list"):
        aot.AotDir(d)
    d = _edited(built, tmp_path / "item", lambda d, m: m["kernels"].append(7))
    with pytest.raises(KgenError, match=r"an entry must be an object, got int"):
        aot.AotDir(d)


def test_a_fifo_manifest_does_not_hang(tmp_path):
    os.mkfifo(tmp_path / "manifest.json")
    with pytest.raises(KgenError, match="not a regular file"):
        aot.AotDir(tmp_path)
    r = _kgen("compile", BF16, "--arch", ARCH, "--out", tmp_path)
    assert r.returncode == 2 and "Traceback" not in r.stderr


def test_out_file_with_json_is_a_usage_error_before_any_compile(tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    r = _kgen("compile", BF16, "--arch", ARCH, "--out", f, "--json")
    doc = json.loads(r.stdout)
    assert r.returncode == 2 and doc["results"] == [] and "not a directory" in doc["errors"][0]["message"]
    assert "compiling" not in r.stderr and f.read_text() == "x"


def test_two_concurrent_writers_leave_a_consistent_directory(built, tmp_path):
    out = tmp_path / "out"
    procs = [subprocess.Popen([sys.executable, "-m", "kgen", "compile", str(BF16), "--arch", ARCH, "--out", str(out)],
                              cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    for p in procs:
        assert p.wait(timeout=600) == 0, p.stderr.read()
    m = json.loads((out / "manifest.json").read_text())
    listed = {e["cubin"] for e in m["kernels"]}
    assert listed == {p.name for p in out.glob("*.cubin")}  # every listed cubin exists, nothing else is left
    d = aot.AotDir(out)
    assert d.find(_spec(), ARCH).cubin[:4] == b"\x7fELF"


def test_what_a_write_killed_at_any_rename_leaves_is_not_foreign(tmp_path, monkeypatch):
    # A write killed between two renames leaves its journal, staged temp files and some renamed cubins,
    # but no manifest yet: the next `--out` must recover it, not refuse it as another owner's directory.
    import kgen.files

    out = tmp_path / "out"
    out.mkdir()
    seen: list[list[str]] = []
    real_replace = os.replace

    def look_then_replace(src, dst):
        seen.append(sorted(p.name for p in out.iterdir()))
        aot.check_out(out)  # the state a kill here leaves (the lock is this process's: re-entered)
        real_replace(src, dst)

    monkeypatch.setattr(kgen.files.os, "replace", look_then_replace)
    kgen.files.write_all({out / "a.cubin": b"\0" * 8, out / aot.MANIFEST: json.dumps({"format": aot.FORMAT})})
    assert any("a.cubin" in names and aot.MANIFEST not in names for names in seen), seen
    (out / "mine.txt").write_text("not kgen's")
    (out / aot.MANIFEST).unlink()
    with pytest.raises(KgenError, match="not a kgen AOT directory"):
        aot.check_out(out)


def test_out_is_checked_under_the_writers_lock(tmp_path):
    # While one kgen holds DIR's lock (half-way through its write: a cubin, no manifest yet), another's
    # check waits for it instead of refusing the directory as foreign.
    from kgen.files import locked

    out = tmp_path / "out"
    out.mkdir()
    (out / "a.cubin").write_bytes(b"\0" * 8)
    with locked(out):
        r = _kgen("compile", BF16, "--arch", ARCH, "--out", out, env={"KGEN_LOCK_TIMEOUT": "1"})
    assert r.returncode == 1 and "held the directory's lock for 1 s" in r.stderr, r.stderr[-2000:]
    assert "Traceback" not in r.stderr and sorted(p.name for p in out.iterdir()) == ["a.cubin"]


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
    _writer_entry(m)["abi"]["version"] += 1
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
    assert e.value.exit_code == 2 and "no such file" in e.value.problems[0].message
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
    from kgen import inputs as I
    from kgen.abi import NORM_ROPE_STORE

    name, arch, gpu = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
    v = ops.resolve(name)
    k = ops.aot_dir().find(v.spec, arch)          # KGEN_AOT_DIR, read without a compiler
    assert k.cubin[:4] == b"\\x7fELF"
    inp = I.make_inputs(v.spec, 33, seed=5)
    inp["cache"].zero_()  # the reader below sees slots no token was written to: zero keys, not the fill's NaNs
    args = tuple(t for k, t in NORM_ROPE_STORE.arguments(v.spec, inp).items() if k != "cache")
    ref = inp["cache"].clone()
    reference.norm_rope_store(v.spec, *args, ref)
    out = inp["cache"].clone()
    torch.ops.kgen.norm_rope_store(name, *args, out)  # CPU: the reference through the op
    assert torch.equal(out, ref)
    from kgen.abi import INDEXER_LOGITS
    for t in INDEXER_LOGITS.tunings(v.spec):  # the reader's cubins too, every tuning
        assert ops.aot_dir().find(v.spec, arch, INDEXER_LOGITS, t).cubin[:4] == b"\x7fELF"
    if gpu:
        dev = [t.cuda() if t is not None else None for t in args]
        out = inp["cache"].cuda()
        torch.ops.kgen.norm_rope_store(name, *dev, out)   # the prebuilt cubin, loaded by the driver
        torch.cuda.synchronize()
        assert v.kernels[torch.cuda.current_device()]["aot"], v.kernels
        assert torch.equal(out.cpu(), ref), "GPU bytes differ from the reference (bf16 store: exact)"
        from kgen.score import indexer_logits_torch
        g = torch.Generator().manual_seed(1)
        q = torch.randn(2, 1, 64, v.spec.head_dim, generator=g).to(torch.bfloat16)
        w = torch.rand(2, 64, generator=g)
        pages = out.shape[0]
        table = torch.arange(2 * pages, dtype=torch.int32).reshape(2, pages) % pages
        lens = torch.tensor([33, 20], dtype=torch.int32)
        want = indexer_logits_torch(v.spec, q, w, out.cpu(), table, lens, 40)
        got = torch.ops.kgen.indexer_logits(name, q.cuda(), w.cuda(), out, table.cuda(), lens.cuda(), 40)
        torch.cuda.synchronize()
        assert torch.allclose(got.cpu(), want, rtol=1e-4, atol=1e-3, equal_nan=True), "reader from the AOT dir"
    bad = sorted(m for m in sys.modules
                 if m.split(".")[0] == "jinja2" or m.startswith(("cuda.core", "cuda.bindings.nvrtc")))
    assert not bad, bad
    print("served", v.spec.name, "gpu" if gpu else "cpu")
""")


def _serve(built: Path, gpu: bool):
    # the repo first, then whatever the caller had (the GPU machine carries pydantic & co. on PYTHONPATH)
    env = {**os.environ, "KGEN_AOT_DIR": str(built), "PYTHONPATH": subprocess_pythonpath()}
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
