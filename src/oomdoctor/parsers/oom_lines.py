"""Spot OOM-like lines in user logs, for the `workload.oom_events` fact of a bundle.

This is a locator, not the explainer: it says *which* lines in the added logs look like memory
failures and of what kind, so `doctor` can tell that the bundle carries evidence; `oomdoctor
explain` does the full reading of those lines.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

_KINDS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("cuda_oom", re.compile(r"CUDA out of memory|OutOfMemoryError|CUDA_ERROR_OUT_OF_MEMORY|cudaErrorMemoryAllocation")),
    ("cuda_error_oom", re.compile(r"CUDA error: out of memory")),
    ("hami_oom", re.compile(r"\[HAMI-core ERROR.*OOM")),
    ("dataloader_bus_error", re.compile(r"killed by signal: Bus error|Unexpected bus error encountered in worker")),
    ("dataloader_killed", re.compile(r"DataLoader worker \(pid.*\) (?:is killed by signal: Killed|exited unexpectedly)")),
    ("shm_exhausted", re.compile(r"unable to (?:write to|allocate shared memory\(shm\) for) file </torch_|No space left on device \(28\)")),
    ("oom_killed", re.compile(r"OOMKilled|Killed process \d+|exit code 137|exitCode: 137")),
    ("driver_too_old", re.compile(r"NVIDIA driver on your system is too old|CUDA driver version is insufficient")),
    ("cuda_init", re.compile(r"CUDA initialization: |cudaErrorInitializationError|no CUDA-capable device")),
)
MAX_LINE = 4096


def find_oom_lines(lines: Iterable[str], file: str = "") -> list[dict[str, Any]]:
    out = []
    for number, line in enumerate(lines, 1):
        line = line[:MAX_LINE]
        for kind, pattern in _KINDS:
            if pattern.search(line):
                out.append({"file": file, "line": number, "kind": kind, "text": line.strip()[:300]})
                break
    return out
