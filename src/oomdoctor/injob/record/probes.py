"""Cheap readings of memory, each one safe to call from a training process.

Rules: never import torch (only use it if the job already did), never initialise CUDA, never raise.
A reading that is not possible here returns None (the caller simply leaves the field out).
"""

from __future__ import annotations

import functools
import os
import sys
from typing import Any

from oomdoctor.facts.recording import ALLOCATOR_FIELDS


def cuda_ready() -> Any:
    """torch, if the job imported it AND already initialised CUDA; else None. Never initialises."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    try:
        cuda = torch.cuda
        if cuda.is_initialized():
            return torch
    except Exception:
        return None
    return None


def busiest_device(torch: Any) -> int | None:
    """The device whose caching allocator holds the most memory. A sampler thread cannot use
    current_device() (it is per thread: 0 there, whatever the training thread chose). Reading stats
    of an unused device creates no context."""
    try:
        best, best_reserved = None, -1
        for i in range(torch.cuda.device_count()):
            r = torch.cuda.memory_stats(i).get("reserved_bytes.all.current", 0)
            if r > best_reserved:
                best, best_reserved = i, r
        return best
    except Exception:
        return None


def allocator(torch: Any, device: int | None = None) -> dict[str, int] | None:
    """The caching allocator's counters for one device (the current one by default)."""
    try:
        if device is None:
            device = torch.cuda.current_device()
        stats = torch.cuda.memory_stats(device)
    except Exception:
        return None
    out = {short: int(stats[k]) for k, short in ALLOCATOR_FIELDS.items() if k in stats}
    out["device"] = int(device)
    return out


def host_rss(pid: int | None = None) -> int | None:
    try:
        import psutil

        return int(psutil.Process(pid or os.getpid()).memory_info().rss)
    except Exception:
        return _rss_from_proc(pid)


_status_readable = True  # /proc/self/status: gone on macOS and Windows (asked once, not at every step)


def host_memory(pid: int | None = None) -> tuple[int | None, int | None]:
    """(RSS, its file-backed part `RssFile`) from one read of /proc/PID/status; elsewhere (RSS from psutil, None).

    Why the file-backed part: RSS also counts the pages of a memory-mapped dataset read step by step, which the
    kernel takes back under pressure; without it a job reading an np.memmap looked like a host leak (GPU check,
    session 26). Shared memory (`RssShmem`: DataLoader batches from workers) is not in it, so a list of such batches
    still counts. One pass over the file costs less than psutil's RSS read alone (review)."""
    global _status_readable
    if _status_readable:
        try:
            rss = None
            with open(f"/proc/{pid or 'self'}/status", "rb") as f:
                for line in f:
                    if line.startswith(b"VmRSS:"):
                        rss = int(line.split()[1]) * 1024
                    elif line.startswith(b"RssFile:"):
                        if rss is not None:
                            return rss, int(line.split()[1]) * 1024
                        break
            if rss is not None:
                return rss, None  # a kernel older than 4.5 has no RssFile
        except FileNotFoundError:
            if pid is None:
                _status_readable = False
        except Exception:
            pass
    return host_rss(pid), None


