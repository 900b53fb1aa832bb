"""Shared fixtures for the validator tests (no GPU, no torch)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

sys.path.insert(0, str(Path(__file__).resolve().parent))  # `import strategies` from any test file

from strategies import to_yaml  # noqa: E402

settings.register_profile("kgen", max_examples=200, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "kgen"))

# the console script and interpreter of the environment running the tests: the project's .venv under
# `make test`, and whatever venv a git worktree borrows (its PYTHONPATH, inherited, picks the code)
PYTHON = Path(sys.executable)
KGEN = PYTHON.parent / "kgen"


@pytest.fixture
def write(tmp_path):
    """write(name, dict_or_text) -> (path, positions): a spec file under tmp_path. For a dict, the
    positions map every key path to its (line, col), computed independently of kgen."""

    def _write(name: str, content) -> tuple[Path, dict]:
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, (bytes, bytearray)):
            path.write_bytes(content)
            return path, {}
        if isinstance(content, str):
            path.write_text(content)
            return path, {}
        text, pos = to_yaml(content)
        path.write_text(text)
        return path, pos

    return _write


@pytest.fixture
def validate():
    """validate(path) -> Result, or the KgenError's problems for an unreadable file."""
    from kgen.diagnostics import KgenError
    from kgen.validate import validate_path

    def _validate(path):
        try:
            return validate_path(Path(path))
        except KgenError as e:
            return e

    return _validate
