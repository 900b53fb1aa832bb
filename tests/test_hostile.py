"""Hostile and careless input, one test per class, through the real `kgen` script where the class is
about the command line: non-regular files, strings that would reach C++ or paths, values validate
must refuse because render/compile would, --json on error paths, --arch, one-line diagnostics."""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from conftest import KGEN
from hypothesis import HealthCheck, given, settings

from strategies import ROOT, SPECS, base_spec, fp8_spec, spec_dicts, to_yaml

GOOD = to_yaml(base_spec())[0]
LINE_RE = re.compile(r"^\S.*?:\d+:\d+: (error|warning)\[[a-z0-9-]+\]: .+$")


def kgen(*args, cwd=None, timeout=60, env=None, stdin=subprocess.DEVNULL):
    """The installed script, with a timeout: a hang is a failure, not a stuck suite."""
    return subprocess.run([str(KGEN), *map(str, args)], cwd=cwd or ROOT, capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})}, stdin=stdin)


FILE_RE = re.compile(r"^\S.*?: (error|warning)\[[a-z0-9-]+\]: .+$")  # a problem about a whole file or dir


def nothing_cached(root: Path) -> bool:
    """No entry, run record or work dir (the NVRTC probe record the targets rule keeps may be there)."""
    return not root.exists() or {p.name for p in root.iterdir()} <= {"nvrtc_archs.json"}


def one_line_errors(stderr: str, line_col: bool = True) -> list[str]:
    """Every line of stderr is a located compiler-style diagnostic (no traceback, no wrapped text)."""
    lines = stderr.strip().splitlines()
    assert lines, "no diagnostic"
    bad = [ln for ln in lines if not (LINE_RE if line_col else FILE_RE).match(ln)]
    assert not bad, stderr
    assert "\x1b" not in stderr
    return lines


# ---------------------------------------------------------------------------------------------
# non-regular files: never read, never a hang


@pytest.mark.parametrize("command", ["validate", "layout", "render", "compile"])
def test_fifo_as_spec_path_is_refused_at_once(tmp_path, command):
    fifo = tmp_path / "spec.yaml"
    os.mkfifo(fifo)
    extra = ["-o", tmp_path / "out"] if command == "render" else []
    r = kgen(command, fifo, *extra, timeout=30, env={"KGEN_CACHE_DIR": str(tmp_path / "cache")})
    assert r.returncode == 1, r.stderr
    [line] = one_line_errors(r.stderr)
    assert "error[file-kind]" in line and "FIFO" in line
    assert not (tmp_path / "out").exists()


def test_devices_are_refused_not_read(tmp_path):
    for dev in ("/dev/zero", "/dev/urandom", "/dev/null"):
        r = kgen("validate", dev, timeout=30)
        assert r.returncode == 1, (dev, r.stderr)
        [line] = one_line_errors(r.stderr)
        assert "error[file-kind]" in line and "character device" in line


def test_stdin_as_spec_path_does_not_hang():
    """/dev/stdin on an open pipe nobody writes to: a FIFO, refused without waiting for EOF."""
    p = subprocess.Popen([str(KGEN), "validate", "/dev/stdin"], cwd=ROOT, stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = p.communicate(timeout=30)  # communicate closes stdin only after the process ends...
    except subprocess.TimeoutExpired:
        p.kill()
        pytest.fail("kgen validate /dev/stdin hung on an open pipe")
    assert p.returncode == 1 and "FIFO" in err and "Traceback" not in err


def test_fifo_as_include_is_refused_located(tmp_path):
    os.mkfifo(tmp_path / "pipe.yaml")
    (tmp_path / "f.yaml").write_text("kgen: 1\nfamily: f\nvariants:\n  - pipe.yaml\ndispatch:\n  key: [name]\n")
    r = kgen("validate", tmp_path / "f.yaml", timeout=30)
    assert r.returncode == 1
    [line] = one_line_errors(r.stderr)
    assert "pipe.yaml:1:1: error[file-kind]" in line


def test_symlink_to_a_device_is_refused(tmp_path):
    (tmp_path / "z.yaml").symlink_to("/dev/zero")
    r = kgen("validate", tmp_path / "z.yaml", timeout=30)
    assert r.returncode == 1 and "character device" in r.stderr


def _run_as_nobody(argv: list[str], cwd: Path) -> subprocess.CompletedProcess:
    """As an unprivileged user (root searches every directory): the real script, real permissions."""
    if os.geteuid() != 0:
        return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=60)

    def drop():
        os.setgid(65534)
        os.setuid(65534)

    env = {**os.environ, "HOME": str(cwd), "KGEN_NO_PROBE_CACHE": "1"}
    try:
        return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=60, preexec_fn=drop, env=env)
    except OSError:  # the interpreter itself is out of nobody's reach (e.g. under /root)
        return subprocess.CompletedProcess(argv, 0, "", "")


def test_directory_without_search_permission_is_exit_2():
    base = Path(tempfile.mkdtemp(prefix="kgen-perm-"))
    try:
        base.chmod(0o755)
        locked = base / "locked"
        locked.mkdir()
        (locked / "s.yaml").write_text(GOOD)
        (base / "f.yaml").write_text("kgen: 1\nfamily: f\nvariants:\n  - locked/s.yaml\ndispatch:\n  key: [name]\n")
        locked.chmod(0o600)  # readable listing, no search: nothing inside can be opened
        probe = _run_as_nobody([sys.executable, "-c", "import os; os.stat('locked/s.yaml')"], base)
        if probe.returncode == 0:
            pytest.skip("cannot drop privileges here")
        r = _run_as_nobody([str(KGEN), "validate", "locked/s.yaml"], base)
        assert r.returncode == 2, r.stderr
        [line] = one_line_errors(r.stderr)
        assert "locked/s.yaml:1:1: error[file-read]" in line and "ermission denied" in line
        # as an include: a located problem in the family file, exit 1 (the family itself was read)
        r = _run_as_nobody([str(KGEN), "validate", "f.yaml"], base)
        assert r.returncode == 1, r.stderr
        [line] = one_line_errors(r.stderr)
        assert "f.yaml:4:5: error[family-include]" in line
    finally:
        (base / "locked").chmod(0o700)
        shutil.rmtree(base)


def test_permission_denied_is_exit_2_in_process(tmp_path, monkeypatch):
    """The same class where privileges cannot be dropped: the open fails with EACCES (as for a file in
    a directory without search permission); the CLI says so in one line, exit 2, no traceback."""
    import errno

    from typer.testing import CliRunner

    import kgen.source
    from kgen.cli import app

    (tmp_path / "locked").mkdir()
    (tmp_path / "locked" / "s.yaml").write_text(GOOD)
    real_open = os.open

    def denied(path, *a, **k):
        if "locked" in str(path):
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return real_open(path, *a, **k)

    monkeypatch.setattr(kgen.source.os, "open", denied)
    for command in ("validate", "layout"):
        r = CliRunner().invoke(app, [command, str(tmp_path / "locked" / "s.yaml")])
        assert r.exit_code == 2, r.output
        assert "error[file-read]: cannot read: Permission denied" in r.output and "Traceback" not in r.output


