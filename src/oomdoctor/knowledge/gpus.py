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

import difflib
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
                   (9, 0): 2048, (10, 0): 2048}


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
    # H100 NVL: 94 GB HBM3 (NVIDIA H100 datasheet); nvidia-smi "0MiB / 95830MiB" (NVIDIA/gpu-admin-tools#4);
    # 16896 CUDA cores = 132 SMs (NVML's core count, fastfetch-cli/fastfetch#1658)
    _ds("h100-nvl", "NVIDIA H100 NVL 94GB", 95830, (9, 0), 132),
    _ds("h200", "NVIDIA H200 141GB HBM3e", 143771, (9, 0), 132),
    _ds("a100-40gb", "NVIDIA A100-SXM4-40GB", 40960, (8, 0), 108),
    _ds("a100-80gb", "NVIDIA A100-SXM4-80GB", 81920, (8, 0), 108),
    _ds("l4", "NVIDIA L4 24GB", 23034, (8, 9), 58),
    _ds("l40s", "NVIDIA L40S 48GB", 46068, (8, 9), 142),
    _ds("a10g", "NVIDIA A10G 24GB", 23028, (8, 6), 80),
    # A10: 24 GB GDDR6, 9216 CUDA cores = 72 SMs (NVIDIA A10 datasheet); nvidia-smi 23028 MiB (modal-labs/modal-client#2797)
    _ds("a10", "NVIDIA A10 24GB", 23028, (8, 6), 72),
    _ds("t4", "NVIDIA Tesla T4 16GB", 15360, (7, 5), 40),
    _ds("v100-16gb", "NVIDIA Tesla V100 16GB", 16384, (7, 0), 80),
    _ds("v100-32gb", "NVIDIA Tesla V100 32GB", 32768, (7, 0), 80),
    _ds("rtx-4090", "NVIDIA GeForce RTX 4090 24GB", 24564, (8, 9), 128),
    _ds("rtx-3090", "NVIDIA GeForce RTX 3090 24GB", 24576, (8, 6), 82),
    # RTX A6000: 48 GB GDDR6, GA102 (8.6), 10752 CUDA cores = 84 SMs (NVIDIA RTX A6000 datasheet); nvidia-smi
    # "NVIDIA RTX A6000 | 49140 MiB" (noonghunna/club-3090#1047)
    _ds("rtx-a6000", "NVIDIA RTX A6000 48GB", 49140, (8, 6), 84),
    # B200: nvidia-smi "NVIDIA B200 ... / 183359MiB" (NVIDIA/TensorRT-LLM#10278); compute capability 10.0, 148 SMs,
    # 2048 threads/SM from cudaGetDeviceProperties on a B200 (pytorch/ao#4002); NVIDIA sells it as 180 GB (HGX B200)
    _ds("b200", "NVIDIA B200 180GB HBM3e", 183359, (10, 0), 148),
    # not listed, no published nvidia-smi total found to source them: RTX 6000 Ada, L40 (give --memory-limit)
)}


# How nvidia-smi / NVML and people name one product: the family (the model number), the form factor (which
# changes the memory only for the H100: PCIe 80 GB, SXM 80 GB, NVL 94 GB) and the size. "NVIDIA", "GeForce" and
# "Tesla" are vendor words; HBM2e/HBM3/HBM3e is the memory type, which names no other variant here.
# (family, form factors, marketed GB, table key); form None: no form factor named
_VARIANTS: tuple[tuple[str, frozenset[str | None], int, str], ...] = (
    ("h100", frozenset({None, "sxm"}), 80, "h100"),  # nvidia-smi: "NVIDIA H100 80GB HBM3"
    ("h100", frozenset({"pcie"}), 80, "h100-pcie"),  # "NVIDIA H100 PCIe"
    ("h100", frozenset({"nvl"}), 94, "h100-nvl"),  # "NVIDIA H100 NVL"
    # H200 SXM and H200 NVL (PCIe) both carry 141 GB HBM3e on the same 132-SM GH100 (NVIDIA H200 datasheet)
    ("h200", frozenset({None, "sxm", "nvl"}), 141, "h200"),
    # A100 and V100: PCIe and SXM boards of one size have the same memory and SMs (Ampere / Volta whitepapers)
    ("a100", frozenset({None, "sxm", "pcie"}), 40, "a100-40gb"), ("a100", frozenset({None, "sxm", "pcie"}), 80, "a100-80gb"),
    ("v100", frozenset({None, "sxm", "pcie"}), 16, "v100-16gb"), ("v100", frozenset({None, "sxm", "pcie"}), 32, "v100-32gb"),
    ("l4", frozenset({None, "pcie"}), 24, "l4"), ("l40s", frozenset({None, "pcie"}), 48, "l40s"),
    ("a10g", frozenset({None}), 24, "a10g"), ("a10", frozenset({None, "pcie"}), 24, "a10"),
    ("t4", frozenset({None, "pcie"}), 16, "t4"),
    ("rtx-4090", frozenset({None}), 24, "rtx-4090"), ("rtx-3090", frozenset({None}), 24, "rtx-3090"),
    ("rtx-a6000", frozenset({None}), 48, "rtx-a6000"),  # nvidia-smi: "NVIDIA RTX A6000"
    ("b200", frozenset({None, "sxm"}), 180, "b200"),  # nvidia-smi: "NVIDIA B200"
)
_VENDOR = {"nvidia", "geforce", "tesla"}
_MEMORY_TYPE = {"hbm2", "hbm2e", "hbm3", "hbm3e"}
_FORMS = {"pcie": "pcie", "sxm": "sxm", "sxm2": "sxm", "sxm4": "sxm", "sxm5": "sxm", "nvl": "nvl"}


