"""One shape for "what the driver says about the GPUs", whether read through NVML or nvidia-smi XML.

The NVML backend (collectors) and the `nvidia-smi -q -x` parser (pure) both produce a GpuSnapshot,
so everything downstream (facts, checks, bundles) has a single code path.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# Fields of one GPU entry (None when the driver did not say). Kept in sync with the doc of the
# `driver.gpus` fact key; extra fields are allowed.
GPU_FIELDS = (
    "index", "name", "uuid", "pci_bus_id", "memory_total_bytes", "memory_used_bytes", "memory_free_bytes",
    "memory_reserved_bytes", "persistence_mode", "compute_mode", "ecc_mode", "ecc_uncorrected",
    "retired_pages", "retired_pending", "remapped_pending", "remapped_failure", "reset_required",
    "capability", "mig_current", "mig_pending", "virtualization_mode", "mig_devices",
)


@dataclass
class GpuSnapshot:
    source: str
    error: str | None = None
    nvml_error: str | None = None  # why NVML itself failed, even when a fallback then answered
    driver_version: str | None = None
    cuda_driver_version: str | None = None
    gpus: list[dict[str, Any]] = field(default_factory=list)
    processes: list[dict[str, Any]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.error is None


def empty_gpu(index: int) -> dict[str, Any]:
    gpu: dict[str, Any] = dict.fromkeys(GPU_FIELDS)
    gpu["index"] = index
    gpu["mig_devices"] = []
    return gpu


def cuda_version_from_int(value: int | None) -> str | None:
    """12020 -> '12.2' (the driver API / NVML encoding 1000*major + 10*minor)."""
    if not isinstance(value, int) or value <= 0:
        return None
    return f"{value // 1000}.{(value % 1000) // 10}"