# ---------------------------------------------------------------------------------------------
# characters that must never reach C++, paths or terminals: refused up front, one line


@pytest.mark.parametrize("field, value, what", [
    ("description", '"a\\x1b[31mred"', "ESC"),
    ("description", '"nul\\0byte"', "NUL"),
    ("description", "|\n  two\n  lines", "a newline"),
    ("description", '"tab\\there"', "a tab"),
    ("description", '"half \\ud800 pair"', "a lone surrogate"),
    ("description", '"\\u202eevil"', "a bidi control"),
    ("name", '"t_spec\\n#include <x>"', "a newline"),
    ("targets", '["sm_90a\\0"]', "NUL"),
])
def test_control_characters_are_refused_up_front(tmp_path, field, value, what):
    lines = [ln for ln in GOOD.splitlines() if not ln.startswith(f"{field}:")]
    text = "\n".join(lines) + f"\n{field}: {value}\n"
    (tmp_path / "s.yaml").write_text(text)
    for args in (["validate"], ["render", "--no-validate", "-o", tmp_path / "out"],
                 ["compile", "--no-validate"]):
        r = kgen(*args, tmp_path / "s.yaml", env={"KGEN_CACHE_DIR": str(tmp_path / "cache")})
        assert r.returncode == 1, (args, r.stderr)
        [line] = one_line_errors(r.stderr)
        assert "error[yaml-text]" in line and what in line, line
    assert not (tmp_path / "out").exists() and nothing_cached(tmp_path / "cache")


def test_control_character_in_a_key(tmp_path):
    (tmp_path / "s.yaml").write_text(GOOD + '"col\\x1bour": 1\n')
    r = kgen("validate", tmp_path / "s.yaml")
    assert r.returncode == 1
    [line] = one_line_errors(r.stderr)
    assert "a key holds ESC" in line


# ---------------------------------------------------------------------------------------------
# strings that reach C++ or paths are refused also under --no-validate


def _spec_file(tmp_path, **changes) -> Path:
    s = base_spec()
    s.update(changes)
    path = tmp_path / "s.yaml"
    path.write_text(to_yaml(s)[0])
    return path


def test_cxx_keyword_name_is_refused_by_validate_render_and_compile(tmp_path):
    path = _spec_file(tmp_path, name="namespace")
    cache = tmp_path / "cache"
    for args in (["validate"], ["render", "-o", tmp_path / "out"], ["render", "--no-validate", "-o", tmp_path / "out"],
                 ["compile", "--no-validate", "--arch", "sm_90a"]):
        r = kgen(*args, path, env={"KGEN_CACHE_DIR": str(cache)})
        assert r.returncode == 1, (args, r.stderr)
        [line] = one_line_errors(r.stderr)
        assert f"{path}:2:1: error[name]" in line and "C++ keyword" in line, line
    assert not (tmp_path / "out").exists() and nothing_cached(cache)


def test_target_with_a_path_is_refused_under_no_validate(tmp_path):
    path = _spec_file(tmp_path, targets=["../../escape"])
    cache = tmp_path / "deep" / "cache"
    r = kgen("compile", "--no-validate", path, env={"KGEN_CACHE_DIR": str(cache)})
    assert r.returncode == 1, r.stderr
    [line] = one_line_errors(r.stderr)
    assert "error[targets]" in line and "not an architecture name" in line
    assert nothing_cached(cache) and not (tmp_path / "escape").exists()
    assert {p.name for p in tmp_path.iterdir()} <= {"s.yaml", "deep"}


def test_dispatch_key_strings_never_become_cxx(tmp_path):
    (tmp_path / "s.yaml").write_text(GOOD)
    evil = 'name"; }\n#include "/etc/passwd'
    (tmp_path / "f.yaml").write_text("kgen: 1\nfamily: f\nvariants: [s.yaml]\ndispatch:\n  key: [" +
                                     json.dumps(evil.replace("\n", " ")) + "]\n")
    for args in (["validate"], ["render", "--no-validate", "-o", tmp_path / "out"]):
        r = kgen(*args, tmp_path / "f.yaml")
        assert r.returncode == 1, (args, r.stderr)
        assert any("f.yaml:5:9: error[dispatch-key]" in ln for ln in one_line_errors(r.stderr)), r.stderr
    assert not (tmp_path / "out").exists()


def test_quotes_and_comment_markers_in_descriptions_stay_text(tmp_path):
    """A description is free text: escaped into every generated file, never code."""
    desc = '*/ """ \\" \' \\\\ #include <x> ${x} {{ x }}'
    s = base_spec()
    s["description"] = desc
    (tmp_path / "s.yaml").write_text(to_yaml(s)[0])
    fam = tmp_path / "f.yaml"
    fam.write_text("kgen: 1\nfamily: f\ndescription: " + json.dumps(desc) + "\nvariants: [s.yaml]\n"
                   "dispatch:\n  key: [name]\n  require: [{name: t_spec}]\n")
    r = kgen("render", fam, "-o", tmp_path / "out")
    assert r.returncode == 0, r.stderr
    ns: dict = {}
    exec(compile((tmp_path / "out/t_spec/host.py").read_text(), "host.py", "exec"), ns)
    assert ns["DESCRIPTION"] == " ".join(desc.replace("\\", "/").split())
    ns = {}
    exec(compile((tmp_path / "out/f/select_kernel.py").read_text(), "select_kernel.py", "exec"), ns)
    for cxx in ("out/t_spec/host.h", "out/t_spec/config.cuh", "out/f/select_kernel.h"):
        text = (tmp_path / cxx).read_text()
        assert "#include <x>" not in [ln.strip() for ln in text.splitlines()]
        assert not any(ln.rstrip().endswith("\\") for ln in text.splitlines())  # no line splice


# ---------------------------------------------------------------------------------------------
# validate refuses what render and compile refuse


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=spec_dicts())
def test_validate_accepts_only_what_render_accepts(data):
    """For any spec the schema takes: the guards render applies under --no-validate are problems the
    validator reports too (same rule, same key); a spec validate accepts renders."""
    from pydantic import ValidationError

    from kgen.render import render_variant
    from kgen.rules import check_guards, check_variant
    from kgen.spec import Spec

    try:
        spec = Spec.model_validate(data)
    except ValidationError:
        return
    _, problems = check_variant(spec)
    errors = {(p.rule, p.loc) for p in problems if p.severity == "error"}
    guards = {(p.rule, p.loc) for p in check_guards(spec)}
    for rule, loc in guards:  # (a value beyond 64 bits is reported once per key, maybe by its own rule)
        assert (rule, loc) in errors or rule == "int-range" and any(k == loc for _, k in errors), (guards, errors)
    if not errors:
        render_variant(spec)


