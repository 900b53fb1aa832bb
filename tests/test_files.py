"""kgen.files: a write is whole or absent; several writes are all or none."""

from __future__ import annotations

import os

import pytest

from kgen import files


def test_write_atomic_replaces_whole_and_keeps_the_mode(tmp_path):
    target = tmp_path / "sub" / "a.txt"
    files.write_atomic(target, "one")
    assert target.read_text() == "one" and (target.stat().st_mode & 0o777) == 0o644
    os.chmod(target, 0o600)
    files.write_atomic(target, b"two")
    assert target.read_bytes() == b"two" and (target.stat().st_mode & 0o777) == 0o600
    assert sorted(p.name for p in target.parent.iterdir()) == ["a.txt"]


def test_write_atomic_failure_leaves_the_old_file(tmp_path, monkeypatch):
    target = tmp_path / "a.txt"
    target.write_text("old")

    def boom(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(files.os, "replace", boom)
    with pytest.raises(OSError, match="disk full"):
        files.write_atomic(target, "new")
    assert target.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["a.txt"]


def test_write_all_is_all_or_none(tmp_path, monkeypatch):
    (tmp_path / "b.txt").write_text("b0")
    want = {tmp_path / "a.txt": "a1", tmp_path / "b.txt": "b1", tmp_path / "d" / "c.txt": "c1"}
    real, calls = os.replace, []

    def flaky(src, dst):
        calls.append(dst)
        if len(calls) == 3:  # the third rename fails: the first two are undone
            raise OSError("disk full")
        real(src, dst)

    monkeypatch.setattr(files.os, "replace", flaky)
    with pytest.raises(OSError, match="disk full"):
        files.write_all(want)
    assert not (tmp_path / "a.txt").exists() and (tmp_path / "b.txt").read_text() == "b0"
    assert not list(tmp_path.rglob(".*.tmp"))
    monkeypatch.setattr(files.os, "replace", real)
    files.write_all(want)
    assert {p: p.read_text() for p in want} == want


def test_write_all_deletes_and_prunes_the_directories_it_emptied(tmp_path):
    (tmp_path / "k" / "old").mkdir(parents=True)
    (tmp_path / "k" / "old" / "a.cuh").write_text("a")
    (tmp_path / "keep.txt").write_text("k")
    files.write_all({tmp_path / "k" / "old" / "a.cuh": None, tmp_path / "k" / "new" / "b.cuh": "b"}, root=tmp_path)
    assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*")) == ["k", "k/new", "k/new/b.cuh",
                                                                                   "keep.txt"]


_CHILD = """
import os, signal, sys
from pathlib import Path
from kgen import files
root, renames = Path(sys.argv[1]), int(sys.argv[2])
real, done = os.replace, []
def hook(src, dst):
    if not str(dst).endswith(files.JOURNAL):
        if len(done) == renames:
            os.kill(os.getpid(), signal.SIGKILL)
        done.append(dst)
    return real(src, dst)
os.replace = hook
files.write_all({root / "a.txt": "a1", root / "d" / "b.txt": "b1", root / "c.txt": None}, root=root)
"""


@pytest.mark.parametrize("renames", [0, 1])
def test_a_killed_commit_is_finished_by_recover(tmp_path, renames):
    import signal
    import subprocess
    import sys
    from pathlib import Path

    (tmp_path / "a.txt").write_text("a0")
    (tmp_path / "c.txt").write_text("c0")
    r = subprocess.run([sys.executable, "-c", _CHILD, str(tmp_path), str(renames)], capture_output=True, text=True,
                       env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}, timeout=60)
    assert r.returncode == -signal.SIGKILL, r.stderr
    assert files.pending(tmp_path)
    assert files.recover(tmp_path) == "finished"
    assert (tmp_path / "a.txt").read_text() == "a1" and (tmp_path / "d" / "b.txt").read_text() == "b1"
    assert not (tmp_path / "c.txt").exists()
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["a.txt", "b.txt", "d"]


def test_a_killed_staging_is_undone_by_the_next_write(tmp_path, monkeypatch):
    (tmp_path / "a.txt").write_text("a0")
    real, n = files.tempfile.mkstemp, [0]

    class Killed(BaseException):
        pass

    def hook(*a, **k):
        n[0] += 1
        if n[0] == 2:
            raise Killed
        return real(*a, **k)

    monkeypatch.setattr(files.tempfile, "mkstemp", hook)
    monkeypatch.setattr(files, "_undo", lambda journal, doc: None)
    with pytest.raises(Killed):
        files.write_all({tmp_path / "a.txt": "a1", tmp_path / "new" / "b.txt": "b1"}, root=tmp_path)
    monkeypatch.undo()
    assert files.pending(tmp_path) and (tmp_path / "new").is_dir()
    files.write_all({tmp_path / "z.txt": "z"}, root=tmp_path)  # the next write undoes the old one first
    assert (tmp_path / "a.txt").read_text() == "a0"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.txt", "z.txt"]


def test_a_journal_naming_paths_outside_its_directory_is_refused(tmp_path):
    inner = tmp_path / "tree"
    inner.mkdir()
    victim = tmp_path / "victim.txt"
    victim.write_text("keep")
    import json

    (inner / files.JOURNAL).write_text(json.dumps(
        {"magic": "kgen-write-journal", "state": "commit", "token": "ab12", "root": str(inner), "dirs": [],
         "files": [{"target": str(victim), "existed": True, "delete": True}]}))
    with pytest.raises(files.UnsafeTarget, match="not a kgen write journal"):
        files.recover(inner)
    assert victim.read_text() == "keep"
