"""One-line explanations of why a difference between two machines matters for GPU OOMs.

Sources are the keys of docs/reference/environment-facts.md (in brackets).
"""

from __future__ import annotations

import re
from typing import Any, Optional

from oomdoctor.units import format_bytes

# Driver branch -> highest CUDA it supports (the `CUDA Version` nvidia-smi prints) [RN132][RN12x]
DRIVER_MAX_CUDA = {
    450: "11.0", 455: "11.1", 460: "11.2", 465: "11.3", 470: "11.4", 495: "11.5", 510: "11.6", 515: "11.7",
    520: "11.8", 525: "12.0", 530: "12.1", 535: "12.2", 545: "12.3", 550: "12.4", 555: "12.5", 560: "12.6",
    565: "12.7", 570: "12.8", 575: "12.9", 580: "13.0",
}
KERNEL_FLOOR_NEW_DRIVERS = (4, 15)  # 560+ refuse older kernels [NVLINUXH]
SHM_DEFAULT = 64 * 2**20


def _version(value: Any) -> Optional[tuple[int, ...]]:
    m = re.match(r"\s*(\d+)(?:\.(\d+))?(?:\.(\d+))?", str(value)) if value is not None else None
    if not m:
        return None
    return tuple(int(g) for g in m.groups() if g is not None)


def _kernel(a: Any, b: Any) -> str:
    va, vb = _version(a), _version(b)
    old = [(side, v) for side, v in (("A", va), ("B", vb)) if v is not None and v[:2] < KERNEL_FLOOR_NEW_DRIVERS]
    if old:
        side, v = old[0]
        return (f"kernel {'.'.join(map(str, v[:2]))} on {side} is older than 4.15: NVIDIA drivers 560+ no longer "
                "build on it and CUDA 12.5+ dropped EL7; a 3.10 host with driver 535 has given "
                "`CUDA error: out of memory` in containers until the kernel was upgraded (4.18/4.19 worked) "
                "[NVLINUXH][IG124]")
    if va and vb and va[:2] != vb[:2]:
        return ("different kernel series: the NVIDIA kernel module is built against the kernel, and HMM/UVM and "
                "cgroup memory behaviour change with it [RN132][CGV2]")
    return "kernel build differs: the NVIDIA module is rebuilt per kernel (check dmesg for NVRM errors)"


def _driver(a: Any, b: Any) -> str:
    va, vb = _version(a), _version(b)
    if va and vb and va[0] != vb[0]:
        ca, cb = DRIVER_MAX_CUDA.get(va[0], "?"), DRIVER_MAX_CUDA.get(vb[0], "?")
        return (f"driver branch {va[0]} vs {vb[0]} (CUDA up to {ca} vs {cb}): a CUDA runtime newer than the "
                "driver fails to create a context, and each branch has its own kernel floor [RN132][SGFXI62]")
    return "driver build differs within a branch: compare the release notes' fixed issues"