@pytest.mark.parametrize("changes, rule, key", [
    ({"store": {"dtype": "bf16", "scale": "none", "block": 0}}, "store-block", "store.block"),
    ({"store": {"dtype": "bf16", "scale": "none", "block": -32}}, "store-block", "store.block"),
    ({"norm": {"kind": "rmsnorm", "eps": 1.0e39}}, "norm-eps", "norm.eps"),
    ({"norm": {"kind": "rmsnorm", "eps": 1.0e-50}}, "norm-eps", "norm.eps"),
    ({"store": {"dtype": "fp8_e4m3", "scale": "fp32", "amax_floor": 1.0e39}}, "store-amax-floor", "store.amax_floor"),
    ({"name": "struct"}, "name", "name"),
    ({"launch": {"warps_per_block": 2, "min_blocks_per_sm": 32}, "targets": ["sm_120a"]}, "launch-occupancy",
     "launch.min_blocks_per_sm"),
    ({"store": {"dtype": "bf16", "scale": "none", "block": 2**70}}, "int-range", "store.block"),
])
def test_values_render_would_refuse_are_validation_errors(tmp_path, changes, rule, key):
    s = base_spec()
    s.update(changes)
    (tmp_path / "s.yaml").write_text(to_yaml(s)[0])
    r = kgen("validate", "--json", tmp_path / "s.yaml")
    assert r.returncode == 1, r.stdout
    [res] = json.loads(r.stdout)["results"]
    assert (rule, key) in {(e["rule"], e["loc"]) for e in res["errors"]}, res["errors"]
    r = kgen("render", tmp_path / "s.yaml", "-o", tmp_path / "out")
    assert r.returncode == 1 and f"error[{rule}]" in r.stderr and not (tmp_path / "out").exists()


@pytest.mark.parametrize("family, rule, text", [
    ("kgen: 1\nfamily: f\nvariants: []\ndispatch:\n  key: [name]\n", "family-variants", "no variants"),
    ("kgen: 1\nfamily: f\nvariants: [s.yaml]\ndispatch:\n  key: [norm.eps]\n", "dispatch-key", "1e-06"),
    ("kgen: 1\nfamily: f\nvariants: [s.yaml]\ndispatch:\n  key: [store.block]\n", "dispatch-key", "None"),
    ("kgen: 1\nfamily: class\nvariants: [s.yaml]\ndispatch:\n  key: [name]\n", "name", "C++ keyword"),
])
def test_family_values_no_dispatch_can_serve(tmp_path, family, rule, text):
    (tmp_path / "s.yaml").write_text(GOOD)
    (tmp_path / "f.yaml").write_text(family)
    r = kgen("validate", tmp_path / "f.yaml")
    assert r.returncode == 1, r.stdout + r.stderr
    lines = [ln for ln in one_line_errors(r.stderr) if "error[" in ln]
    assert any(f"error[{rule}]" in ln and text in ln for ln in lines), lines


# ---------------------------------------------------------------------------------------------
# --json prints JSON on every error path; --arch; exit codes


@pytest.mark.parametrize("args, code, keys", [
    (["layout", "--json", "missing.yaml"], 2, {"layouts", "errors"}),
    (["layout", "--json", "bad.yaml"], 1, {"layouts", "errors"}),
    (["validate", "--json", "missing.yaml"], 2, {"results"}),
    (["compile", "--json", "--arch", "sm_75", str(SPECS / "indexer_bf16.yaml")], 2, {"results", "errors"}),
    (["compile", "--json", "--arch", "sm_9z", str(SPECS / "indexer_bf16.yaml")], 2, {"results", "errors"}),
    (["compile", "--json", "bad.yaml"], 1, {"results", "errors"}),
    (["compile", "--json", "--no-validate", "keyword.yaml"], 1, {"results", "errors"}),
    (["compile", "--json"], 2, {"errors"}),
    (["layout", "--json", "--bogus", "bad.yaml"], 2, {"errors"}),
])
def test_json_on_every_error_path(tmp_path, args, code, keys):
    (tmp_path / "bad.yaml").write_text(GOOD.replace("page_size: 64", "page_size: 48"))
    (tmp_path / "keyword.yaml").write_text(GOOD.replace('"t_spec"', "do"))
    r = kgen(*args, cwd=tmp_path, env={"KGEN_CACHE_DIR": str(tmp_path / "cache")})
    assert r.returncode == code, r.stdout + r.stderr
    doc = json.loads(r.stdout)
    assert set(doc) == keys
    errors = doc.get("errors") or [e for res in doc.get("results", []) for e in res["errors"]]
    assert errors and all({"rule", "message", "file", "line", "col"} <= set(e) for e in errors)
    assert "Traceback" not in r.stderr


def test_arch_below_the_floor_or_malformed_is_usage(tmp_path):
    for arch in ("sm_75", "sm_70", "sm_86a", "sm90", "../sm_90a", "sm_90a;rm"):
        r = kgen("compile", "--arch", arch, SPECS / "indexer_bf16.yaml", env={"KGEN_CACHE_DIR": str(tmp_path)})
        assert r.returncode == 2, (arch, r.stderr)
        assert r.stderr.count("\n") == 1 and "error[arch]" in r.stderr, r.stderr
    assert nothing_cached(tmp_path)


def test_compile_no_validate_errors_are_one_located_line(tmp_path):
    path = _spec_file(tmp_path, head_dim=2**70, hadamard=False)
    r = kgen("compile", "--no-validate", path, env={"KGEN_CACHE_DIR": str(tmp_path / "cache")})
    assert r.returncode == 1
    lines = one_line_errors(r.stderr)
    assert all(ln.startswith(f"{path}:") for ln in lines)
    assert any("error[int-range]" in ln and "head_dim" in ln for ln in lines), lines


def test_fp8_spec_still_fine():
    """The shipped-like fp8 spec still validates (nothing above refuses good input)."""
    s = fp8_spec()
    from kgen.rules import check_guards, check_variant
    from kgen.spec import Spec

    spec = Spec.model_validate(s)
    assert check_guards(spec) == [] and check_variant(spec)[1] == []


# ---------------------------------------------------------------------------------------------
# output errors: a clean error and nothing half-written; stale variant dirs removed, said


BF16 = SPECS / "indexer_bf16.yaml"


def test_render_into_a_file_or_through_a_file_is_refused(tmp_path):
    f = tmp_path / "out.txt"
    f.write_text("mine\n")
    for out in (f, f / "sub", tmp_path / "missing" / ".." / "out.txt" / "x"):
        r = kgen("render", BF16, "-o", out)
        assert r.returncode == 2, (out, r.stderr)
        [line] = one_line_errors(r.stderr, line_col=False)
        assert "error[output]" in line and ("is a file, not a directory" in line or ".." in str(out)), line
    assert f.read_text() == "mine\n" and sorted(p.name for p in tmp_path.iterdir()) == ["out.txt"]


