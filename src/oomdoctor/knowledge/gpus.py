"""GPUs: physical memory by product name (explain's slice evidence) and, for `estimate --gpu`, the memory
the CUDA caching allocator can see per named GPU.

Physical sizes (`physical_gib`, `is_slice`): smallest memory variant of each product in GiB (vendor
datasheets; torch prints a little less than the marketing size because of reserved memory, e.g. H200
139.80 GiB in the fixtures). A CUDA total far below the physical size of the GPU named in the same log
means a slice (MIG, vGPU profile, HAMi / gpu-manager / cGPU limit): environment-facts.md §4.

`GPUS` / `get_gpu` (estimate): `total_memory` is what torch.cuda.get_device_properties().total_memory
reports. Measured here for the H100; the others are the NVIDIA datasheet capacity with the "Total" MiB
that nvidia-smi / NVML reports for the board as commonly published, minus the NVML-vs-torch gap
measured on the H100 (85520809984 vs 85017493504 bytes = 480 MiB), so they carry that uncertainty.
"""


from __future__ import annotations

import re
from dataclasses import dataclass

from oomdoctor.errors import UsageError

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

MiB = 1 << 20


@dataclass(frozen=True)
class GpuSpec:
    key: str
    name: str
    total_memory: int  # bytes, as torch.cuda.get_device_properties().total_memory
    capability: tuple[int, int]
    source: str
    sm_count: int = 132  # cudaDeviceProp.multiProcessorCount (sizes reduction staging and cuDNN split-K)
    max_threads_per_sm: int = 2048  # cudaDeviceProp.maxThreadsPerMultiProcessor


_DS = "NVIDIA datasheet capacity; total = nvidia-smi 'Total' MiB as published for the board minus 480 MiB"
_NVML_TO_TORCH = 480 * MiB  # measured on H100: NVML total 81559 MiB vs torch total_memory 81079 MiB


# Resident threads per SM by compute capability: CUDA C++ Programming Guide, "Compute Capabilities",
# table "Technical Specifications per Compute Capability" (Maximum number of resident threads per SM).
_THREADS_PER_SM = {(7, 0): 2048, (7, 5): 1024, (8, 0): 2048, (8, 6): 1536, (8, 7): 2048, (8, 9): 1536,
                   (9, 0): 2048}


def _ds(key: str, name: str, nvml_mib: int, cap: tuple[int, int], sms: int) -> GpuSpec:
    """SM counts: NVIDIA's datasheets / architecture whitepapers (H100: Hopper whitepaper, SXM5 132 and
    PCIe 114; A100: Ampere whitepaper, 108; L4 58, L40S 142, A10G 80, T4 40, V100 80, RTX 4090 128,
    RTX 3090 82: the product datasheets)."""
    return GpuSpec(key, name, nvml_mib * MiB - _NVML_TO_TORCH, cap, f"{_DS} ({nvml_mib} MiB)", sms,
                   _THREADS_PER_SM[cap])


GPUS: dict[str, GpuSpec] = {g.key: g for g in (
    GpuSpec("h100", "NVIDIA H100 80GB HBM3 (SXM)", 85017493504, (9, 0),
            "measured: torch.cuda.get_device_properties(0) on the device machine (total_memory, 132 SMs, 2048 "
            "threads/SM; validation/results/conv_workspace_grid_h100.json)", 132, 2048),
    _ds("h100-pcie", "NVIDIA H100 PCIe 80GB", 81559, (9, 0), 114),
    _ds("h200", "NVIDIA H200 141GB HBM3e", 143771, (9, 0), 132),
    _ds("a100-40gb", "NVIDIA A100-SXM4-40GB", 40960, (8, 0), 108),
    _ds("a100-80gb", "NVIDIA A100-SXM4-80GB", 81920, (8, 0), 108),
    _ds("l4", "NVIDIA L4 24GB", 23034, (8, 9), 58),
    _ds("l40s", "NVIDIA L40S 48GB", 46068, (8, 9), 142),
    _ds("a10g", "NVIDIA A10G 24GB", 23028, (8, 6), 80),
    _ds("t4", "NVIDIA Tesla T4 16GB", 15360, (7, 5), 40),
    _ds("v100-16gb", "NVIDIA Tesla V100 16GB", 16384, (7, 0), 80),
    _ds("v100-32gb", "NVIDIA Tesla V100 32GB", 32768, (7, 0), 80),
    _ds("rtx-4090", "NVIDIA GeForce RTX 4090 24GB", 24564, (8, 9), 128),
    _ds("rtx-3090", "NVIDIA GeForce RTX 3090 24GB", 24576, (8, 6), 82),
)}


_SIZES = {"a100": ("a100-40gb", "a100-80gb"), "v100": ("v100-16gb", "v100-32gb")}


def _normal(key: str) -> str:
    """The ways people write a GPU's name ("RTX4090", "nvidia-a100-80g", "H100 SXM") as this table's key."""
    k = re.sub(r"[\s_]+", "-", key.strip().lower())
    k = re.sub(r"^(?:nvidia-)?(?:geforce-|tesla-)?", "", k)
    k = re.sub(r"^rtx-?(\d{4})$", r"rtx-\1", k)
    # nvidia-smi's names: "A100-SXM4-80GB", "A100-PCIE-40GB", "V100-SXM2-32GB", "H100 80GB HBM3"
    k = re.sub(r"^(a100|v100)-(?:sxm\d?|pcie)-(\d{2})gb$", r"\1-\2gb", k)
    k = re.sub(r"^h100-80gb-hbm3$", "h100", k)
    k = re.sub(r"^(a100|v100)-?(\d{2})g?b?$", r"\1-\2gb", k)
    return {"h100-sxm": "h100", "h100-sxm5": "h100", "h200-sxm": "h200"}.get(k, k)


def get_gpu(key: str) -> GpuSpec:
    k = _normal(key)
    if k in _SIZES:
        raise UsageError(f"{key!r} comes in more than one size: {' or '.join(_SIZES[k])}")
    if k not in GPUS:
        raise UsageError(f"unknown GPU {key!r}; known: {', '.join(sorted(GPUS))}")
    return GPUS[k]
