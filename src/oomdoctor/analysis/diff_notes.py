"""One-line explanations of why a difference between two machines matters for GPU OOMs.

Sources are the keys of docs/reference/environment-facts.md (in brackets).
"""

from __future__ import annotations

import re
from typing import Any, Optional

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
        return (f"the logs' OOM-like events differ (A: {_event_kinds(a)}; B: {_event_kinds(b)}); kinds as "
                "`oomdoctor explain` names them, with the cause each points to")
    if key in ("cgroup.oom_kill", "cgroup.oom_events", "kernel.oom_kills", "k8s.terminations"):
        return "host/cgroup OOM kills seen on one side: the job ran out of host RAM, not GPU memory [OOMKILLC]"
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


def _event_kinds(v: Any) -> str:
    """'torch_oom -> fragmentation x3, shm_error -> shm_exhausted' for a workload.oom_events value."""
    counts: dict[str, int] = {}
    for e in v if isinstance(v, list) else []:
        if isinstance(e, dict):
            name = f"{e.get('kind')} -> {e['category']}" if e.get("category") else str(e.get("kind"))
            n = e.get("count")
            counts[name] = counts.get(name, 0) + (n if isinstance(n, int) and not isinstance(n, bool) and n > 0 else 1)
    return ", ".join(f"{k} x{n}" if n > 1 else k for k, n in sorted(counts.items())[:6]) or "none"
