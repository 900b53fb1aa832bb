"""The kernel's cheaper-but-exact scale arithmetic (templates/include/kgen/numerics.cuh), checked
exhaustively on the CPU: a / QMAX as one double multiply (every fp32 a with a normal quotient, and
+inf), the power-of-two scale from the bits (every normal or +inf t) and the e2m1 code as a rounded-up
ceil (every fp32 bit pattern)."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from strategies import ROOT

EXACT = ROOT / "tests" / "exact"
pytestmark = [pytest.mark.slow, pytest.mark.skipif(shutil.which("g++") is None, reason="no host C++ compiler")]


def _build(tmp_path, name: str) -> str:
    exe = tmp_path / name
    subprocess.run(["g++", "-std=c++20", "-O2", "-frounding-math", "-ffp-contract=off", "-pthread", "-w",
                    "-I", str(ROOT / "tests" / "cpu_shim"), "-I", str(ROOT / "templates" / "include"),
                    str(EXACT / f"{name}.cc"), "-o", str(exe)], check=True)
    return str(exe)


@pytest.mark.parametrize("qmax", ["448", "6"])  # layout.QUANT_MAX: e4m3, e2m1
def test_div_via_double_is_correctly_rounded_for_every_fp32(qmax, tmp_path):
    r = subprocess.run([_build(tmp_path, "div_via_double"), qmax, "1"], capture_output=True, text=True)
    assert r.returncode == 0 and " 0 mismatches" in r.stdout, r.stdout


def test_pow2_scale_bits_match_the_general_path_for_every_normal_t(tmp_path):
    r = subprocess.run([_build(tmp_path, "pow2")], capture_output=True, text=True)
    assert r.returncode == 0 and " 0 mismatches" in r.stdout, r.stdout


def test_e2m1_matches_the_threshold_sum_for_every_fp32(tmp_path):
    r = subprocess.run([_build(tmp_path, "e2m1")], capture_output=True, text=True)
    assert r.returncode == 0 and " 0 mismatches" in r.stdout, r.stdout


def test_quant_max_values_are_the_checked_ones():
    from kgen.layout import QUANT_MAX

    assert sorted(QUANT_MAX.values()) == [6.0, 448.0]
