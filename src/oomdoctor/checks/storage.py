"""Storage layer: /dev/shm size and use vs DataLoader needs, shared-memory errors in logs."""

from __future__ import annotations

from collections.abc import Iterator

from oomdoctor.checks._util import (
    Category,
    Confidence,
    FactSet,
    Finding,
    Layer,
    Severity,
    as_dict,
    as_int,
    as_list,
    ev,
    ev_value,
    finding,
    mib,
)
from oomdoctor.checks.registry import check
from oomdoctor.knowledge import shm

L = Layer.STORAGE


def shm_log_events(facts: FactSet) -> list[dict]:
    """Log events that mean shared memory ran out (DataLoader bus error, MapAllocator failures)."""
    out = []
    for e in as_list(facts.value("workload.oom_events")):
        if isinstance(e, dict) and (shm.is_shm_error(str(e.get("text", ""))) or "shm" in str(e.get("kind", "")).lower()):
            out.append(e)
    return out


def _remedy(facts: FactSet) -> str:
    k8s = facts.value("runtime.kubernetes") or str(facts.value("runtime.container") or "") == "kubernetes"
    return shm.REMEDY_K8S if k8s else shm.REMEDY_DOCKER


@check("STO001", L, "/dev/shm is small for DataLoader workers")
def shm_size(facts: FactSet) -> Iterator[Finding]:
    """DataLoader workers pass every batch through /dev/shm. Docker's default --shm-size is 64 MB and
    containerd/CRI-O give a pod 64 MiB; a few workers x prefetch_factor x an image batch overflow it and
    the worker dies of SIGBUS ("DataLoader worker ... killed by signal: Bus error ... out of shared
    memory"). Fix with --shm-size / ipc: host, or in k8s a memory emptyDir at /dev/shm. Sources:
    environment-facts.md section 6 [MOBY29492][K8S28272][KB6014][PTDL].
    """
    size = as_int(facts.value("shm.size_bytes"))
    if size is None:
        return
    events = shm_log_events(facts)
    evidence = [ev(facts, "shm.size_bytes", mib(size))]
    mount = as_dict(facts.value("shm.mount"))
    if mount:
        evidence.append(ev(facts, "shm.mount"))
    if size <= shm.DOCKER_DEFAULT_SHM + 4 * 1024**2:
        if events:
            evidence.append(ev_value("workload.oom_events", events[0].get("text"), facts.source("workload.oom_events")))
        yield finding("STO001", L, Severity.ERROR if events else Severity.WARNING,
                      Confidence.HIGH if events else Confidence.MEDIUM,
                      f"/dev/shm is {mib(size)}, the Docker/Kubernetes default: too small for DataLoader workers"
                      + (" (and the logs show shared-memory failures)" if events else ""),
                      _remedy(facts), Category.SHM_EXHAUSTED, evidence)
    elif size < shm.SMALL_SHM:
        yield finding("STO001", L, Severity.INFO, Confidence.LOW,
                      f"/dev/shm is {mib(size)}: enough only for small batches or few workers",
                      _remedy(facts), Category.SHM_EXHAUSTED if events else None, evidence)


@check("STO002", L, "/dev/shm nearly full or holding leftover torch segments")
def shm_use(facts: FactSet) -> Iterator[Finding]:
    """A full /dev/shm fails the next DataLoader batch just like a small one; `torch_*` segments left
    behind by killed workers (file_system sharing strategy) keep the space. Source: environment-facts.md
    section 6 [PTMP][PTMAP].
    """
    size, used = as_int(facts.value("shm.size_bytes")), as_int(facts.value("shm.used_bytes"))
    if size and used is not None and used >= 0.8 * size:
        yield finding("STO002", L, Severity.WARNING, Confidence.MEDIUM,
                      f"/dev/shm is {100 * used / size:.0f}% full ({mib(used)} of {mib(size)})",
                      "remove stale segments (`ls -la /dev/shm`; `rm /dev/shm/torch_*` when no job runs) and enlarge "
                      "/dev/shm", Category.SHM_EXHAUSTED, [ev(facts, "shm.used_bytes", mib(used)), ev(facts, "shm.size_bytes", mib(size))])
    segs = as_int(facts.value("shm.torch_segments"))
    if segs:
        yield finding("STO002", L, Severity.INFO, Confidence.MEDIUM, f"{segs} torch_* segment(s) left in /dev/shm",
                      "delete them when no job runs (`rm /dev/shm/torch_*`); prefer the default file_descriptor "
                      "sharing strategy", None, [ev(facts, "shm.torch_segments")])


@check("STO003", L, "Shared-memory failures in the logs")
def shm_errors(facts: FactSet) -> Iterator[Finding]:
    """PyTorch's worker SIGBUS handler prints "Unexpected bus error encountered in worker. This might be
    caused by insufficient shared memory (shm)", the main process raises "DataLoader worker (pid N) is
    killed by signal: Bus error"; MapAllocator fails with "unable to allocate shared memory(shm) for
    file </torch_…>: No space left on device (28)". "Too many open files" is the fd limit of the
    file_descriptor strategy. Source: environment-facts.md section 6 [PTDL][PTMAP][SHMSEEN][PTDLPY].
    """
    events = shm_log_events(facts)
    if events:
        yield finding("STO003", L, Severity.ERROR, Confidence.HIGH,
                      f"{len(events)} shared-memory error line(s) in the logs (DataLoader bus error / shm allocation)",
                      _remedy(facts) + "; or fewer workers / smaller prefetch_factor", Category.SHM_EXHAUSTED,
                      [ev_value("workload.oom_events", events[0].get("text"), facts.source("workload.oom_events"))])
    fds = [e for e in as_list(facts.value("workload.oom_events"))
           if isinstance(e, dict) and shm.FD_PATTERN.search(str(e.get("text", "")))]
    if fds:
        yield finding("STO003", L, Severity.WARNING, Confidence.HIGH, "DataLoader ran out of file descriptors",
                      "raise `ulimit -n` (docker --ulimit nofile=1048576:1048576) or call "
                      "torch.multiprocessing.set_sharing_strategy('file_system')", Category.SHM_EXHAUSTED,
                      [ev_value("workload.oom_events", fds[0].get("text"), facts.source("workload.oom_events"))])
