"""Host memory limits of GPU containers: too small for a model load, or not Guaranteed."""

from __future__ import annotations

from collections.abc import Iterator

from oomdoctor.checks.audit.base import AuditFinding, finding, gib, gpu_count, launcher, pod_containers
from oomdoctor.checks.registry import audit_check
from oomdoctor.facts import Category, Confidence, Layer, Severity
from oomdoctor.parsers.config_model import Workload, is_gpu_resource, parse_quantity

FLOOR_PER_GPU = 4 * 2**30


@audit_check("AUD005", Layer.RESOURCES, "memory limit below the floor for a GPU job")
def limit_below_floor(w: Workload, path: str) -> Iterator[AuditFinding]:
    """Every process that drives a GPU needs host RAM before the GPU sees a byte: the CUDA runtime and
    libraries (cuBLAS, cuDNN, NCCL) map hundreds of MiB to a few GiB per process, and `torch.load`
    materialises a checkpoint in host memory before `.to("cuda")` (one copy per rank). A container
    limit under 4 GiB per GPU is OOM-killed during the model load, before training starts
    [OCPOOM][CGV2]. The floor is deliberately low: it flags limits that cannot work, not tight ones.
    A Slurm batch script's limit is the job's memory on each node (`--mem`, `--mem-per-gpu` x GPUs,
    `--mem-per-cpu` x CPUs; https://slurm.schedmd.com/sbatch.html) against its GPUs per node; a
    `docker run` in such a script without `-m` is bounded by that `--mem` too.
    """
    for c in pod_containers(w):
        limit = c.memory_limit
        if not limit or not c.wants_gpu:
            continue
        n = gpu_count(c) or 1
        floor = FLOOR_PER_GPU * n
        if limit >= floor:
            continue
        shown = c.limits.get("memory") or c.memory_limit_raw
        ev = [("memory limit", f"{shown} ({c.memory_limit_source})" if c.memory_limit_source else shown),
              ("GPUs", f"{n} ({c.gpus})" if w.source == "slurm" and c.gpus else str(n))]
        if launcher(c):
            ev.append(("launcher", launcher(c)))
        yield finding("AUD005", Layer.RESOURCES, Severity.WARNING, Confidence.MEDIUM,
                      f"memory limit {gib(limit)} for {n} GPU(s): model load and CUDA libraries need more host RAM",
                      f"give at least {gib(floor)} ({gib(FLOOR_PER_GPU)} per GPU) plus the checkpoint size per rank; "
                      "load checkpoints with torch.load(..., mmap=True) to avoid a full host copy",
                      w, c, path, ev, Category.HOST_OOM)


@audit_check("AUD006", Layer.RESOURCES, "GPU container without Guaranteed memory (requests != limits)")
def not_guaranteed(w: Workload, path: str) -> Iterator[AuditFinding]:
    """A pod is in the Guaranteed QoS class only when every container's memory (and CPU) request equals
    its limit. Burstable and BestEffort pods are the kubelet's first eviction victims under node memory
    pressure and get a higher `oom_score_adj`, so the kernel OOM killer picks them first: a long GPU
    job dies for a neighbour's spike (https://kubernetes.io/docs/concepts/workloads/pods/pod-qos/,
    https://kubernetes.io/docs/concepts/scheduling-eviction/node-pressure-eviction/).
    No memory limit at all is a warning; a request below half the limit a warning; other mismatches info.
    """
    if w.source != "kubernetes":
        return
    for c in pod_containers(w):
        if not c.wants_gpu:
            continue
        limit, request = c.memory_limit, c.memory_request
        if limit is None:
            yield finding("AUD006", Layer.RESOURCES, Severity.WARNING, Confidence.MEDIUM,
                          "GPU container has no memory limit: BestEffort/Burstable QoS, first to be evicted or "
                          "OOM-killed under node memory pressure",
                          "set resources.requests.memory = resources.limits.memory (Guaranteed QoS), sized "
                          "for the job's peak host RAM plus /dev/shm", w, c, path,
                          [("resources.requests.memory", c.requests.get("memory", "unset")),
                           ("resources.limits.memory", "unset")], Category.HOST_OOM)
        elif request is not None and request > limit:
            continue  # not a QoS question: the API server refuses the pod (AUD015)
        elif request is not None and request != limit:
            sev = Severity.WARNING if request * 2 < limit else Severity.INFO
            yield finding("AUD006", Layer.RESOURCES, sev, Confidence.MEDIUM,
                          f"memory request {gib(request)} != limit {gib(limit)}: Burstable QoS, evicted or "
                          "OOM-killed before Guaranteed pods",
                          f"set resources.requests.memory to {c.limits.get('memory')} (equal to the limit)",
                          w, c, path, [("resources.requests.memory", c.requests.get("memory", "")),
                                       ("resources.limits.memory", c.limits.get("memory", ""))], Category.HOST_OOM)


@audit_check("AUD015", Layer.RESOURCES, "a resource request above its limit: the API server rejects the pod")
def request_over_limit(w: Workload, path: str) -> Iterator[AuditFinding]:
    """A container's request may not exceed its limit for any resource. The API server's validation refuses
    the object (`spec.containers[0].resources.requests: Invalid value: "32Gi": must be less than or equal to
    memory limit`, Kubernetes `ValidateResourceRequirements`;
    https://kubernetes.io/docs/concepts/configuration/manage-resources-containers/#requests-and-limits),
    so the pod, or the Job's every pod, is never created. Checked for memory, cpu, ephemeral-storage and
    hugepages; GPU and other extended resources must have requests equal to limits (AUD007).
    """
    if w.source != "kubernetes":
        return
    for c in pod_containers(w):
        for name in sorted(set(c.requests) & set(c.limits)):
            if is_gpu_resource(name) or ("/" in name and not name.startswith("hugepages-")):
                continue
            req, lim = parse_quantity(c.requests[name]), parse_quantity(c.limits[name])
            if req is None or lim is None or req <= lim:
                continue
            yield finding("AUD015", Layer.RESOURCES, Severity.ERROR, Confidence.HIGH,
                          f"resources.requests.{name} {c.requests[name]} > limits.{name} {c.limits[name]}: the API "
                          "server rejects the pod (a request must be less than or equal to its limit)",
                          f"set resources.requests.{name} to at most {c.limits[name]} (equal to it for Guaranteed QoS), "
                          f"or raise limits.{name}", w, c, path,
                          [(f"resources.requests.{name}", c.requests[name]), (f"resources.limits.{name}", c.limits[name])],
                          Category.HOST_OOM if name == "memory" else None)