def explain(key: str, a: Any, b: Any) -> str:
    """Why a difference in `key` matters, or '' when there is nothing specific to say."""
    if key == "kernel.release":
        return _kernel(a, b)
    if key == "driver.version":
        return _driver(a, b)
    if key == "cuda.driver_max":
        return ("highest CUDA the driver supports differs: a PyTorch built for a newer CUDA than this fails with "
                "'driver too old' / context errors that look like OOM [RN132][TORCHDRV]")
    if key in ("cuda.torch_runtime", "torch.version"):
        return "PyTorch build differs: its CUDA runtime, caching allocator and error messages differ [PTREL]"
    if key == "cuda.image_toolkit":
        return "CUDA toolkit in the image differs: it must not be newer than the driver's CUDA [MVC]"
    if key == "shm.size_bytes":
        if SHM_DEFAULT in (a, b):
            return "one side has the 64 MiB default /dev/shm: DataLoader workers die with `Bus error` [MOBY29492][PTDL]"
        return "/dev/shm size differs: DataLoader workers and NCCL need it [PTMP]"
    if key in ("cgroup.memory_limit_bytes", "cgroup.memory_high_bytes"):
        return "container memory limit differs: above it the job is OOMKilled (exit 137) [CGV2][OCPOOM]"
    if key == "workload.oom_events":
        return _events(a, b)
    if key in _OOM_KILL_KEYS:
        return _kills(a, b)
    if key.startswith("sharing.") and key != "sharing.processes":
        return ("GPU sharing layer differs: HAMi/vcuda/cGPU/MPS/MIG limit or hook what the job may allocate "
                "(gpu-manager's hooks have caused such OOMs) [HAMICORE][TKEGM][MPSENV]")
    if key == "sharing.processes":
        return "other processes on the GPUs differ: their memory is not available to the job [NVMLPROC]"
    if key.startswith("driver.gpus[") and key.endswith(("memory_used_bytes", "memory_reserved_bytes")):
        return ("GPU memory already used before the job differs: other processes, or an abnormal init (a GPU "
                "showing 4 MiB used after init has marked one) [NVMLMEM2]")
    if key.startswith("driver.gpus[") and key.endswith(("retired_pending", "remapped_pending", "reset_required",
                                                        "remapped_failure", "ecc_uncorrected", "retired_pages")):
        return "GPU memory health differs: pending page retirement / row remapping needs a GPU reset [DPR][NVERR]"
    if key == "driver.xid_events":
        return "Xid errors on one side: hardware or driver faults, not capacity (48/63/64/79/94/95) [NVERR]"
    if key == "driver.nvrm_errors":
        return "NVRM kernel errors on one side: the driver failed part of its initialisation [RN132]"
    if key == "driver.flavour":
        return "open vs proprietary kernel module: the open one needs Turing+ [KMOD]"
    if key in ("os.id", "os.name"):
        return "distribution differs: kernel, glibc and supported CUDA versions follow it [IG112]"
    if key in ("torch.alloc_conf", "torch.no_caching"):
        return "PyTorch allocator settings differ (expandable_segments, max_split_size_mb): fragmentation behaviour [OOMTXT]"
    if key in ("runtime.nvidia_visible_devices", "runtime.cuda_visible_devices"):
        return "GPU selection differs: the job may land on a GPU that others use [NCT][CUDAENV]"
    if key == "runtime.container":
        return "container runtime differs (one job failed rarely under docker and often under Kubernetes)"
    if key.startswith("probe."):
        return "active CUDA probes differ: context creation or a small allocation fails on one side [DRVAPI]"
    if key == "host.mem_total_bytes":
        return "host RAM differs: model loading and pinned memory need host memory"
    return ""


def threshold_bonus(key: str, a: Any, b: Any) -> float:
    """Extra score when one side crosses a documented threshold, not just a different version:
    a kernel below 4.15 (the 560+ driver floor, EL7) or the 64 MiB default /dev/shm. A crossed
    threshold outranks an equally weighted plain version change."""
    if key == "kernel.release":
        for v in (_version(a), _version(b)):
            if v is not None and v[:2] < KERNEL_FLOOR_NEW_DRIVERS:
                return 5.0
    if key == "shm.size_bytes" and SHM_DEFAULT in (a, b):
        return 5.0
    return 0.0


_OOM_KILL_KEYS = ("cgroup.oom_kill", "cgroup.oom_events", "kernel.oom_kills", "k8s.terminations")
# the figures an OOM message gives, in the order a reader compares them
_EVENT_FIGURES = (("requested_bytes", "requested"), ("total_bytes", "GPU total"), ("free_bytes", "free"),
                  ("allocated_bytes", "allocated by PyTorch"), ("reserved_bytes", "reserved by PyTorch"),
                  ("reserved_unallocated_bytes", "reserved but unallocated"), ("process_bytes", "process"))


def explain_one_side(key: str, known: Any, side: str) -> str:
    """A fact read on one side only (`side`), unavailable on the other: nothing was compared, so no note may
    claim a difference of the machines ("driver build differs within a branch" for 580.95.05 vs
    unavailable, "OOM kills seen on one side" for 0 vs unavailable: session 27). Only evidence that stands
    on its own (OOM kills or OOM-like events that were seen) is named."""
    other = "B" if side == "A" else "A"
    if key in _OOM_KILL_KEYS and _positive(known):
        return (f"host/cgroup OOM kills seen on {side} ({brief(known)}); not read on {other}: "
                "the job ran out of host RAM, not GPU memory [OOMKILLC]")
    if key == "workload.oom_events" and isinstance(known, list) and known:
        return f"OOM-like events in {side}'s logs ({brief(known)}); {other} has no logs to compare"
    return f"known on {side} only; not read on {other}, so nothing to compare"