def _rss_from_proc(pid: int | None) -> int | None:
    try:
        with open(f"/proc/{pid or 'self'}/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except Exception:
        return None


def tree_rss(pid: int) -> int | None:
    """RSS of a process and all its descendants (the job seen from outside)."""
    try:
        import psutil

        proc = psutil.Process(pid)
        total = proc.memory_info().rss
        for child in proc.children(recursive=True):
            try:
                total += child.memory_info().rss
            except Exception:
                pass
        return int(total)
    except Exception:
        return None


_V2, _V1 = "sys/fs/cgroup", "sys/fs/cgroup/memory"
_NO_LIMIT = 1 << 60  # v1 reports "no limit" as a huge number


def _read_int(path: str) -> int | None:
    try:
        with open(path) as f:
            text = f.read().strip()
        return None if text == "max" else int(text)
    except Exception:
        return None


@functools.lru_cache(maxsize=8)
def _cgroup_dirs(root: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(v2 dirs, v1 memory dirs) to try, the job's own cgroup first, then its parents up to the top.

    Inside a container with its own cgroup namespace the job's files are at the top of /sys/fs/cgroup; on a
    host, a VM, or a Slurm step (no namespace) they are under the path /proc/self/cgroup names, and the top
    is the root cgroup, which has no memory.current (session 27: an H200 VM recorded no cgroup reading).
    Cached: read once per process."""
    from oomdoctor.parsers.procfs import cgroup_path_for, parse_proc_cgroup

    try:
        with open(os.path.join(root, "proc/self/cgroup")) as f:
            entries = parse_proc_cgroup(f.read(1 << 16))
    except Exception:
        entries = []

    def chain(base: str, path: str | None) -> tuple[str, ...]:
        parts = [p for p in (path or "").split("/") if p and p not in (".", "..")]
        dirs = [os.path.join(root, base, *parts[:n]) for n in range(len(parts), -1, -1)]
        return tuple(dict.fromkeys(dirs))

    return chain(_V2, cgroup_path_for(entries, None)), chain(_V1, cgroup_path_for(entries, "memory"))


def cgroup_memory(root: str = "/") -> dict[str, int]:
    """The job's cgroup memory use (`cgroup_current`, own cgroup), its part not backed by files (`cgroup_anon`),
    the tightest limit on the way to the top (`cgroup_limit`: a parent's memory.max binds too) and its OOM kill
    count (`cgroup_oom_kill`)."""
    out: dict[str, int] = {}
    v2, v1 = _cgroup_dirs(root)
    for dirs, current, limit in ((v2, "memory.current", "memory.max"), (v1, "memory.usage_in_bytes",
                                                                       "memory.limit_in_bytes")):
        found = next(((d, v) for d in dirs if (v := _read_int(os.path.join(d, current))) is not None), None)
        if found is None:
            continue
        here, out["cgroup_current"] = found
        anon = _cgroup_anon(os.path.join(here, "memory.stat"), v1=current == "memory.usage_in_bytes")
        if anon is not None:
            out["cgroup_anon"] = anon
        limits = [v for d in dirs[dirs.index(here):] if (v := _read_int(os.path.join(d, limit))) is not None
                  and v < _NO_LIMIT]
        if limits:
            out["cgroup_limit"] = min(limits)
        break
    kills = cgroup_oom_kills(root)
    if kills is not None:
        out["cgroup_oom_kill"] = kills
    return out


_ANON_V2, _ANON_V1 = (b"anon", b"shmem"), (b"total_rss", b"total_shmem")


def _cgroup_anon(path: str, v1: bool) -> int | None:
    """The cgroup's memory the kernel cannot take back without swap: anonymous plus shared memory (memory.stat;
    v1: the hierarchical `total_` figures). Why: `cgroup_current` counts the page cache too, and the RSS summed
    over the job's processes counts the pages forked workers share once per worker; this is the figure that
    reaches the limit before an OOM kill (report's SIGKILL verdict)."""
    keys = _ANON_V1 if v1 else _ANON_V2
    got: dict[bytes, int] = {}
    try:
        with open(path, "rb") as f:
            for line in f:
                name, _, value = line.partition(b" ")
                if name in keys:
                    got[name] = int(value)
                    if len(got) == len(keys):
                        break
    except Exception:
        return None
    return sum(got.values()) if keys[0] in got else None


def cgroup_oom_kills(root: str = "/") -> int | None:
    """The cgroup's count of OOM kills (`oom_kill` in v2 memory.events, v1 memory.oom_control; kernel >= 4.13).

    Why: a SIGKILL alone does not say who sent it (the OOM killer, a user, a scheduler); this count rising
    while the job ran does (report's verdict, session 27). v2's memory.events counts the whole subtree, so the
    job's own cgroup sees a kill whichever parent's limit was hit."""
    v2, v1 = _cgroup_dirs(root)
    for path in [os.path.join(d, "memory.events") for d in v2] + [os.path.join(d, "memory.oom_control") for d in v1]:
        try:
            with open(path) as f:
                for line in f:
                    name, _, value = line.partition(" ")
                    if name == "oom_kill":
                        return int(value)
        except Exception:
            continue
    return None


def host_meminfo(path: str = "/proc/meminfo") -> dict[str, int]:
    """`mem_available` and `mem_total` of the host (bytes; Linux): was the machine's RAM nearly used up?"""
    from oomdoctor.parsers.procfs import parse_meminfo

    try:
        with open(path, encoding="ascii", errors="replace") as f:
            info = parse_meminfo(f.read(1 << 16))
    except Exception:
        return {}
    return {ours: info[theirs] for ours, theirs in (("mem_total", "MemTotal"), ("mem_available", "MemAvailable"))
            if theirs in info}


def shm_usage(path: str = "/dev/shm") -> dict[str, int]:
    try:
        st = os.statvfs(path)
    except Exception:
        return {}
    total = st.f_blocks * st.f_frsize
    return {"shm_used": int(total - st.f_bfree * st.f_frsize), "shm_total": int(total)}


class Nvml:
    """NVML readings: this process's GPU memory (all devices) and each device's total use.

    NVML does not create a CUDA context, so reading it is safe in a job that has not touched CUDA.
    Initialised once, lazily; any failure makes it silently unavailable.
    """

    def __init__(self) -> None:
        self._nvml: Any = None
        self._handles: list[Any] = []
        self._failed = False

    def _init(self) -> bool:
        if self._nvml is not None:
            return True
        if self._failed:
            return False
        try:
            import pynvml

            pynvml.nvmlInit()
            self._handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
            self._nvml = pynvml
            return True
        except Exception:
            self._failed = True
            return False

    def sample(self, pids: set[int] | None = None, all_devices: bool = False) -> dict[str, Any] | None:
        """{"gpu_proc_used": bytes of `pids` over all devices, "devices": [{index, used, total}]}.

        Devices are listed when one of `pids` uses them, or all of them with all_devices=True.
        """
        if not self._init():
            return None
        nv = self._nvml
        pids = pids or {os.getpid()}
        proc_used = 0
        devices = []
        for i, h in enumerate(self._handles):
            mine = 0
            others = 0
            try:
                procs = list(nv.nvmlDeviceGetComputeRunningProcesses(h))
            except Exception:
                procs = []
            for p in procs:
                used = getattr(p, "usedGpuMemory", None) or 0
                if p.pid in pids:
                    mine += used
                else:
                    others += used
            if mine or all_devices:
                try:
                    mem = nv.nvmlDeviceGetMemoryInfo(h)
                    devices.append({"index": i, "used": int(mem.used), "total": int(mem.total),
                                    "proc_used": int(mine), "others_used": int(others),
                                    "processes": len(procs)})
                except Exception:
                    pass
            proc_used += mine
        return {"gpu_proc_used": int(proc_used), "devices": devices}

    def close(self) -> None:
        if self._nvml is not None:
            try:
                self._nvml.nvmlShutdown()
            except Exception:
                pass
            self._nvml = None
