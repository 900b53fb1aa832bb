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
