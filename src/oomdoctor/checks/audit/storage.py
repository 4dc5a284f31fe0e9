"""/dev/shm and RAM-backed volumes: the DataLoader's shared memory and the memory cgroup."""

from __future__ import annotations

from collections.abc import Iterator

from oomdoctor.checks.audit.base import (
    DEFAULT_SHM,
    AuditFinding,
    dataloader_workers,
    finding,
    gib,
    is_training,
    launcher,
    memory_volumes,
    pod_containers,
    recommended_shm,
    shm_bytes,
)
from oomdoctor.checks.registry import audit_check
from oomdoctor.facts import Category, Confidence, Layer, Severity
from oomdoctor.parsers.config_model import Workload

_SMALL_WITH_WORKERS = 2**30
_SMALL_FOR_GPU = 256 * 2**20


def _shm_remedy(w: Workload, size: int) -> str:
    if w.source == "kubernetes":
        return (f"mount a memory-backed emptyDir at /dev/shm: volumes: [{{name: dshm, emptyDir: {{medium: Memory, "
                f"sizeLimit: {gib(size).replace(' GiB', 'Gi').replace(' MiB', 'Mi')}}}}}] and volumeMounts: "
                "[{name: dshm, mountPath: /dev/shm}] (`oomdoctor audit --fix` adds both)")
    if w.source == "compose":
        return f'set `shm_size: "{gib(size).replace(" GiB", "gb").replace(" MiB", "mb")}"` (or `ipc: host`) on the service'
    return f"add `--shm-size={gib(size).replace(' GiB', 'g').replace(' MiB', 'm')}` (or `--ipc=host`) to docker run"


@audit_check("AUD001", Layer.STORAGE, "/dev/shm is the 64 MiB default in a GPU or DataLoader-worker container")
def default_shm(w: Workload, path: str) -> Iterator[AuditFinding]:
    """Docker and Kubernetes (containerd, CRI-O) give every container a 64 MiB `/dev/shm` unless told
    otherwise [MOBY29492][K8S28272]. PyTorch DataLoader workers hand every batch to the main process
    through shared memory (torch.multiprocessing, both sharing strategies live in /dev/shm [PTMP]), and
    NCCL uses /dev/shm between ranks on one node. With 64 MiB the workers die with `Bus error` /
    `unable to allocate shared memory(shm)` [PTDL][PTMAP], which looks like an OOM.
    The rule fires for a container that uses DataLoader workers or a multi-process launcher (error),
    or that gets a GPU (warning), and has no memory-backed /dev/shm, no `hostIPC`/`ipc: host`, no
    `--shm-size`/`shm_size`.
    Fix: Kubernetes `emptyDir: {medium: Memory, sizeLimit: 8Gi}` at /dev/shm [K8SVOL]; Docker
    `--shm-size=8g` or `--ipc=host`; compose `shm_size: "8gb"` [COMPOSE].
    """
    for c in pod_containers(w):
        size, how = shm_bytes(w, c)
        if size != DEFAULT_SHM or "default" not in how:
            continue
        workers, where = dataloader_workers(c)
        launch = launcher(c)
        if not (workers or launch or c.wants_gpu):
            continue
        ev = [("/dev/shm", how)]
        if workers:
            ev.append(("DataLoader workers", f"{workers} ({where})"))
        if launch:
            ev.append(("launcher", launch))
        if c.wants_gpu:
            ev.append(("GPU", c.gpus or ", ".join(f"{k}: {v[1] or v[0]}" for k, v in c.gpu_resources().items())
                       or f"runtime {c.runtime}"))
        sev = Severity.ERROR if (workers or launch) else Severity.WARNING
        conf = Confidence.HIGH if workers else Confidence.MEDIUM
        what = (f"{workers} DataLoader workers" if workers else f"{launch} ranks" if launch
                else "a GPU training container" if is_training(c) else "a GPU container")
        yield finding("AUD001", Layer.STORAGE, sev, conf,
                      f"{what} with the default 64 MiB /dev/shm: workers/NCCL fail with `Bus error` or `No space left`",
                      _shm_remedy(w, recommended_shm(c)), w, c, path, ev, Category.SHM_EXHAUSTED)


