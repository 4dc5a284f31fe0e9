"""Workload layer: what the OOM-like lines in the job's own logs say about the cause."""

from __future__ import annotations

import re
from collections.abc import Iterator

from oomdoctor.checks._util import (
    Category,
    Confidence,
    FactSet,
    Finding,
    Layer,
    Severity,
    as_int,
    as_list,
    ev_value,
    finding,
    gpus,
    mib,
    short,
)
from oomdoctor.checks.registry import check
from oomdoctor.knowledge import shm
from oomdoctor.units import torch_size_to_bytes

L = Layer.WORKLOAD
_SIZE = r"([\d.,]+)\s*(GiB|MiB|KiB|bytes)"
_TOTAL = re.compile(rf"(?:{_SIZE} total capacity|total capacity of {_SIZE})", re.I)
_RESERVED_OLD = re.compile(rf"{_SIZE} reserved in total by PyTorch", re.I)
_ALLOCATED_OLD = re.compile(rf"{_SIZE} already allocated", re.I)
_ALLOCATED_NEW = re.compile(rf"{_SIZE} is allocated by PyTorch", re.I)
_UNALLOC_NEW = re.compile(rf"{_SIZE} is reserved by PyTorch but unallocated", re.I)
_OTHER_PROC = re.compile(rf"Process \d+ has {_SIZE} memory in use", re.I)


def _size(m: re.Match[str] | None) -> int | None:
    if not m:
        return None
    groups = [g for g in m.groups() if g is not None]
    return torch_size_to_bytes(groups[0], groups[1]) if len(groups) >= 2 else None


def classify(text: str, nvml_total: int | None, gpu_full: bool) -> tuple[str, Category, Severity, Confidence, str]:
    """(label, category, severity, confidence, why) for one OOM-like log line."""
    if re.search(r"HAMI-core ERROR.*OOM", text, re.I):
        return ("hami", Category.GPU_SHARING_LIMIT, Severity.ERROR, Confidence.HIGH, "HAMi's limit was reached")
    if re.search(r"CUDA out of memory\.|OutOfMemoryError", text):
        total = _size(_TOTAL.search(text))
        if total and nvml_total and total < 0.9 * nvml_total:
            return ("allocator", Category.GPU_SHARING_LIMIT, Severity.WARNING, Confidence.MEDIUM,
                    f"the OOM's total capacity {mib(total)} is smaller than the card's {mib(nvml_total)}: a slice")
        other = _size(_OTHER_PROC.search(text))
        if other and total and other >= 0.25 * total:
            return ("allocator", Category.OTHER_PROCESS, Severity.WARNING, Confidence.MEDIUM,
                    f"another process held {mib(other)} when PyTorch ran out")
        unalloc = _size(_UNALLOC_NEW.search(text))
        alloc = _size(_ALLOCATED_NEW.search(text)) or _size(_ALLOCATED_OLD.search(text))
        reserved = _size(_RESERVED_OLD.search(text))
        if unalloc is None and reserved is not None and alloc is not None:
            unalloc = max(0, reserved - alloc)
        if unalloc is not None and total and unalloc >= 0.2 * total:
            return ("allocator", Category.FRAGMENTATION, Severity.WARNING, Confidence.MEDIUM,
                    f"{mib(unalloc)} was reserved but unallocated (fragmentation)")
        return ("allocator", Category.TRUE_CAPACITY, Severity.WARNING, Confidence.LOW,
                "PyTorch's caching allocator ran out; see `oomdoctor explain` for the step that needed it")
    if re.search(r"CUDA error: out of memory|CUDA_ERROR_OUT_OF_MEMORY|cudaErrorMemoryAllocation", text):
        if gpu_full:
            return ("cuda_error", Category.OTHER_PROCESS, Severity.WARNING, Confidence.MEDIUM,
                    "a CUDA call (not PyTorch's allocator) failed and the GPU is nearly full")
        return ("cuda_error", Category.CONTEXT_OR_DRIVER, Severity.WARNING, Confidence.MEDIUM,
                "raised by a CUDA runtime call (context creation, model.to), not by PyTorch's allocator, "
                "while the GPU is not full")
    if re.search(r"illegal memory access|device-side assert|no kernel image is available|invalid device ordinal", text, re.I):
        return ("not_oom", Category.NOT_OOM, Severity.WARNING, Confidence.MEDIUM, "a program error, not memory capacity")
    if re.search(r"killed by signal: Killed|OOMKilled|Out of memory: Killed process", text):
        return ("host", Category.HOST_OOM, Severity.WARNING, Confidence.MEDIUM, "the host/cgroup OOM killer")
    if re.search(r"driver on your system is too old|insufficient for CUDA runtime", text):
        return ("driver", Category.CONTEXT_OR_DRIVER, Severity.WARNING, Confidence.HIGH, "the driver is too old")
    return ("other", Category.UNKNOWN, Severity.INFO, Confidence.LOW, "an OOM-like line")


@check("WRK001", L, "OOM-like errors in the job's logs")
def log_events(facts: FactSet) -> Iterator[Finding]:
    """The error's exact text says which path ran out. "CUDA out of memory. Tried to allocate …" comes
    from PyTorch's caching allocator (its "total capacity" is the *virtualised* size under MIG / HAMi /
    vcuda); "CUDA error: out of memory" comes from a CUDA runtime call outside the allocator, typically
    context creation or `model.to('cuda')` (the seed case's traceback, reproduced on an H200 only when
    another process left ~30 MiB free); "[HAMI-core ERROR …] Device N OOM" is HAMi's limit; "killed by
    signal: Killed" is the host OOM killer. Shared-memory failures are STO003. Sources: environment-facts.md
    3c, 4, 6, 7 [OOMTXT][HAMIOOM][PTDL]; memory-tools-and-papers.md 4.5.
    """
    cards = gpus(facts)
    nvml_total = as_int(cards[0].get("memory_total_bytes")) if cards else None
    gpu_full = any((as_int(g.get("memory_used_bytes")) or 0) >= 0.9 * (as_int(g.get("memory_total_bytes")) or 1 << 62)
                   for g in cards)
    groups: dict[tuple[str, Category], list[tuple[dict, str, Severity, Confidence]]] = {}
    for e in as_list(facts.value("workload.oom_events")):
        if not isinstance(e, dict):
            continue
        text = str(e.get("text", ""))
        if shm.is_shm_error(text) or shm.FD_PATTERN.search(text):
            continue
        label, cat, sev, conf, why = classify(text, nvml_total, gpu_full)
        groups.setdefault((label, cat), []).append((e, why, sev, conf))
    for (_label, cat), items in groups.items():
        e, why, sev, conf = items[0]
        where = f"{e.get('file', 'log')}:{e.get('line', '?')}"
        yield finding("WRK001", L, sev, conf,
                      f"{len(items)} log line(s) like '{short(e.get('text'), 90)}': {why}",
                      "run `oomdoctor explain <log> --bundle <bundle>` for a ranked explanation of each event",
                      None if cat is Category.UNKNOWN else cat,
                      [ev_value("workload.oom_events", f"{where}: {e.get('text')}", facts.source("workload.oom_events"))])
