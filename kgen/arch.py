"""GPU architectures: the names kgen accepts (sm_90, sm_90a, sm_100f), and which cubin runs where.

One module for what an architecture name means and what its SMs hold, so that the targets rule,
`--arch`, the launch rules, the compiler and the loader agree. Pure (no CUDA, no NVRTC): `problem`
asks kgen.toolchain what this NVRTC can target.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .diagnostics import KgenError, Problem, shown
from .toolchain import supported_archs

ARCH_RE = re.compile(r"sm_(\d+)([af]?)")
ARCH_FLOOR = 80  # kgen kernels need bf16 arithmetic
# (resident warps, resident blocks) of one SM per compute capability (CUDA programming guide,
# "technical specifications per compute capability"): `__launch_bounds__`' minimum blocks per SM is
# ignored by ptxas beyond them. Capabilities missing here are not checked.
SM_LIMITS = {75: (32, 16), 80: (64, 32), 86: (48, 16), 87: (48, 16), 89: (48, 24), 90: (64, 32),
             100: (64, 32), 103: (64, 32), 120: (48, 32), 121: (48, 32)}
# the most warps any SM holds: the launch rule's bound, which the kernel's static_assert twin checks too
MAX_WARPS_PER_SM = max(warps for warps, _ in SM_LIMITS.values())


@dataclass(frozen=True)
class DeviceFacts:
    """What a launch plan needs to know of one GPU (kgen.runtime.device_facts asks torch once per device);
    it reaches the ABI's launch rules inside the checked arguments (kgen.abi.Args.device)."""

    index: int
    sm_count: int
    l2_bytes: int  # 0: unknown


NO_DEVICE = DeviceFacts(index=-1, sm_count=1, l2_bytes=0)  # arguments checked for no GPU (the CPU emulation)


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


def has_wgmma(target: str) -> bool:
    """Does a cubin for `target` have the warpgroup tensor-core instructions (wgmma, sm_90a only:
    they are arch-specific, so neither sm_90 nor any sm_100 target has them)? The reader's kernel
    compiles its wgmma path under the same condition (__CUDA_ARCH_FEAT_SM90_ALL)."""
    parsed = parse(target)
    return parsed is not None and parsed == (9, 0, "a")


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


def problem(arch: str) -> tuple[str, str] | None:
    """(message, fix) when `arch` is no target kgen can compile for: malformed, below the floor, a
    suffix its capability lacks, or unknown to this NVRTC. The targets rule and `--arch` (`check_option`) share it."""
    m = ARCH_RE.fullmatch(arch)
    if not m:
        return (f"'{shown(arch)[:40]}' is not an architecture name like sm_90a",
                "write sm_<major><minor>[a|f], e.g. sm_90a")

    known, source = supported_archs()
    cc, suffix = int(m.group(1)), m.group(2)
    if cc not in known:
        return (f"{source} cannot target {arch}: it supports compute capabilities "
                f"{', '.join(map(str, sorted(known)))}", "pick one of those")
    if suffix == "a" and cc < 90 or suffix == "f" and cc < 100:
        return (f"{arch}: the '{suffix}' suffix needs compute capability {'9.0' if suffix == 'a' else '10.0'} "
                "or newer", f"write sm_{cc}")
    if cc < ARCH_FLOOR:
        return (f"{arch}: kgen kernels need bf16 arithmetic (sm_{ARCH_FLOOR} or newer)",
                f"target sm_{ARCH_FLOOR} or newer")
    return None


def check_option(archs: list[str] | None) -> list[str] | None:
    """--arch values, de-duplicated; any the targets rule would refuse is a usage error (exit 2)."""
    if not archs:
        return None
    bad = []
    for a in archs:
        found = problem(a)
        if found is not None:
            bad.append(Problem("arch", f"--arch: {found[0]}", fix=found[1]))
    if bad:
        raise KgenError(bad, exit_code=2)
    return list(dict.fromkeys(archs))


def sm_limits(arch: str) -> tuple[int, int] | None:
    """(resident warps, resident blocks) of one SM of `arch`, or None when not known."""
    m = ARCH_RE.fullmatch(arch)
    return SM_LIMITS.get(int(m.group(1))) if m else None