@audit_check("AUD002", Layer.STORAGE, "/dev/shm is explicitly sized too small for the job")
def small_shm(w: Workload, path: str) -> Iterator[AuditFinding]:
    """An explicit /dev/shm size that is still small: under 1 GiB while DataLoader workers are used,
    or under 256 MiB in a GPU container. Each worker keeps `prefetch_factor` (default 2) batches in
    shared memory, so `num_workers x prefetch_factor x batch bytes` must fit [KB6014]; an image batch
    of 64 x 3 x 224 x 224 float32 alone is 37 MiB. Too small a size fails the same way as the default
    [PTDL][PTMAP].
    """
    for c in pod_containers(w):
        size, how = shm_bytes(w, c)
        if size is None or (size == DEFAULT_SHM and "default" in how):
            continue
        workers, where = dataloader_workers(c)
        floor = _SMALL_WITH_WORKERS if workers else _SMALL_FOR_GPU if c.wants_gpu else 0
        if size >= floor:
            continue
        ev = [("/dev/shm", how)]
        if workers:
            ev.append(("DataLoader workers", f"{workers} ({where})"))
        yield finding("AUD002", Layer.STORAGE, Severity.WARNING, Confidence.MEDIUM,
                      f"/dev/shm is only {gib(size)}" + (f" for {workers} DataLoader workers" if workers else " in a GPU container"),
                      _shm_remedy(w, max(recommended_shm(c), floor)), w, c, path, ev, Category.SHM_EXHAUSTED)


@audit_check("AUD003", Layer.RESOURCES, "memory-backed emptyDir without sizeLimit")
def unsized_memory_volume(w: Workload, path: str) -> Iterator[AuditFinding]:
    """An `emptyDir` with `medium: Memory` is a tmpfs. Without `sizeLimit` it can grow to the node's
    tmpfs default (50% of node RAM before SizeMemoryBackedVolumes) or the pod's memory limit
    [K8S63126][K8S85360][K8S125852]. Its pages are charged to the memory cgroup of the container that
    writes them, so filling it ends in `OOMKilled` (exit 137), not in `No space left on device`
    [K8SVOL]. Always give it a sizeLimit that, together with the process's own RSS, fits the limit.
    """
    for v in w.volumes:
        if v.type == "emptyDir" and v.medium == "Memory" and v.size_limit is None:
            users = [c for c in w.containers if any(m.name == v.name for m in c.mounts)]
            c = users[0] if users else None
            size = recommended_shm(c) if c is not None else 8 * 2**30
            yield finding("AUD003", Layer.RESOURCES, Severity.WARNING, Confidence.HIGH,
                          f"emptyDir {v.name!r} (medium: Memory) has no sizeLimit: filling it is charged to the "
                          "container's memory and ends in OOMKilled",
                          f"add `sizeLimit: {gib(size).replace(' GiB', 'Gi').replace(' MiB', 'Mi')}` to the emptyDir "
                          "and keep the container's memory limit above that plus the process's own use",
                          w, c, path, [(f"volumes[{v.name}].emptyDir", "medium: Memory, no sizeLimit")], Category.HOST_OOM)


@audit_check("AUD004", Layer.RESOURCES, "RAM-backed volumes not covered by the memory limit")
def shm_over_limit(w: Workload, path: str) -> Iterator[AuditFinding]:
    """tmpfs pages (a memory emptyDir, `--shm-size`, `shm_size`, `--tmpfs`) count toward the
    container's memory cgroup [K8SVOL][CGV2]. When the RAM-backed volumes a container mounts may hold
    more than half of its memory limit, a full /dev/shm plus the training process (model load, pinned
    buffers, worker copies) exceeds the limit: the kernel OOM-kills the job (`OOMKilled`, 137) instead of
    the workers seeing a full disk [OCPOOM]. Rule: sum(sizes) > limit / 2 is a warning,
    sum(sizes) >= limit an error.
    """
    for c in pod_containers(w):
        limit = c.memory_limit
        if not limit:
            continue
        vols = memory_volumes(w, c)
        sizes = [v.size_limit for v in vols if v.size_limit]
        if c.shm_size and not any(v.name == "/dev/shm" for v in c.tmpfs):
            sizes.append(c.shm_size)
        total = sum(sizes)
        if total * 2 <= limit:
            continue
        sev = Severity.ERROR if total >= limit else Severity.WARNING
        ev = [("memory limit", gib(limit)), ("RAM-backed volumes", gib(total))]
        ev += [(f"volume {v.name}", v.size_raw or "unsized") for v in vols if v.size_limit]
        if c.shm_size:
            ev.append(("shm size", c.shm_raw))
        yield finding("AUD004", Layer.RESOURCES, sev, Confidence.HIGH,
                      f"RAM-backed volumes may hold {gib(total)} of the {gib(limit)} memory limit: "
                      "a full /dev/shm plus the process exceeds it (OOMKilled)",
                      f"raise the memory limit to at least {gib(2 * total)} or lower the volume size to "
                      f"{gib(recommended_shm(c))}", w, c, path, ev, Category.HOST_OOM)