def test_a_failing_write_leaves_the_output_as_it_was(tmp_path, monkeypatch):
    """The third file cannot be written (disk full, permission): the output stays the earlier render,
    byte for byte, with no temp file and no new directory."""
    import errno

    import kgen.files
    from kgen.diagnostics import KgenError
    from kgen.render import render_paths

    out = tmp_path / "out"
    render_paths([BF16], out)
    (out / "dsv4_indexer_bf16" / "host.py").write_text("# stale\n")
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    calls = {"n": 0}
    real = kgen.files.tempfile.mkstemp

    def full(*a, **k):
        calls["n"] += 1
        if calls["n"] == 2:
            raise OSError(errno.ENOSPC, "No space left on device", str(k.get("dir")))
        return real(*a, **k)

    monkeypatch.setattr(kgen.files.tempfile, "mkstemp", full)
    with pytest.raises(KgenError) as e:
        render_paths([SPECS / "dsv4.yaml"], out)  # new dirs + a rewrite of host.py
    assert e.value.exit_code == 2 and "No space left on device" in e.value.problems[0].message
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
    assert sorted(p.name for p in out.iterdir()) == ["dsv4_indexer_bf16", "include"]


def test_stale_variant_dirs_are_removed_and_said(tmp_path):
    out = tmp_path / "out"
    r = kgen("render", SPECS / "dsv4.yaml", "-o", out)
    assert r.returncode == 0, r.stderr
    (out / "notes.txt").write_text("mine\n")  # not kgen's: stays
    (out / "dsv4_latent_bf16" / "mine.txt").write_text("mine\n")
    r = kgen("render", BF16, "-o", out)
    assert r.returncode == 0, r.stderr
    assert "removed stale" in r.stderr and "dsv4_fused_norm_rope/select_kernel.h" in r.stderr
    assert sorted(p.name for p in out.iterdir()) == ["dsv4_indexer_bf16", "dsv4_latent_bf16", "include",
                                                     "notes.txt"]
    assert [p.name for p in (out / "dsv4_latent_bf16").iterdir()] == ["mine.txt"]
    fresh = tmp_path / "fresh"
    kgen("render", BF16, "-o", fresh)
    kgen_files = {p.relative_to(out) for p in out.rglob("*") if p.is_file() and p.name not in ("notes.txt", "mine.txt")}
    assert kgen_files == {p.relative_to(fresh) for p in fresh.rglob("*") if p.is_file()}


# ---------------------------------------------------------------------------------------------
# the cache: hostile entries are rebuilt or a clean error, never a hang; no leaked temp dirs


def _compile(cache: Path, *extra, timeout=300, **kw):
    return kgen("compile", BF16, "--arch", "sm_90a", *extra, env={"KGEN_CACHE_DIR": str(cache), **kw},
                timeout=timeout)


@pytest.fixture(scope="module")
def warm_cache(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("warm") / "cache"
    r = _compile(root)
    assert r.returncode == 0, r.stderr
    return root


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst, symlinks=True)
    return dst


def _entry(root: Path) -> Path:
    [e] = [p for p in (root / "dsv4_indexer_bf16").iterdir() if p.is_dir() and p.name.startswith("sm_90a-")]
    return e