def _kills(a: Any, b: Any) -> str:
    pa, pb = _positive(a), _positive(b)
    if pa and pb:
        return (f"host/cgroup OOM kills on both sides, in different numbers (A: {brief(a)}; B: {brief(b)}): "
                "the job ran out of host RAM, not GPU memory [OOMKILLC]")
    if pa or pb:
        return (f"host/cgroup OOM kills seen on {'A' if pa else 'B'} only: the job ran out of host RAM, not GPU "
                "memory [OOMKILLC]")
    return "host/cgroup OOM kill records differ, with no kill on either side"


def _positive(v: Any) -> bool:
    if isinstance(v, bool):
        return v
    if isinstance(v, (int, float)):
        return v > 0
    return isinstance(v, (list, dict)) and bool(v)


def brief(value: Any, limit: int = 80) -> str:
    """A value as a reader wants it in one line: OOM events summarised (count, kinds, causes), other lists
    and records as their count or short JSON, never a Python repr of a structure."""
    import json

    from oomdoctor.units import cut_words

    if isinstance(value, list) and value and all(isinstance(e, dict) and "kind" in e for e in value):
        n = sum(_count(e) for e in value)
        return f"{n} event{'s' if n != 1 else ''}: {_event_kinds(value)}"
    if isinstance(value, (list, dict)):
        text = json.dumps(value, default=str, separators=(", ", ": "))
        if len(text) > limit:
            return f"{len(value)} entr{'ies' if len(value) != 1 else 'y'}"
        return text
    if isinstance(value, str):
        return cut_words(repr(value), limit)
    return "-" if value is None else str(value)


def _count(e: dict) -> int:
    """An event's `count` when it is a positive int (not a bool), else 1: one place for brief and the kinds."""
    n = e.get("count")
    return n if isinstance(n, int) and not isinstance(n, bool) and n > 0 else 1


def _events(a: Any, b: Any) -> str:
    ka, kb = _event_kinds(a), _event_kinds(b)
    if ka != kb:
        return (f"the logs' OOM-like events differ (A: {ka}; B: {kb}); kinds as `oomdoctor explain` names them, "
                "with the cause each points to")
    # the same kinds and causes on both sides: say what does differ (the figures, the counts, the files)
    la, lb = (v if isinstance(v, list) else [] for v in (a, b))
    parts = []
    for field, label in _EVENT_FIGURES:
        fa, fb = _figure(la, field), _figure(lb, field)
        if fa != fb and (fa is not None or fb is not None):
            parts.append(f"{label} {format_bytes(fa) if fa is not None else '-'} vs "
                         f"{format_bytes(fb) if fb is not None else '-'}")
    files_a, files_b = _files(la), _files(lb)
    if files_a != files_b:
        parts.append(f"logs {', '.join(files_a) or '-'} vs {', '.join(files_b) or '-'}")
    differs = "; ".join(parts[:4]) if parts else "the messages' text only"
    return f"the same kinds and causes of OOM-like events on both sides ({ka}); what differs: {differs}"


def _figure(events: list, field: str) -> Optional[int]:
    """The first event's figure (the first OOM is the one that killed the job)."""
    for e in events:
        nums = e.get("numbers") if isinstance(e, dict) else None
        v = nums.get(field) if isinstance(nums, dict) else None
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            return int(v)
    return None


def _files(events: list) -> list[str]:
    out: list[str] = []
    for e in events:
        f = e.get("file") if isinstance(e, dict) else None
        if isinstance(f, str) and f not in out:
            out.append(f)
    return out[:3]


def _event_kinds(v: Any) -> str:
    """'torch_oom -> fragmentation x3, shm_error -> shm_exhausted' for a workload.oom_events value."""
    counts: dict[str, int] = {}
    for e in v if isinstance(v, list) else []:
        if isinstance(e, dict):
            name = f"{e.get('kind')} -> {e['category']}" if e.get("category") else str(e.get("kind"))
            counts[name] = counts.get(name, 0) + _count(e)
    return ", ".join(f"{k} x{n}" if n > 1 else k for k, n in sorted(counts.items())[:6]) or "none"


event_kinds = _event_kinds  # for the renderers' table cells
