"""How GPUs are requested: extended resources, visible-device variables, compose/docker devices."""

from __future__ import annotations

import re
from collections.abc import Iterator

from oomdoctor.checks.audit.base import (
    AuditFinding,
    env_value,
    finding,
    gpu_count,
    is_training,
    looks_gpu_image,
    pod_containers,
    shown_env,
)
from oomdoctor.checks.registry import audit_check
from oomdoctor.facts import Category, Confidence, Layer, Severity
from oomdoctor.parsers.config_model import Workload, parse_quantity

_INT = re.compile(r"^\s*\d+\s*$")


@audit_check("AUD007", Layer.RUNTIME, "GPU resources missing, not in limits, or requests != limits")
def gpu_requests(w: Workload, path: str) -> Iterator[AuditFinding]:
    """GPUs and the sharing resources (`nvidia.com/gpu`, `nvidia.com/gpu.shared`, `nvidia.com/mig-*`,
    `nvidia.com/gpumem`, `tencent.com/vcuda-*`, `aliyun.com/gpu-mem`) are extended resources: they
    cannot be overcommitted, so they must appear in `limits`; a request, if given, must equal the limit,
    and the value must be an integer (https://kubernetes.io/docs/concepts/configuration/manage-resources-containers/#extended-resources,
    https://kubernetes.io/docs/tasks/manage-gpus/scheduling-gpus/). The API server rejects anything else,
    or the pod runs without the GPU it expects.
    A container that plainly trains on a GPU (a CUDA/PyTorch image running a training command) with no
    GPU resource in the whole pod gets no GPU from the device plugin (warning).
    """
    if w.source != "kubernetes":
        return
    any_gpu = any(c.gpu_resources() for c in w.containers)
    for c in pod_containers(w):
        for name, (req, lim) in c.gpu_resources().items():
            ev = [(f"resources.requests.{name}", req if req is not None else "unset"),
                  (f"resources.limits.{name}", lim if lim is not None else "unset")]
            if lim is None:
                yield finding("AUD007", Layer.RUNTIME, Severity.ERROR, Confidence.HIGH,
                              f"{name} is requested but not in limits: extended resources must be set in limits",
                              f"set resources.limits.{name}: {req} (and requests equal to it, or omit requests)",
                              w, c, path, ev, Category.CONTEXT_OR_DRIVER)
            elif req is not None and parse_quantity(req) != parse_quantity(lim):
                yield finding("AUD007", Layer.RUNTIME, Severity.ERROR, Confidence.HIGH,
                              f"{name} requests {req} != limits {lim}: GPU resources cannot be overcommitted",
                              f"make them equal (set requests.{name}: {lim}) or drop the request",
                              w, c, path, ev, Category.CONTEXT_OR_DRIVER)
            for value in (req, lim):
                if value is not None and not _INT.match(value):
                    yield finding("AUD007", Layer.RUNTIME, Severity.ERROR, Confidence.HIGH,
                                  f"{name}: {value} is not a whole number; fractional GPUs need a sharing layer "
                                  "(time-slicing, MIG, HAMi gpumem)", f"request a whole number of {name}",
                                  w, c, path, ev, Category.CONTEXT_OR_DRIVER)
                    break
        if not any_gpu and looks_gpu_image(c) and is_training(c) and env_value(c, "NVIDIA_VISIBLE_DEVICES") is None:
            yield finding("AUD007", Layer.RUNTIME, Severity.WARNING, Confidence.MEDIUM,
                          "a GPU training image with no GPU resource: the device plugin gives this pod no GPU",
                          "add resources.limits.nvidia.com/gpu: N (requests may be omitted)", w, c, path,
                          [("image", c.image), ("resources.limits", ", ".join(c.limits) or "none")],
                          Category.CONTEXT_OR_DRIVER)


