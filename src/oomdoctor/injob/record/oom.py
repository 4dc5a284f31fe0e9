"""Keep the evidence of a CUDA OOM before the process is gone.

Called from the allocator's OOM observer (in the thread that failed, after the allocator released its
lock, just before the exception is raised) or from the watch boundary / excepthook when the exception
reaches us. Everything here is best effort and bounded: stats, a summarised snapshot (JSON), NVML.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

from oomdoctor.facts import recording
from oomdoctor.injob.record import probes, snapshot
from oomdoctor.redact import redact_strings


def is_oom_exception(exc: BaseException) -> bool:
    name = type(exc).__name__
    if name in ("OutOfMemoryError", "OutOfMemoryException"):
        return True
    return isinstance(exc, RuntimeError) and "out of memory" in str(exc).lower()


def stats_subset(torch: Any, device: int) -> dict[str, int]:
    try:
        stats = torch.cuda.memory_stats(device)
    except Exception:
        return {}
    keep = ("allocated_bytes", "reserved_bytes", "active_bytes", "inactive_split_bytes", "requested_bytes")
    out = {k: int(v) for k, v in stats.items()
           if k.startswith(keep) and k.endswith((".current", ".peak")) and ".all." in k}
    for k in ("num_alloc_retries", "num_ooms", "num_device_alloc", "num_device_free", "max_split_size"):
        if k in stats:
            out[k] = int(stats[k])
    return out


def _snapshot(torch: Any) -> dict[str, Any]:
    """The allocator's snapshot (with the history ring when torch has it), else its segments only."""
    try:
        return torch.cuda.memory._snapshot()
    except Exception:
        return {"segments": torch.cuda.memory_snapshot()}


def collect(torch: Any, device: int | None, *, top: int, tail: int, history_on: bool) -> dict[str, Any]:
    """Stats + snapshot summary for `device` (None: the current device)."""
    ev: dict[str, Any] = {}
    try:
        if device is None:
            device = torch.cuda.current_device()
        ev["device"] = int(device)
        ev["stats"] = stats_subset(torch, device)
        try:
            free, total = torch.cuda.mem_get_info(device)
            ev["device_free"], ev["device_total"] = int(free), int(total)
        except Exception:
            pass
        ev["snapshot"] = snapshot.summarise(_snapshot(torch), device, top=top, tail=tail)
        ev["snapshot"]["history"] = bool(history_on)
    except Exception as exc:
        ev["error"] = f"{type(exc).__name__}: {exc}"
    return ev


def live_now(torch: Any, device: int) -> dict[str, Any]:
    """What is live on `device` now, by source and by block size (a start point of the run)."""
    try:
        return snapshot.live_point(_snapshot(torch), device)
    except Exception as exc:
        return {"error": f"{type(exc).__name__}: {exc}"}


def write_evidence(run_dir: str, name: str, evidence: dict[str, Any]) -> str:
    path = os.path.join(run_dir, name)
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(redact_strings({"schema_version": recording.SCHEMA_VERSION, "format": recording.FORMAT, **evidence}),
                  f, indent=1, default=str)
    os.replace(tmp, path)
    return path


def environment(run_dir: str) -> None:
    """Environment facts, once per run, if the machine collector (another branch) is installed."""
    path = os.path.join(run_dir, recording.ENV)
    if os.path.exists(path):
        return
    # Imported late: only at an OOM inside `watch()`, where no parent process collected the environment.
    from oomdoctor.collectors.machine import collect_live

    write_environment(run_dir, collect_live(probe=False, import_torch=False))


def write_environment(run_dir: str, facts: Any) -> None:
    path = os.path.join(run_dir, recording.ENV)
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        json.dump({"schema_version": recording.SCHEMA_VERSION, "t": time.time(), "facts": redact_strings(facts.to_json())},
                  f, indent=1, default=str)
    os.replace(path + ".tmp", path)


def outside_view(nvml: probes.Nvml) -> dict[str, Any]:
    out: dict[str, Any] = {"rss": probes.host_rss()}
    nv = nvml.sample(all_devices=True)
    if nv is not None:
        out["nvml"] = nv
    out.update(probes.cgroup_memory())
    return out
