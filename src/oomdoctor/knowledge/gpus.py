"""Physical memory of common data-centre and workstation GPUs, as `torch.cuda` reports total memory.

Used only as evidence: a CUDA total far below the physical size of the GPU named in the same log
means a slice (MIG, vGPU profile, HAMi / gpu-manager / cGPU limit): environment-facts.md §4,
"compare torch total vs NVML total: a mismatch is itself the signature of a slicing layer".
Values: smallest memory variant of each product in GiB (vendor datasheets; torch prints a little
less than the marketing size because of reserved memory, e.g. H200 139.80 GiB in the fixtures).
"""

from __future__ import annotations

import re

GIB = 1024**3

# name regex -> smallest physical memory in GiB (as marketed; the comparison leaves a wide margin)
_GPUS: tuple[tuple[str, float], ...] = (
    (r"H200", 141), (r"H100.{0,6}NVL", 94), (r"H100", 80), (r"H800", 80),
    (r"A100.{0,12}80 ?GB", 80), (r"A800.{0,12}80 ?GB", 80), (r"A100", 40), (r"A800", 40),
    (r"V100.{0,12}32 ?GB", 32), (r"V100", 16), (r"P100", 12), (r"T4\b", 16),
    (r"A10G", 24), (r"A10\b", 24), (r"A30\b", 24), (r"A40\b", 48), (r"L40S?\b", 48), (r"L4\b", 24),
    (r"RTX A6000", 48), (r"RTX 6000 Ada", 48), (r"4090", 24), (r"3090", 24),
)


def physical_gib(name: str) -> float | None:
    """Smallest physical memory (GiB) of the GPU model named in `name`, or None if unknown."""
    for pat, gib in _GPUS:
        if re.search(pat, name):
            return gib
    return None


def is_slice(total_bytes: int, name: str) -> float | None:
    """The physical size (GiB) when `total_bytes` is under 80% of it (a slice), else None."""
    gib = physical_gib(name)
    if gib is None or total_bytes <= 0:
        return None
    return gib if total_bytes < 0.8 * gib * GIB else None