@audit_check("AUD013", Layer.RUNTIME, "NVIDIA_VISIBLE_DEVICES / CUDA_VISIBLE_DEVICES fight the device allocation")
def visible_devices(w: Workload, path: str) -> Iterator[AuditFinding]:
    """On Kubernetes the NVIDIA device plugin chooses the GPUs and passes them to the NVIDIA Container
    Toolkit, with the envvar strategy through `NVIDIA_VISIBLE_DEVICES` [NCT][K8SDP]. Setting it yourself
    overrides that choice: `all` in a pod exposes every GPU of the node outside the scheduler's
    accounting, so the job shares memory with pods that were promised those GPUs (`other_process` OOMs).
    Containers without the `compute` driver capability cannot allocate GPU memory and are not flagged.
    Plain Docker and Compose have no allocator to bypass: `runtime: nvidia` / `--runtime=nvidia` with
    `NVIDIA_VISIBLE_DEVICES` is the toolkit's documented way to pick GPUs there [NCT], so that part applies
    to Kubernetes only (until session 27 it warned on compose and docker run too).
    `CUDA_VISIBLE_DEVICES` indexes the GPUs the container was given (0..n-1): an index >= n hides every
    GPU or picks the wrong one [CUDAENV]; that part applies everywhere, Slurm batch scripts included (the
    GPUs per node from `--gres=gpu:N`, `--gpus-per-node`; Slurm sets the variable to the GPUs it allocated,
    https://slurm.schedmd.com/gres.html).
    """
    for c in pod_containers(w):
        n = gpu_count(c)
        given = bool(c.gpu_resources()) or bool(c.gpus)
        nvd = env_value(c, "NVIDIA_VISIBLE_DEVICES")
        picked = _picked_by_env(c, nvd) if w.source != "kubernetes" else None
        if picked is not None:  # docker/compose `runtime: nvidia` + NVIDIA_VISIBLE_DEVICES=0,1: those GPUs
            given, n = True, picked
        caps = env_value(c, "NVIDIA_DRIVER_CAPABILITIES") or ""
        no_compute = caps and "compute" not in caps and "all" not in caps
        if w.source == "kubernetes" and nvd is not None and nvd.strip() not in ("", "void", "none") and not no_compute:
            ev = [("env NVIDIA_VISIBLE_DEVICES", shown_env("NVIDIA_VISIBLE_DEVICES", nvd))]
            if given:
                ev.append(("GPUs allocated", c.gpus or ", ".join(f"{k}={v[1]}" for k, v in c.gpu_resources().items())))
                sev = Severity.ERROR if nvd.strip() == "all" else Severity.WARNING
                title = "NVIDIA_VISIBLE_DEVICES overrides the GPUs the device plugin allocated"
            else:
                sev = Severity.ERROR
                title = "NVIDIA_VISIBLE_DEVICES exposes GPUs that were never allocated to this container"
            yield finding("AUD013", Layer.RUNTIME, sev, Confidence.HIGH, title,
                          "remove NVIDIA_VISIBLE_DEVICES and request GPUs through resources.limits (nvidia.com/gpu); "
                          "to restrict devices inside the job use CUDA_VISIBLE_DEVICES=0..n-1",
                          w, c, path, ev, Category.OTHER_PROCESS)
        cvd = env_value(c, "CUDA_VISIBLE_DEVICES")
        if cvd is not None and given:
            items = [x.strip() for x in cvd.split(",") if x.strip()]
            slurm = w.source == "slurm"
            ev = [("env CUDA_VISIBLE_DEVICES", shown_env("CUDA_VISIBLE_DEVICES", cvd)),
                  ("GPUs given", ("all" if n is None else str(n)) + (f" per node ({c.gpus})" if slurm else ""))]
            bad = [x for x in items if x.isdigit() and n is not None and int(x) >= n]
            uuids = [x for x in items if x.startswith(("GPU-", "MIG-"))]
            if bad:
                top = str(max(0, (n or 1) - 1))
                yield finding("AUD013", Layer.RUNTIME, Severity.ERROR, Confidence.HIGH,
                              f"CUDA_VISIBLE_DEVICES={cvd} names device {bad[0]} but the "
                              f"{'job has' if slurm else 'container has'} {n} GPU(s){' per node' if slurm else ''} (0..{top})",
                              ("CUDA_VISIBLE_DEVICES indexes the GPUs Slurm allocated (Slurm sets it for the job itself); "
                               f"use 0..{top} or remove the export") if slurm else
                              f"CUDA_VISIBLE_DEVICES indexes the container's own GPUs; use 0..{top} or remove it",
                              w, c, path, ev, Category.CONTEXT_OR_DRIVER)
            elif uuids and w.source == "kubernetes":
                yield finding("AUD013", Layer.RUNTIME, Severity.WARNING, Confidence.MEDIUM,
                              "CUDA_VISIBLE_DEVICES pins a GPU UUID the device plugin may not have allocated",
                              "remove it; the device plugin already restricts the container to its GPUs",
                              w, c, path, ev, Category.CONTEXT_OR_DRIVER)


def _picked_by_env(c, nvd: str | None) -> int | None:
    """GPUs a docker/compose container gets from `NVIDIA_VISIBLE_DEVICES` under the nvidia runtime, when no
    `--gpus`/device request says otherwise: the number listed (None for `all` or when it does not apply)."""
    if c.gpus or c.runtime != "nvidia" or nvd is None:
        return None
    items = [x.strip() for x in nvd.split(",") if x.strip()]
    if not items or any(x in ("all", "none", "void") for x in items):
        return None
    return len(items)


@audit_check("AUD014", Layer.RUNTIME, "compose / docker GPU device request that gives no (or the wrong) GPU")
def docker_devices(w: Workload, path: str) -> Iterator[AuditFinding]:
    """Compose gives GPUs through `deploy.resources.reservations.devices` entries that must list
    `capabilities: [gpu]`; `count` and `device_ids` are mutually exclusive
    (https://docs.docker.com/compose/how-tos/gpu-support/). The legacy `runtime: nvidia` exposes GPUs
    only through `NVIDIA_VISIBLE_DEVICES`, which only the CUDA base images set [NCT]: on another image
    the container starts without a GPU. A malformed `--shm-size` is refused by docker.
    """
    if w.source not in ("compose", "docker-run"):
        return
    for c in pod_containers(w):
        for problem in c.problems:
            yield finding("AUD014", Layer.RUNTIME, Severity.ERROR, Confidence.HIGH, problem,
                          "use `devices: [{driver: nvidia, count: 1, capabilities: [gpu]}]` (or `device_ids`)"
                          if w.source == "compose" else "use a size such as --shm-size=8g",
                          w, c, path, [("service" if w.source == "compose" else "command", c.name)],
                          Category.CONTEXT_OR_DRIVER)
        if c.runtime == "nvidia" and not c.gpus and env_value(c, "NVIDIA_VISIBLE_DEVICES") is None \
                and not looks_gpu_image(c):
            yield finding("AUD014", Layer.RUNTIME, Severity.WARNING, Confidence.MEDIUM,
                          "runtime: nvidia without NVIDIA_VISIBLE_DEVICES on a non-CUDA image: no GPU is exposed",
                          "request GPUs explicitly: compose `deploy.resources.reservations.devices` with "
                          "`capabilities: [gpu]` or docker `--gpus`", w, c, path,
                          [("runtime", c.runtime), ("image", c.image)], Category.CONTEXT_OR_DRIVER)
