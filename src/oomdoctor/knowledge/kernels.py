"""Linux kernel vs NVIDIA driver (environment-facts.md section 2).

Two different things: the *compile-time floor* of a driver branch (2b: below it the module does not
build) and the *validated distro kernels* of the CUDA Installation Guide (2a: what NVIDIA qualified).
A kernel above the floor but below every validated kernel builds and loads, yet runs a combination
nobody tested: the seed case (kernel 3.10 with driver 535) lives there.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from oomdoctor.knowledge.versions import kernel_mm

IG = "CUDA Installation Guide for Linux, supported distributions table [IG112][IG1201][IG124]"


@dataclass(frozen=True)
class KernelFloor:
    branches: tuple[int, int]  # inclusive range of driver branches
    floor: tuple[int, int, int]
    source: str


# Table 2b [SGFXI62][NVLINUXH][SYNO]. 510..555 keep nv-linux.h's 2.6.32 check, but 510's README raised
# the documented minimum to 3.10; 560+ refuse to build below 4.15.
KERNEL_FLOORS: tuple[KernelFloor, ...] = (
    KernelFloor((0, 505), (2, 6, 32), "driver README [SGFXI62]"),
    KernelFloor((510, 555), (3, 10, 0), "510 README raised the minimum to 3.10 [SGFXI62]; nv-linux.h [NVLINUXH]"),
    KernelFloor((560, 9999), (4, 15, 0), "nv-linux.h: 'This driver does not support kernels older than Linux 4.15!' [NVLINUXH]"),
)


@dataclass(frozen=True)
class DistroKernel:
    distro: str
    kernel: tuple[int, int, int]
    cuda_from: tuple[int, int]
    cuda_to: tuple[int, int] | None  # last CUDA that lists it; None = still listed
    source: str


# Table 2a. cuda_to for Ubuntu 18.04 is "dropped in 12.x, exact release unverified": 11.8 is the safe bound.
VALIDATED_KERNELS: tuple[DistroKernel, ...] = (
    DistroKernel("RHEL/CentOS 7", (3, 10, 0), (11, 0), (12, 4), "[IG112][IG124]"),
    DistroKernel("RHEL/CentOS 8", (4, 18, 0), (11, 0), None, "[IG112]"),
    DistroKernel("Ubuntu 16.04", (4, 5, 0), (11, 0), (11, 2), "[IG112]"),
    DistroKernel("Ubuntu 18.04", (4, 15, 0), (11, 0), (11, 8), "[IG112]"),
    DistroKernel("Ubuntu 20.04", (5, 4, 0), (11, 2), None, "[IG112]"),
    DistroKernel("Ubuntu 22.04", (5, 15, 0), (12, 0), None, "[IG1201]"),
    DistroKernel("SLES/openSUSE 15", (4, 12, 14), (11, 2), None, "[IG112]"),
    DistroKernel("Debian 10", (4, 19, 0), (11, 2), None, "[IG112]"),
    DistroKernel("RHEL 9", (5, 14, 0), (12, 0), None, "(distro default, unverified)"),
)

# RHEL/CentOS 7 kernel build numbers -> minor release (3.10.0-<build>.el7).
EL7_BUILDS: tuple[tuple[int, str], ...] = (
    (1160, "7.9"), (1127, "7.8"), (1062, "7.7"), (957, "7.6"), (862, "7.5"), (693, "7.4"),
    (514, "7.3"), (327, "7.2"), (229, "7.1"), (123, "7.0"),
)


def floor_for_branch(branch: int) -> KernelFloor | None:
    for f in KERNEL_FLOORS:
        if f.branches[0] <= branch <= f.branches[1]:
            return f
    return None


def validated_for_cuda(cuda: tuple[int, int]) -> list[DistroKernel]:
    return [d for d in VALIDATED_KERNELS
            if d.cuda_from <= cuda and (d.cuda_to is None or cuda <= d.cuda_to)]


def is_el7(release: str) -> bool:
    return bool(re.search(r"\.el7", str(release))) and (kernel_mm(release) or (0, 0))[:2] == (3, 10)


def el7_minor(release: str) -> str | None:
    m = re.search(r"3\.10\.0-(\d+)", str(release))
    if not m:
        return None
    build = int(m.group(1))
    for b, minor in EL7_BUILDS:
        if build >= b:
            return minor
    return None
