"""`nvidia-smi -q -x` output -> GpuSnapshot.

Used when NVML cannot be loaded in-process, and to read bundles (`commands/nvidia-smi-q.xml`).
Field names follow the nvsmi_device DTD (v10-v12); many values are "N/A" and become None.
Entity declarations are refused (no entity expansion of untrusted XML).
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from typing import Any

from oomdoctor.parsers.gpu_snapshot import GpuSnapshot, empty_gpu

SOURCE = "nvidia-smi -q -x"
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(B|KiB|MiB|GiB|TiB|KB|MB|GB)?\s*$")
_FACTOR = {None: 1, "B": 1, "KiB": 1024, "KB": 1024, "MiB": 1024**2, "MB": 1024**2,
           "GiB": 1024**3, "GB": 1024**3, "TiB": 1024**4}


def _text(node: ET.Element | None, path: str) -> str | None:
    if node is None:
        return None
    found = node.find(path)
    if found is None or found.text is None:
        return None
    value = found.text.strip()
    return None if value in ("", "N/A", "[N/A]", "Not Supported", "[Not Supported]", "Unknown Error") else value


def _size(node: ET.Element | None, path: str) -> int | None:
    value = _text(node, path)
    m = _SIZE.match(value) if value else None
    return int(float(m.group(1)) * _FACTOR[m.group(2)]) if m else None


def _int(node: ET.Element | None, path: str) -> int | None:
    value = _text(node, path)
    return int(value) if value is not None and value.isascii() and value.isdigit() and len(value) < 20 else None


def _yes(node: ET.Element | None, path: str) -> bool | None:
    value = _text(node, path)
    if value is None:
        return None
    return value.lower() in ("yes", "true", "enabled")


def _sum(node: ET.Element | None, paths: tuple[str, ...]) -> int | None:
    values = [v for v in (_int(node, p) for p in paths) if v is not None]
    return sum(values) if values else None


def parse_smi_xml(text: str) -> GpuSnapshot:
    """Parse; a document that is not nvidia-smi XML gives a snapshot with `error` set, never raises."""
    if "<!ENTITY" in text:
        return GpuSnapshot(SOURCE, error="nvidia-smi XML refused: it declares entities")
    body = re.sub(r"<!DOCTYPE[^>]*>", "", text, count=1)
    try:
        root = ET.fromstring(body)
    except (ET.ParseError, ValueError) as exc:
        return GpuSnapshot(SOURCE, error=f"nvidia-smi XML unparsable: {exc}")
    if root.tag != "nvidia_smi_log":
        return GpuSnapshot(SOURCE, error=f"not nvidia-smi XML (root element <{root.tag[:40]}>)")
    snap = GpuSnapshot(SOURCE, driver_version=_text(root, "driver_version"),
                       cuda_driver_version=_text(root, "cuda_version"))
    for index, node in enumerate(root.findall("gpu")):
        snap.gpus.append(_gpu(index, node))
        for proc in node.findall("processes/process_info"):
            pid = _int(proc, "pid")
            if pid is None:
                continue
            snap.processes.append({
                "gpu": index, "pid": pid, "used_bytes": _size(proc, "used_memory"),
                "name": _text(proc, "process_name"), "type": _text(proc, "type"),
                "gpu_instance_id": _int(proc, "gpu_instance_id"),
            })
    return snap


def _gpu(index: int, node: ET.Element) -> dict[str, Any]:
    gpu = empty_gpu(index)
    fb = node.find("fb_memory_usage")
    gpu.update({
        "name": _text(node, "product_name"),
        "uuid": _text(node, "uuid"),
        "pci_bus_id": _text(node, "pci/pci_bus_id") or node.get("id"),
        "memory_total_bytes": _size(fb, "total"),
        "memory_used_bytes": _size(fb, "used"),
        "memory_free_bytes": _size(fb, "free"),
        "memory_reserved_bytes": _size(fb, "reserved"),
        "persistence_mode": _text(node, "persistence_mode"),
        "compute_mode": _text(node, "compute_mode"),
        "ecc_mode": _text(node, "ecc_mode/current_ecc"),
        "ecc_uncorrected": _sum(node, (
            "ecc_errors/volatile/dram_uncorrectable", "ecc_errors/volatile/sram_uncorrectable",
            "ecc_errors/volatile/double_bit/total")),
        "retired_pages": _sum(node, (
            "retired_pages/multiple_single_bit_retirement/retired_count",
            "retired_pages/double_bit_retirement/retired_count")),
        "retired_pending": _yes(node, "retired_pages/pending_retirement"),
        "remapped_pending": _yes(node, "remapped_rows/remapped_row_pending"),
        "remapped_failure": _yes(node, "remapped_rows/remapped_row_failure"),
        "reset_required": _yes(node, "gpu_reset_status/reset_required"),
        "mig_current": _text(node, "mig_mode/current_mig"),
        "mig_pending": _text(node, "mig_mode/pending_mig"),
        "virtualization_mode": _text(node, "gpu_virtualization_mode/virtualization_mode"),
    })
    for mig in node.findall("mig_devices/mig_device"):
        mfb = mig.find("fb_memory_usage")
        gpu["mig_devices"].append({
            "index": _int(mig, "index"), "gpu_instance_id": _int(mig, "gpu_instance_id"),
            "compute_instance_id": _int(mig, "compute_instance_id"), "name": None, "uuid": None,
            "memory_total_bytes": _size(mfb, "total"), "memory_used_bytes": _size(mfb, "used"),
        })
    return gpu