@pytest.mark.parametrize("damage", ["dangling-link", "fifo-meta", "fifo-cubin", "device-cubin", "fifo-run-record"])
def test_damaged_entries_are_rebuilt_without_hanging(warm_cache, tmp_path, damage):
    root = _copy(warm_cache, tmp_path / "cache")
    e = _entry(root)
    if damage == "dangling-link":
        shutil.rmtree(e)
        e.symlink_to(tmp_path / "nowhere")
    elif damage.startswith("fifo-") and damage != "fifo-run-record":
        target = e / ("meta.json" if damage == "fifo-meta" else "kernel.cubin")
        target.unlink()
        os.mkfifo(target)
    elif damage == "device-cubin":
        (e / "kernel.cubin").unlink()
        (e / "kernel.cubin").symlink_to("/dev/zero")
    else:
        [rec] = list((root / "_runs").iterdir())
        rec.unlink()
        os.mkfifo(rec)
    r = _compile(root, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr
    if damage != "fifo-run-record":
        assert "compiling dsv4_indexer_bf16" in r.stderr  # rebuilt, not trusted
        assert not _entry(root).is_symlink() and (_entry(root) / "kernel.cubin").is_file()


def test_unwritable_cache_places_are_a_clean_error(tmp_path):
    root = tmp_path / "cache"
    root.mkdir()
    (root / "dsv4_indexer_bf16").write_text("a file where a directory goes\n")
    r = _compile(root, "--json")
    assert r.returncode == 1, r.stderr
    assert json.loads(r.stdout)["results"][0]["ok"] is False
    assert "error[cache-dir]" in r.stderr and "Traceback" not in r.stderr
    r = _compile(tmp_path / "file-as-root" / "x", KGEN_CACHE_DIR=str(root / "dsv4_indexer_bf16" / "sub"))
    assert r.returncode == 1 and "error[cache-dir]" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.parametrize("value", ["abc", "-1", "nan", "inf", "1e999"])
def test_malformed_lock_timeout_is_a_usage_error(tmp_path, value):
    r = _compile(tmp_path / "cache", KGEN_LOCK_TIMEOUT=value)
    assert r.returncode == 2, r.stderr
    assert r.stderr.count("\n") == 1 and "error[cache-lock]" in r.stderr and "KGEN_LOCK_TIMEOUT" in r.stderr


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGINT"])
def test_an_interrupted_compile_leaks_no_temp_dirs(tmp_path, sig):
    import signal
    import time

    root, tmp = tmp_path / "cache", tmp_path / "tmp"
    tmp.mkdir()
    s = base_spec()
    s["name"] = f"interrupted_{sig.lower()}"
    (tmp_path / "s.yaml").write_text(to_yaml(s)[0])
    p = subprocess.Popen([str(KGEN), "compile", str(tmp_path / "s.yaml")], cwd=ROOT, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True,
                         env={**os.environ, "KGEN_CACHE_DIR": str(root), "TMPDIR": str(tmp)})
    deadline = time.time() + 120
    while time.time() < deadline and not list((root / "_tmp").glob("*")):
        time.sleep(0.05)  # NVRTC is working in its temp dir now
    assert list((root / "_tmp").glob("*")), "the compile never started"
    p.send_signal(getattr(signal, sig))
    out, err = p.communicate(timeout=180)
    assert p.returncode != 0 and "Traceback" not in err, err
    assert list((root / "_tmp").iterdir()) == [] and list(tmp.iterdir()) == []
    assert not [q for q in root.rglob(".tmp-*")] and not [q for q in root.rglob(".trash-*")]


def test_cache_prune_and_clean(warm_cache, tmp_path):
    root = _copy(warm_cache, tmp_path / "cache")
    env = {"KGEN_CACHE_DIR": str(root)}
    info = json.loads(kgen("cache", "info", "--json", env=env).stdout)
    kept = info["entries"]  # the writer, the reader and its shape tunings: every kernel kgen compile builds
    assert kept >= 3 and info["bytes"] > 10_000
    (root / "dsv4_indexer_bf16" / "failed-sm_90a-0123456789abcdef").mkdir()
    r = kgen("cache", "prune", "--json", env=env)  # the default bound keeps the entries
    assert r.returncode == 0 and json.loads(r.stdout)["entries"] == kept
    assert not (root / "dsv4_indexer_bf16" / "failed-sm_90a-0123456789abcdef").exists()
    r = kgen("cache", "prune", "--max-mb", "0", "--json", env=env)
    assert r.returncode == 0 and json.loads(r.stdout)["entries"] == 0
    r = _compile(root)
    assert r.returncode == 0 and "compiling" in r.stderr  # pruned means rebuilt
    (root / "precious.txt").write_text("not kgen's\n")
    r = kgen("cache", "clean", env=env)
    assert r.returncode == 1 and "precious.txt" in r.stderr and (root / "precious.txt").exists()
    (root / "precious.txt").unlink()
    r = kgen("cache", "clean", env=env)
    assert r.returncode == 0 and list(root.iterdir()) == []


def test_test_json_without_a_gpu_is_json(tmp_path):
    from kgen.runtime import gpu_problem

    if gpu_problem() is None:
        pytest.skip("a GPU is present")
    r = kgen("test", BF16, "--json")
    assert r.returncode == 2
    doc = json.loads(r.stdout)
    assert doc["ok"] is False and doc["results"] == [] and doc["errors"][0]["rule"] == "no-gpu"
    assert r.stderr.count("\n") == 1 and "no GPU" in r.stderr


def test_nvrtc_errors_cite_files_that_exist(tmp_path):
    """A twin firing under --no-validate: every file an NVRTC line names (the rendered kernel, its
    config header) is still there to open; the compile's temp dir is gone."""
    path = _spec_file(tmp_path, head_dim=96, hadamard=False, rope={"dim": 0})
    r = kgen("compile", "--no-validate", "--arch", "sm_90a", path, env={"KGEN_CACHE_DIR": str(tmp_path / "c")})
    assert r.returncode == 1, r.stderr
    [first] = [ln for ln in r.stderr.splitlines() if "error[" in ln]
    assert first.startswith(f"{path}:") and "error[head-dim]" in first
    cited = re.findall(r"(/\S+?)\((\d+)\): error", r.stderr)
    assert cited, r.stderr
    for f, line in cited:
        assert Path(f).is_file() and int(line) <= len(Path(f).read_text().splitlines()), f
    assert list((tmp_path / "c" / "_tmp").iterdir()) == []


# ---------------------------------------------------------------------------------------------
# round 2: engine trees and every write (issue 23)

ENGINE = ROOT / "tests" / "fixtures" / "engines" / "sglang_v3"
POOL = "python/sglang/srt/mem_cache/deepseek_v4_memory_pool.py"
FIELDS = "python/sglang/srt/arg_groups/fields/exec_.py"
PKG = "python/sglang/kgen_indexer"
FP8 = SPECS / "dsv4" / "indexer_fp8.yaml"


def engine_tree(tmp_path: Path, name: str = "sg", crlf: bool = False) -> Path:
    """A private copy of the SGLang-shaped fixture, committed in a fresh git repository."""
    root = tmp_path / name
    shutil.copytree(ENGINE, root)
    if crlf:
        for p in root.rglob("*"):
            if p.is_file() and p.suffix in (".py", ".cuh", ".h"):
                p.write_bytes(p.read_bytes().replace(b"\n", b"\r\n"))
    for cmd in (["init", "-q"], ["-c", "core.autocrlf=false", "add", "-A"],
                ["-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "fixture"]):
        subprocess.run(["git", *cmd], cwd=root, check=True, capture_output=True)
    return root


def snapshot(root: Path) -> dict[str, object]:
    """Every entry under `root` but .git: file bytes, link targets, 'dir'."""
    out: dict[str, object] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d != ".git"]
        for name in dirnames + filenames:
            p = Path(dirpath, name)
            rel = str(p.relative_to(root))
            out[rel] = ("link", os.readlink(p)) if p.is_symlink() else "dir" if p.is_dir() else \
                p.read_bytes() if p.is_file() else "special"
    return out


def patch(root: Path, *args, spec: Path = BF16, timeout: int = 120):
    return kgen("patch", "--engine", "sglang", "--root", root, spec, *args, timeout=timeout)


def audit(root: Path, spec: Path = BF16):
    return kgen("audit", "--engine", "sglang", "--root", root, spec, timeout=120)


def git_check(root: Path, diff: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "apply", "--check", str(diff)], cwd=root, capture_output=True, text=True)


def litter(root: Path) -> list[str]:
    return [str(p) for p in root.rglob("*") if ".git" not in p.parts and
            (p.name.endswith((".tmp", ".old")) or p.name.startswith(".kgen"))]


# class 1: nothing outside the engine root


@pytest.mark.parametrize("linked", ["python/sglang/srt/mem_cache", PKG])
def test_apply_never_writes_through_a_linked_directory(tmp_path, linked):
    root = engine_tree(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    src = root / linked
    if src.exists():
        shutil.move(src, elsewhere)
    else:
        elsewhere.mkdir()
    src.symlink_to(elsewhere, target_is_directory=True)
    before, outside = snapshot(root), snapshot(elsewhere)
    r = patch(root, "--apply")
    assert r.returncode == 1, r.stderr
    assert "error[engine-write]" in r.stderr and "symbolic link to a directory" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr
    assert snapshot(root) == before and snapshot(elsewhere) == outside and not litter(tmp_path)


def test_a_linked_engine_file_is_followed_inside_the_root_and_refused_outside(tmp_path):
    root = engine_tree(tmp_path)
    pool = root / POOL
    inside = root / "python" / "pool_real.py"
    shutil.move(pool, inside)
    pool.symlink_to(os.path.relpath(inside, pool.parent))
    r = patch(root, "--apply")
    assert r.returncode == 0, r.stderr
    assert pool.is_symlink() and "kgen_indexer" in inside.read_text()  # the link stays, its file is patched
    assert audit(root).returncode == 0

    root2 = engine_tree(tmp_path, "sg2")
    outside = tmp_path / "outside_pool.py"
    shutil.move(root2 / POOL, outside)
    (root2 / POOL).symlink_to(outside)
    text, before = outside.read_bytes(), snapshot(root2)
    r = patch(root2, "--apply")
    assert r.returncode == 1 and "outside the engine root" in r.stderr, r.stderr
    assert outside.read_bytes() == text and snapshot(root2) == before


# class 2: CRLF trees keep their endings; the diff applies


def test_crlf_tree_diff_applies_and_apply_keeps_crlf(tmp_path):
    lf, crlf = engine_tree(tmp_path, "lf"), engine_tree(tmp_path, "crlf", crlf=True)
    diff = tmp_path / "crlf.diff"
    assert patch(crlf, "-o", diff).returncode == 0
    r = git_check(crlf, diff)
    assert r.returncode == 0, r.stderr
    assert patch(lf, "--apply").returncode == 0 and patch(crlf, "--apply").returncode == 0

    def numstat(root):
        r = subprocess.run(["git", "-c", "core.autocrlf=false", "diff", "--numstat"], cwd=root, capture_output=True,
                           text=True, check=True)
        return sorted(r.stdout.splitlines())

    assert numstat(crlf) == numstat(lf)  # the same lines changed: no file rewritten to LF
    for rel in subprocess.run(["git", "diff", "--name-only"], cwd=crlf, capture_output=True, text=True,
                              check=True).stdout.split():
        data = (crlf / rel).read_bytes()
        assert data.count(b"\n") == data.count(b"\r\n"), rel
    assert audit(crlf).returncode == 0


# class 3: contents and names git reads differently from str.splitlines


@pytest.mark.parametrize("char", ["\f", "\u2028", "\x1c", "\x85"])
def test_odd_line_breaks_in_a_comment_near_an_edit(tmp_path, char):
    root = engine_tree(tmp_path)
    pool = root / POOL
    lines = pool.read_text().split("\n")
    at = next(i for i, ln in enumerate(lines) if "def get_bytes_per_token" in ln)
    lines.insert(at, f"    # odd{char}break")
    pool.write_text("\n".join(lines), newline="")
    subprocess.run(["git", "commit", "-qam", "odd", "--author", "t <t@t>"], cwd=root, check=True,
                   capture_output=True, env={**os.environ, "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"})
    diff = tmp_path / "d.diff"
    assert patch(root, "-o", diff).returncode == 0
    r = git_check(root, diff)
    assert r.returncode == 0, r.stderr


def test_a_tab_or_newline_in_a_file_name_is_c_quoted(tmp_path):
    root = engine_tree(tmp_path)
    odd = "python/sglang/srt/arg_groups/fields/ex\tec\n.py"
    os.rename(root / FIELDS, root / odd)
    subprocess.run(["git", "add", "-A"], cwd=root, check=True)
    subprocess.run(["git", "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "odd"], cwd=root, check=True)
    diff = tmp_path / "d.diff"
    r = patch(root, "-o", diff)
    assert r.returncode == 0, r.stderr
    assert 'diff --git "a/python/sglang/srt/arg_groups/fields/ex\\tec\\n.py"' in diff.read_text()
    r = git_check(root, diff)
    assert r.returncode == 0, r.stderr


def test_diff_module_against_git_apply(tmp_path):
    """The diff text alone: every odd character in content, CRLF and CR files, a file without a final
    newline, a created and a deleted file."""
    from kgen.engines.diff import file_diff

    cases = {"a.txt": ("x\fy\u2028z\x1c\x85\n1\n2\n3\n", "x\fy\u2028z\x1c\x85\n1\nTWO\n3\n"),
             "crlf.txt": ("a\r\nb\r\nc\r\n", "a\r\nB\r\nc\r\n"), "cr.txt": ("a\rb\rc", "a\rB\rc"),
             "nonl.txt": ("one\ntwo", "one\ntwo\nthree"), "gone.txt": ("bye\n", None), "new.txt": (None, "hi\n")}
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    for name, (old, _) in cases.items():
        if old is not None:
            (tmp_path / name).write_bytes(old.encode())
    text = "".join(file_diff(name, old, new) for name, (old, new) in cases.items())
    (tmp_path / "p.diff").write_bytes(text.encode())
    r = subprocess.run(["git", "apply", "p.diff"], cwd=tmp_path, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    for name, (_, new) in cases.items():
        assert (tmp_path / name).read_bytes() == new.encode() if new is not None else not (tmp_path / name).exists()


# class 4: killed, interrupted or failed --apply: finished or undone, no litter

_KILLER = """
import os, signal, sys, tempfile
from pathlib import Path
from kgen.engines.commands import patch_command
root, where, n = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
count = [0]
if where == "rename":
    real = os.replace
    def hook(src, dst):
        real(src, dst)
        if not str(dst).endswith(".json"):
            count[0] += 1
            if count[0] == n:
                os.kill(os.getpid(), signal.SIGKILL)
    os.replace = hook
else:
    real_mk = tempfile.mkstemp
    def hook(*a, **k):
        count[0] += 1
        if count[0] == n:
            os.kill(os.getpid(), signal.SIGKILL)
        return real_mk(*a, **k)
    tempfile.mkstemp = hook
patch_command("sglang", root, Path(sys.argv[4]), None, True, False)
"""


@pytest.mark.parametrize("where, n", [("rename", 5), ("stage", 5)])  # the patch writes 10 files
def test_kill_9_during_apply_is_finished_or_undone_by_the_next_run(tmp_path, where, n):
    root, clean = engine_tree(tmp_path), engine_tree(tmp_path, "clean")
    before = snapshot(root)
    assert patch(clean, "--apply").returncode == 0
    r = subprocess.run([sys.executable, "-c", _KILLER, str(root), where, str(n), str(BF16)], capture_output=True,
                       text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert r.returncode == -9, r.stderr
    r = audit(root)  # a half-written tree is not audited as if it were the engine's
    assert r.returncode == 1 and "interrupted `kgen patch --apply`" in r.stderr, r.stderr
    if where == "rename":  # killed in the renames: the next --apply finishes the write
        r = patch(root, "--apply")
        assert r.returncode == 0 and "already carries" in r.stderr, r.stderr
        assert snapshot(root) == snapshot(clean)
    else:  # killed while staging: undone (the targets were never touched)
        from kgen import files

        assert files.recover(root) == "undone"
        assert snapshot(root) == before
    assert not litter(root)


def test_an_interrupt_right_after_a_rename_restores_that_file_too(tmp_path, monkeypatch):
    """KeyboardInterrupt (or SIGTERM's SystemExit) raised just after the third rename returned: every
    file is back as it was, including the third, and nothing staged is left."""
    import kgen.files

    targets = {tmp_path / f"f{i}.txt": f"new {i}\n" for i in range(5)}
    for i, t in enumerate(targets):
        if i % 2 == 0:
            t.write_text(f"old {i}\n")
    before = snapshot(tmp_path)
    real, calls = os.replace, []

    def late(src, dst):
        real(src, dst)
        if not str(dst).endswith(".json"):
            calls.append(dst)
            if len(calls) == 3:
                raise KeyboardInterrupt

    monkeypatch.setattr(kgen.files.os, "replace", late)
    with pytest.raises(KeyboardInterrupt):
        kgen.files.write_all(targets)
    assert snapshot(tmp_path) == before


def test_a_failed_apply_leaves_no_new_directory(tmp_path):
    root = engine_tree(tmp_path)
    before = snapshot(root)
    (root / POOL).chmod(0o444)  # the last of the renames would replace it: refused before any write
    r = patch(root, "--apply")
    assert r.returncode == 1 and "read-only" in r.stderr, r.stderr
    (root / POOL).chmod(0o644)
    assert snapshot(root) == before and not (root / PKG).exists() and not litter(root)


# class 5 and 6: outputs checked before any work; only regular files replaced


def test_apply_with_o_naming_a_directory_fails_before_any_work(tmp_path):
    root = engine_tree(tmp_path)
    before = snapshot(root)
    (tmp_path / "d").mkdir()
    r = patch(root, "--apply", "-o", tmp_path / "d", "--json")
    assert r.returncode == 2, r.stderr
    assert json.loads(r.stdout)["errors"][0]["rule"] == "engine-output"
    assert snapshot(root) == before


@pytest.mark.parametrize("inside", [POOL, f"{PKG}/host.py", "patch.diff"])
def test_o_inside_the_engine_root_is_refused(tmp_path, inside):
    root = engine_tree(tmp_path)
    before = snapshot(root)
    r = patch(root, "-o", root / inside)
    assert r.returncode == 2 and "inside the engine root" in r.stderr, r.stderr
    assert snapshot(root) == before


def test_o_a_fifo_is_refused_and_a_link_is_followed(tmp_path):
    root = engine_tree(tmp_path)
    fifo = tmp_path / "out.fifo"
    os.mkfifo(fifo)
    r = patch(root, "-o", fifo, timeout=30)
    assert r.returncode == 2 and "FIFO" in r.stderr, r.stderr
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    real, link = tmp_path / "real.diff", tmp_path / "link.diff"
    real.write_text("old\n")
    link.symlink_to(real)
    assert patch(root, "-o", link).returncode == 0
    assert link.is_symlink() and real.read_text().startswith("diff --git ")


@pytest.mark.parametrize("kind", ["fifo", "dir", "dangling", "readonly"])
def test_write_atomic_refuses_what_is_not_a_writable_regular_file(tmp_path, kind):
    from kgen import files

    t = tmp_path / "t"
    if kind == "fifo":
        os.mkfifo(t)
    elif kind == "dir":
        t.mkdir()
    elif kind == "dangling":
        t.symlink_to(tmp_path / "nowhere")
    else:
        t.write_text("keep\n")
        t.chmod(0o444)
    before = snapshot(tmp_path)
    with pytest.raises(files.UnsafeTarget):
        files.write_atomic(t, "x")
    with pytest.raises(files.UnsafeTarget):
        files.write_all({t: "x", tmp_path / "other": "y"})
    assert snapshot(tmp_path) == before


# class 8 (--apply) and 11: one patch at a time; re-patching replaces kgen's files


def test_concurrent_applies_do_not_mix_variants(tmp_path):
    root = engine_tree(tmp_path)
    cmd = [str(KGEN), "patch", "--engine", "sglang", "--root", str(root), "--apply"]
    procs = [subprocess.Popen([*cmd, str(spec)], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
             for spec in (BF16, FP8)]
    for p in procs:
        p.communicate(timeout=180)
        assert p.returncode == 0
    host = (root / PKG / "host.py").read_text()
    name = re.search(r"^NAME = ['\"](\w+)['\"]", host, re.M).group(1)
    spec = BF16 if name == "dsv4_indexer_bf16" else FP8
    assert audit(root, spec).returncode == 0
    specs = {f: re.search(r"^name: (\w+)", (root / PKG / f).read_text(), re.M).group(1)
             for f in ("spec.yaml", "spec_prefill.yaml")}
    assert specs == {"spec.yaml": name, "spec_prefill.yaml": f"{name}_prefill"}  # host and specs of one variant
    assert not litter(root)


def test_locked_is_exclusive_across_processes(tmp_path):
    from kgen import files

    holder = subprocess.Popen([sys.executable, "-c", "import sys, time\nfrom kgen import files\n"
                               "with files.locked(sys.argv[1]):\n    print('held', flush=True)\n    time.sleep(30)\n",
                               str(tmp_path)], stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(files.LockBusy):
            with files.locked(tmp_path, timeout=0.5):
                pass
    finally:
        holder.kill()
        holder.wait()
    with files.locked(tmp_path, timeout=5), files.locked(tmp_path):  # re-entrant in one process
        pass


def test_repatching_with_another_variant_removes_the_old_kernel_sources(tmp_path):
    root = engine_tree(tmp_path)
    assert patch(root, "--apply").returncode == 0
    stale = root / PKG / "kernel" / "dsv4_indexer_bf16" / "config.cuh"  # as an earlier kgen vendored them
    stale.parent.mkdir(parents=True)
    stale.write_text("// dsv4_indexer_bf16\n")
    diff = tmp_path / "fp8.diff"
    assert patch(root, "-o", diff, spec=FP8).returncode == 0
    assert "deleted file mode" in diff.read_text() and git_check(root, diff).returncode == 0
    assert patch(root, "--apply", spec=FP8).returncode == 0
    assert not (root / PKG / "kernel" / "dsv4_indexer_bf16").exists()
    assert audit(root, FP8).returncode == 0


# class 15 and 17: hostile engine files are one located line, fast, never a crash


@pytest.mark.parametrize("code, what", [
    ("x = " + "(" * 3000 + "1" + ")" * 3000 + "\n", "nest"),
    ("x = " + " + ".join(["a"] * 1500) + "\n", "nest"),
    ("x = f(" + "g(" * 400 + ")" * 401 + "\n", "nest"),
    ("x = [" + ", ".join(["1"] * 60000) + "]\n", "statement of more than"),
    ("# big\n" + "x = 1\n" * 500_000, "larger than kgen reads"),
])
def test_hostile_python_is_refused_before_libcst(tmp_path, code, what):
    root = engine_tree(tmp_path)
    (root / POOL).write_text(code)
    for cmd in (audit(root), patch(root, "--apply")):
        assert cmd.returncode == 1, cmd.stderr
        assert what in cmd.stderr and "Traceback" not in cmd.stderr, cmd.stderr[-2000:]
        [line] = [ln for ln in cmd.stderr.splitlines() if "error[" in ln]
        assert LINE_RE.match(line) and POOL in line, line


def test_non_utf8_engine_file_is_exit_2_for_audit_and_patch(tmp_path):
    root = engine_tree(tmp_path)
    data = (root / POOL).read_bytes()
    (root / POOL).write_bytes(data.replace(b"class ", b"\xff\xfeclass ", 1))
    line = data[:data.index(b"class ")].count(b"\n") + 1
    for r in (audit(root), patch(root)):
        assert r.returncode == 2, r.stderr
        assert f"{POOL}:{line}:1: error[engine-file-encoding]" in r.stderr, r.stderr


@pytest.mark.parametrize("code, line, col", [
    ("class A:\n    def f(self)\n        return 1\n", 2, 16),  # the parser: the line of the missing colon
    ("x = 1\ny = )\n", 2, 5),  # the tokenizer: an unmatched bracket
    ("x = 1\ns = '''open\n", 2, 5),  # the tokenizer: an unterminated string
])
def test_syntax_errors_are_located_where_they_are(tmp_path, code, line, col):
    root = engine_tree(tmp_path)
    (root / POOL).write_text(code)
    r = audit(root)
    assert r.returncode == 1
    assert f"{POOL}:{line}:" in r.stderr and "error[engine-syntax]" in r.stderr, r.stderr


@pytest.mark.parametrize("kind, says", [("loop", "symbolic link loop"), ("dir", "is a directory"),
                                        ("broken", "broken symbolic link"), ("empty", "the file is empty")])
def test_odd_things_at_an_anchored_path_are_one_located_line(tmp_path, kind, says):
    root = engine_tree(tmp_path)
    pool = root / POOL
    pool.unlink()
    if kind == "loop":
        pool.symlink_to(pool.name)
    elif kind == "dir":
        pool.mkdir()
    elif kind == "broken":
        pool.symlink_to("missing.py")
    else:
        pool.write_text("")
    r = audit(root)
    assert r.returncode == 1, r.stderr
    errors = [ln for ln in r.stderr.splitlines() if "error[" in ln]
    hits = [ln for ln in errors if says in ln]
    assert len(hits) == 1 and hits[0].startswith(f"{root / POOL}:1:1: "), r.stderr
    assert all("found none" not in ln for ln in errors if POOL in ln), r.stderr


# class 11 and 14: the engine-code evaluator on legal code


def _evaluate(code: str, name: str = "f"):
    import libcst as cst

    from kgen.engines.pyeval import Evaluator, Function, ModuleScope

    scope = ModuleScope("m.py", cst.parse_module(code))
    return Evaluator({}).call(Function(scope.functions[name], scope), [], {})


@pytest.mark.parametrize("code, says", [
    ("def f():\n    return 132 // 0\n", "ZeroDivisionError"),
    ("def f():\n    return 'a' + 1\n", "TypeError"),
    ("def f():\n    return None + 1\n", "TypeError"),
    ("def f():\n    return -None\n", "TypeError"),
    ("def f():\n    return 1 < 'a'\n", "TypeError"),
    ("A = B\nB = A\n\ndef f():\n    return A\n", "defined in terms of itself"),
    ("def f():\n    return 1" + "0" * 5000 + "\n", "5001 digits"),
    ("def f():\n    return 'ab' * 50000000\n", "repetition"),
    ("def f():\n    return 264 / 2\n", "a float"),
    ("def f():\n    return " + " + ".join(["1"] * 250) + "\n", None),
])
def test_evaluator_never_raises_on_legal_code(code, says):
    import resource

    from kgen.engines.pyeval import Unknown

    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    resource.setrlimit(resource.RLIMIT_AS, (4 << 30, hard))  # "ab" * 50M must not be built
    try:
        if says is None:
            assert _evaluate(code) == 250
            return
        with pytest.raises(Unknown, match=re.escape(says)):
            _evaluate(code)
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def test_huge_products_are_unknown_not_huge():
    from kgen.engines.pyeval import Unknown

    with pytest.raises(Unknown, match="bits"):
        _evaluate("def f():\n    x = 1000000000000\n    return " + " * ".join(["x"] * 40) + "\n")


@pytest.mark.parametrize("code", ["def f() -> int: return 132\n", "def f(): x = 66; return x * 2\n",
                                  "def f():\n    if True: return 132\n    return 0\n"])
def test_one_line_suites_are_read(code):
    assert _evaluate(code) == 132


def test_an_anchor_in_an_if_header_or_a_one_line_suite():
    import libcst as cst

    from kgen.engines.pyeval import Evaluator, Function, ModuleScope
    from kgen.engines.tree import calls, statement_of

    code = "def g(n):\n    return n\n\ndef f(p):\n    q = p * 2\n    if g(q // 4) is None:\n        raise E\n" \
           "    if p: g(q + 1)\n"
    scope = ModuleScope("m.py", cst.parse_module(code))
    fn = Function(scope.functions["f"], scope)
    header, suite = calls(fn.node, "g")
    assert isinstance(statement_of(fn.node, header), cst.If) and isinstance(statement_of(fn.node, suite), cst.If)
    ev = Evaluator({"p": 8})
    assert ev.value_at(fn, statement_of(fn.node, header), header.args[0].value, {"p": 8}) == 4
    assert ev.value_at(fn, statement_of(fn.node, suite), suite.args[0].value, {"p": 8}) == 17


_BPT = ("    def get_bytes_per_token(self) -> int:\n        return get_dsv4_indexer_bytes_per_token(\n"
        "            self.index_head_dim, self.use_fp4_indexer\n        )\n")


def test_true_division_does_not_agree_with_a_byte_count(tmp_path):
    root = engine_tree(tmp_path)
    pool = root / POOL
    one_line = "    def get_bytes_per_token(self) -> int:\n        return 264 / 2\n"
    pool.write_text(pool.read_text().replace(_BPT, one_line))
    r = audit(root, FP8)
    assert r.returncode == 1 and "a float" in r.stderr and "agrees" not in r.stdout, r.stderr + r.stdout


def test_one_line_def_and_an_anchor_in_an_if_header_are_audited_and_patched(tmp_path):
    root = engine_tree(tmp_path)
    pool = root / POOL
    text = pool.read_text().replace(_BPT, "    def get_bytes_per_token(self) -> int: return "
                                    "get_dsv4_indexer_bytes_per_token(self.index_head_dim, self.use_fp4_indexer)\n")
    probe = ("    def _probe(self, page_size):\n        if self._make_indexer_pool(1, page_size // 4, None, 128, 1, "
             "None) is None:\n            raise RuntimeError\n        if page_size: self._make_indexer_pool(1, "
             "page_size // 4, None, 128, 1, None)\n\n")
    pool.write_text(text.replace("    def _init_compressed_pools(", probe + "    def _init_compressed_pools("))
    r = audit(root, FP8)
    assert r.returncode == 0, r.stderr
    r = patch(root, "--apply")
    assert r.returncode == 0, r.stderr
    assert audit(root).returncode == 0


def test_a_kernel_constant_of_5000_digits_is_a_finding_not_a_crash(tmp_path):
    root = engine_tree(tmp_path)
    cuh = next(root.rglob("fused_norm_rope_v2.cuh"))
    cuh.write_text(cuh.read_text().replace("kIndexerBytes = 132 *", "kIndexerBytes = 1" + "3" * 5000 + " *"))
    r = audit(root, FP8)
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr[-3000:]
    assert "fused_norm_rope_v2.cuh" in r.stderr


def test_a_non_utf8_file_where_the_patch_writes_is_located_exit_2(tmp_path):
    root = engine_tree(tmp_path)
    (root / PKG).mkdir()
    (root / PKG / "host.py").write_bytes(b'x = "\xff"\n')
    for r in (patch(root, "--apply"), audit(root)):
        assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr[-2000:]
        assert f"{PKG}/host.py:1:6: error[engine-file-encoding]" in r.stderr, r.stderr
    assert (root / PKG / "host.py").read_bytes() == b'x = "\xff"\n'
