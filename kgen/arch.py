"""GPU architectures: the names kgen accepts (sm_90, sm_90a, sm_100f), and which cubin runs where.

One module for what an architecture name means, so that the targets rule, `--arch`, the compiler
and the loader agree. Pure (no CUDA, no NVRTC): `supported` asks kgen.toolchain what this NVRTC
can target.
"""

from __future__ import annotations

import re

from .diagnostics import KgenError, Problem

ARCH_RE = re.compile(r"sm_(\d+)([af]?)")
ARCH_FLOOR = 80  # kgen kernels need bf16 arithmetic


def parse(name: str) -> tuple[int, int, str] | None:
    """'sm_90a' -> (9, 0, 'a'); 'sm_100f' -> (10, 0, 'f'); None if not an architecture name."""
    m = ARCH_RE.fullmatch(name)
    if not m:
        return None
    cc = int(m.group(1))
    return cc // 10, cc % 10, m.group(2)


def name(capability: tuple[int, int]) -> str:
    """(9, 0) -> 'sm_90'."""
    major, minor = capability
    return f"sm_{major}{minor}"


def runs_on(target: str, capability: tuple[int, int]) -> bool:
    """Can a cubin built for `target` run on a device of `capability`?

    cubins (SASS) are forward compatible within a major version only: sm_XY runs on X.Z for Z >= Y.
    Arch-specific targets ('a', e.g. sm_90a) run on exactly that compute capability; family targets
    ('f', e.g. sm_100f) run on the same major with minor >= theirs. Nothing runs across majors
    (kgen ships cubins, no PTX for the driver to JIT).
    """
    parsed = parse(target)
    if parsed is None:
        return False
    major, minor, suffix = parsed
    dev_major, dev_minor = capability
    if major != dev_major:
        return False
    if suffix == "a":
        return minor == dev_minor
    return dev_minor >= minor


def pick(capability: tuple[int, int], targets: list[str]) -> str | None:
    """The best of `targets` for a device: an exact match ('a' first: it may use the arch-specific
    instructions, then 'f', then plain), else the compatible one with the highest minor."""
    rank = {"a": 0, "f": 1, "": 2}
    ok = [(t, p) for t in targets if runs_on(t, capability) and (p := parse(t)) is not None]
    if not ok:
        return None
    return min(ok, key=lambda tp: (0 if tp[1][:2] == tuple(capability) else 1, -tp[1][1], rank[tp[1][2]]))[0]


def check(capability: tuple[int, int], targets: list[str], *, device_name: str = "this GPU",
               variant: str = "the variant") -> str:
    """The target to load on this device, or a KgenError naming the device, its arch and the targets."""
    target = pick(capability, targets)
    if target is not None:
        return target
    arch = name(capability)
    want = f"{arch}a" if capability[0] >= 9 else arch
    raise KgenError([Problem(
        "gpu-arch",
        f"{variant} has no cubin that runs on {device_name} (compute capability "
        f"{capability[0]}.{capability[1]}, {arch}): its targets are [{', '.join(targets) or 'none'}]; "
        f"cubins run only on their own major version (and 'a' targets only on their exact arch)",
        loc=("targets",), fix=f"add {want} to targets (or compile with --arch {want})")], exit_code=1)