def _parse(name: str) -> tuple[str | None, set[str | None], int | None, list[str]]:
    """(family, form factors, GB, words left over) of a GPU's name, case, spacing, '-' and '_' aside."""
    words = [w for w in re.split(r"[^a-z0-9]+", name.strip().lower()) if w]
    family, forms, gb, rest = None, set(), None, []
    i = 0
    while i < len(words):
        w = words[i]
        rtx = re.fullmatch(r"rtx(\d{4})?", w)
        if rtx and family is None:  # "RTX 4090", "rtx4090", "rtx-4090"
            num = rtx.group(1) or (words[i + 1] if i + 1 < len(words) and re.fullmatch(r"a?\d{4}", words[i + 1]) else None)
            if num and not rtx.group(1):
                i += 1
            family = f"rtx-{num}" if num else "rtx"
        elif m := re.fullmatch(r"(\d+)g(?:i?b)?", w):  # "80GB", "80g"
            gb = int(m.group(1)) if gb is None else -1
        elif w in _FORMS:
            forms.add(_FORMS[w])
        elif w in _VENDOR or w in _MEMORY_TYPE:
            pass
        elif family is None:
            family = w
        else:
            rest.append(w)
        i += 1
    return family, forms or {None}, gb, rest


def _closest(family: str | None, forms: set[str | None], text: str) -> list[str]:
    """Table keys near a name that matched none: its family's variants (the named form factor first), else the
    families whose names are close to what was written."""
    fams = list(dict.fromkeys(f for f, _, _, _ in _VARIANTS))
    near = [family] if family in fams else difflib.get_close_matches(family or text, fams, n=2, cutoff=0.6)
    keys = [k for fam in near for named in (True, False) for f, fs, _, k in _VARIANTS
            if f == fam and bool(forms & fs) == named]
    return list(dict.fromkeys(keys))


def _unknown(key: str, close: list[str]) -> UsageError:
    """Names the way on, not just the table: --memory-limit takes any card (an unknown GPU is not a dead end)."""
    hint = f"closest: {', '.join(close)}; " if close else ""
    gib = physical_gib(key)
    example = f"{gib - 1:g}GiB for this {gib:g} GB card" if gib else "48GiB for a 48 GB card"
    return UsageError(f"unknown GPU {key[:80]!r}; {hint}known: {', '.join(sorted(GPUS))}; for another GPU give "
                      f"--memory-limit SIZE instead of --gpu, a little under its memory (e.g. {example}: "
                      "nvidia-smi's total less about 0.5 GiB)")


def get_gpu(key: str) -> GpuSpec:
    """The table's entry for a key ("a100-80gb") or a name as nvidia-smi / NVML prints it ("NVIDIA A100 80GB
    PCIe", "NVIDIA H100 NVL", "Tesla V100-SXM2-32GB") or as people write it ("RTX4090", "H100 SXM")."""
    if key.strip().lower() in GPUS:
        return GPUS[key.strip().lower()]
    family, forms, gb, rest = _parse(key)
    found = [(k, g) for f, fs, g, k in _VARIANTS if f == family and forms <= fs and gb in (None, g)]
    if "mig" in rest:
        raise UsageError(f"{key[:80]!r} is a MIG slice: its memory is its profile's, give --memory-limit SIZE")
    if rest or gb == -1 or len(forms) > 1 or not found:
        raise _unknown(key, _closest(family, forms, key.lower()))
    if len(found) > 1:
        raise UsageError(f"{key[:80]!r} comes in more than one size: {' or '.join(k for k, _ in found)}")
    return GPUS[found[0][0]]
