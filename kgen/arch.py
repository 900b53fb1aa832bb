"""GPU architectures: the names kgen accepts (sm_90, sm_90a, sm_100f), and which cubin runs where.

One module for what an architecture name means and what its SMs hold (`CAPACITY`: resident warps and
blocks, registers, shared memory, programmatic dependent launch; `has_wgmma`), so that the targets rule,
`--arch`, the launch rules, the reader's launch plan, the compiler, the launch stack and the loader agree.
The kernels' static_assert twins get these numbers rendered into each config (kgen.render), never typed
again in a header. Pure (no CUDA, no NVRTC): `problem` asks kgen.toolchain what this NVRTC can target.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass

from .diagnostics import KgenError, Problem, shown
from .toolchain import supported_archs

ARCH_RE = re.compile(r"sm_(\d+)([af]?)")
ARCH_FLOOR = 80  # kgen kernels need bf16 arithmetic
PDL_MIN_CC = 90  # griddepcontrol (programmatic dependent launch) exists from sm_90 on
CLUSTER_MIN_CC = 90  # thread-block clusters (distributed shared memory) exist from sm_90 on
CLUSTER_PORTABLE = 8  # CTAs a cluster may hold on every device with clusters; more need the kernel's opt-in
WARP_THREADS = 32
MAX_THREADS_PER_BLOCK = 1024  # every capability kgen targets
DEFAULT_SHARED_BYTES = 48 * 1024  # dynamic + static shared memory of a block without an opt-in


@dataclass(frozen=True)
class Capacity:
    """What one SM of a compute capability holds (CUDA programming guide, "technical specifications per
    compute capability"). `__launch_bounds__`' minimum blocks per SM is ignored by ptxas beyond
    `blocks`; a block opts in to at most `block_shared_bytes` of shared memory, and the driver keeps
    `reserved_shared_bytes` of the SM's `shared_bytes` per resident block."""

    warps: int  # resident warps
    blocks: int  # resident blocks
    registers: int  # 32-bit registers
    shared_bytes: int
    block_shared_bytes: int
    reserved_shared_bytes: int

    @property
    def threads(self) -> int:
        return self.warps * WARP_THREADS


_KB = 1024
CAPACITY: dict[int, Capacity] = {
    75: Capacity(32, 16, 65536, 64 * _KB, 64 * _KB, 0),
    80: Capacity(64, 32, 65536, 164 * _KB, 163 * _KB, _KB),
    86: Capacity(48, 16, 65536, 100 * _KB, 99 * _KB, _KB),
    87: Capacity(48, 16, 65536, 164 * _KB, 163 * _KB, _KB),
    89: Capacity(48, 24, 65536, 100 * _KB, 99 * _KB, _KB),
    90: Capacity(64, 32, 65536, 228 * _KB, 227 * _KB, _KB),
    100: Capacity(64, 32, 65536, 228 * _KB, 227 * _KB, _KB),
    103: Capacity(64, 32, 65536, 228 * _KB, 227 * _KB, _KB),
    120: Capacity(48, 32, 65536, 100 * _KB, 99 * _KB, _KB),
    121: Capacity(48, 32, 65536, 100 * _KB, 99 * _KB, _KB),
}
# (resident warps, resident blocks) per capability: the launch rule's view of CAPACITY
SM_LIMITS = {cc: (c.warps, c.blocks) for cc, c in CAPACITY.items()}
# the most warps any SM holds: the launch rule's bound, which the kernel's static_assert twin checks too
MAX_WARPS_PER_SM = max(c.warps for c in CAPACITY.values())
REGISTERS_PER_SM = min(c.registers for c in CAPACITY.values())  # the writer's register budget (any arch)
SM90 = CAPACITY[90]  # the reader's wgmma path: sm_90a only (has_wgmma)


def supports_pdl(capability: tuple[int, int]) -> bool:
    """Can a kernel of this compute capability wait for its predecessor in-kernel (griddepcontrol)?"""
    return capability[0] * 10 + capability[1] >= PDL_MIN_CC


def capacity(cc: int) -> Capacity:
    """CAPACITY of compute capability `cc` (major * 10 + minor); one kgen does not know yet gets the least
    any known capability of its major has (else of any): a plan for it stays within what its SM holds."""
    if cc in CAPACITY:
        return CAPACITY[cc]
    known = [c for k, c in CAPACITY.items() if k // 10 == cc // 10] or list(CAPACITY.values())
    return Capacity(*(min(getattr(c, f.name) for c in known) for f in dataclasses.fields(Capacity)))


@dataclass(frozen=True)
class DeviceFacts:
    """What a launch plan needs to know of one GPU (kgen.runtime.device_facts asks torch once per device);
    it reaches the ABI's launch rules inside the checked arguments (kgen.abi.Args.device)."""

    index: int
    sm_count: int
    l2_bytes: int  # 0: unknown
    capability: int  # major * 10 + minor: what one block may hold (CAPACITY), whether clusters exist
    # (CTAs a cluster, how many such clusters run at once) for the kernel being planned, as the driver answered for
    # its function (KernelAbi.cluster_sizes; kgen.launcher.DriverKernel.clusters_at_once): a cluster must fit in
    # one GPC, so SMs / size can overstate it (H200: 30 clusters of four one-per-SM CTAs, 15 of eight; not 33 and 16).
    # Empty: not asked
    cluster_counts: tuple[tuple[int, int], ...] = ()

    @property
    def block_shared_bytes(self) -> int:
        """The dynamic shared memory one block may opt in to."""
        return capacity(self.capability).block_shared_bytes

    def clusters_at_once(self, size: int) -> int | None:
        """How many clusters of `size` CTAs of the planned kernel run at once (0: the driver refused the size), or
        None where the driver was not asked."""
        return dict(self.cluster_counts).get(int(size))

    @property
    def clusters(self) -> bool:
        """Can a launch group its blocks in thread-block clusters?"""
        return self.capability >= CLUSTER_MIN_CC


# arguments checked for no GPU: the CPU emulation, which models an sm_90 SM
NO_DEVICE = DeviceFacts(index=-1, sm_count=1, l2_bytes=0, capability=90)


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
