"""Shared pieces of the audit rules: the finding shape, and what a container's command reveals.

Worker and launcher detection reads the command line and environment the way a reviewer would:
`--num-workers 8`, `num_workers=8`, `NUM_WORKERS=8`, `torchrun --nproc_per_node 4`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Optional

from oomdoctor.facts import Category, Confidence, Evidence, Finding, Layer, Severity
from oomdoctor.parsers.config_model import ContainerSpec, VolumeSpec, Workload

DEFAULT_SHM = 64 * 2**20  # Docker and containerd/CRI-O default /dev/shm [MOBY29492][K8S28272]


@dataclass(frozen=True)
class AuditFinding:
    """A doctor-shaped finding plus where in the file it applies."""

    finding: Finding
    object: str  # "Deployment/trainer [Worker]"
    container: Optional[str]
    line: Optional[int]
    origin: str = ""  # Helm `# Source:` template, compose service, script line

    def to_json(self) -> dict[str, Any]:
        return {**self.finding.to_json(), "object": self.object, "container": self.container,
                "line": self.line, "origin": self.origin or None}


def _redact(name: str, value: str) -> str:
    try:
        from oomdoctor.redact import redact_value
    except ImportError:  # redact.py lands with doctor-collect; until then hide every value that could leak
        return "***" if re.search(r"TOKEN|KEY|SECRET|PASS|CRED|AUTH", name, re.I) else value
    return redact_value(name, value)


def env_value(c: ContainerSpec, name: str) -> Optional[str]:
    for k, v in c.env:
        if k == name:
            return v
    return None


def shown_env(name: str, value: str) -> str:
    return _redact(name, value)


def finding(rule: str, layer: Layer, severity: Severity, confidence: Confidence, title: str, remedy: str,
            w: Workload, c: Optional[ContainerSpec], path: str, evidence: list[tuple[str, str]],
            category: Optional[Category] = None) -> AuditFinding:
    line = (c.line if c is not None else None) or w.line
    where = f"{path}:{line}" if line else path
    ev = tuple(Evidence(fact, value, where) for fact, value in evidence)
    f = Finding(rule, layer, severity, confidence, title, remedy, category, ev)
    return AuditFinding(f, w.label, c.name if c is not None else None, line, w.origin)


def pod_containers(w: Workload) -> list[ContainerSpec]:
    """Every container the pod runs, init containers included: they get GPUs, /dev/shm and memory limits the
    same way (a checkpoint-conversion init container with DataLoader workers hits the 64 MiB /dev/shm too),
    and the API server validates their resources alike. They were left out until session 27."""
    return list(w.containers)


def command_text(c: ContainerSpec) -> str:
    return " ".join((*c.command, *c.args))


_WORKER_ARG = re.compile(
    r"(?:--?(?:dataloader[_-])?num[_-]workers|--workers|--num[_-]?data[_-]?workers|--data[_-]workers|--nworkers)"
    r"(?:=|\s+)['\"]?(\d+)"
    r"|\b(?:[\w.]*\.)?num_workers\s*[=:]\s*(\d+)",
    re.IGNORECASE,
)
_WORKER_ENV = re.compile(r"(?:^|_)(?:NUM_WORKERS|DATALOADER_WORKERS|N_WORKERS|WORKERS)$", re.IGNORECASE)
_LAUNCHER = re.compile(
    r"\btorchrun\b|torch\.distributed\.(?:launch|run)|\baccelerate\s+launch\b|\bdeepspeed\b|--nproc[_-]per[_-]node"
    r"|\bcolossalai\s+run\b|\bmpirun\b|\bhorovodrun\b", re.IGNORECASE)
_TRAINING = re.compile(r"train|finetune|fine[_-]tune|pretrain|\bfit\b|torchrun|deepspeed|accelerate\s+launch|lightning",
                       re.IGNORECASE)
_GPU_IMAGE = re.compile(r"pytorch|cuda|nvcr\.io/nvidia|tensorflow.*gpu|-gpu\b|deepspeed|vllm|megatron|nemo", re.I)


def dataloader_workers(c: ContainerSpec) -> tuple[int, str]:
    """(largest worker count seen, where it was seen); (0, '') when nothing says workers are used."""
    best, where = 0, ""
    for m in _WORKER_ARG.finditer(command_text(c)):
        n = int(m.group(1) or m.group(2))
        if n > best:
            best, where = n, m.group(0).strip()
    for k, v in c.env:
        if _WORKER_ENV.search(k) and v.strip().isdigit() and int(v) > best:
            best, where = int(v), f"env {k}={v}"
    return best, where


def launcher(c: ContainerSpec) -> str:
    """The multi-process launcher in the command (torchrun, deepspeed, ...), '' if none."""
    m = _LAUNCHER.search(command_text(c))
    return m.group(0) if m else ""


def is_training(c: ContainerSpec) -> bool:
    return bool(_TRAINING.search(command_text(c))) or bool(launcher(c))


def looks_gpu_image(c: ContainerSpec) -> bool:
    return bool(_GPU_IMAGE.search(c.image))


def gpu_count(c: ContainerSpec) -> Optional[int]:
    """GPUs given to the container (None: unknown or 'all')."""
    if c.gpus:
        return c.gpu_count
    total = 0
    for name in ("nvidia.com/gpu", "nvidia.com/gpu.shared"):
        _, lim = c.resource(name)
        if lim is not None:
            try:
                total += int(float(lim))
            except ValueError:
                return None
    mig = sum(_int(c.limits.get(n)) for n in c.limits if str(n).startswith("nvidia.com/mig-"))
    vcuda = _int(c.limits.get("tencent.com/vcuda-core"))
    return total + mig + (max(1, vcuda // 100) if vcuda else 0) or None


def _int(value: Any) -> int:
    try:
        return int(float(str(value)))
    except (TypeError, ValueError):
        return 0


def shm_volumes(w: Workload, c: ContainerSpec) -> list[VolumeSpec]:
    """Volumes mounted at /dev/shm (k8s volumeMounts, docker/compose tmpfs)."""
    out = [v for v in c.tmpfs if v.name.rstrip("/") == "/dev/shm"]
    for m in c.mounts:
        if m.path.rstrip("/") == "/dev/shm":
            v = w.volume(m.name)
            if v is not None:
                out.append(v)
    return out


def memory_volumes(w: Workload, c: ContainerSpec) -> list[VolumeSpec]:
    """RAM-backed volumes this container mounts: emptyDir medium Memory and tmpfs mounts."""
    out = [v for v in c.tmpfs]
    names = {m.name for m in c.mounts}
    out += [v for v in w.volumes if v.name in names and v.type == "emptyDir" and v.medium == "Memory"]
    return out


def shm_bytes(w: Workload, c: ContainerSpec) -> tuple[Optional[int], str]:
    """Size of /dev/shm the container will see, and how it was decided.

    (None, why) means large or unbounded (host IPC, a hostPath, an unsized tmpfs); DEFAULT_SHM for the
    engine default.
    """
    if w.source == "slurm":  # no container: the host's /dev/shm, which Slurm does not usually limit
        return None, "the host's /dev/shm (a Slurm job runs in no container)"
    if w.host_ipc or c.ipc == "host":
        return None, "host IPC namespace (the host's /dev/shm)"
    if c.ipc.startswith("container:") or c.ipc.startswith("service:"):
        return None, f"ipc: {c.ipc} (shares that container's /dev/shm)"
    vols = shm_volumes(w, c)
    for v in vols:
        if v.type == "hostPath":
            return None, f"hostPath {v.host_path} mounted at /dev/shm"
        if v.type in ("emptyDir", "tmpfs") and v.medium == "Memory":
            return v.size_limit, (f"{v.type} medium Memory sizeLimit {v.size_raw}" if v.size_raw
                                  else f"{v.type} medium Memory without a size")
        return None, f"{v.type} volume {v.name} (disk-backed) at /dev/shm"
    if c.shm_size is not None:
        return c.shm_size, f"shm_size {c.shm_raw}"
    return DEFAULT_SHM, "engine default (64 MiB)"


def gib(n: Optional[int]) -> str:
    if n is None:
        return "unbounded"
    if n % 2**30 == 0:
        return f"{n // 2**30} GiB"
    if n % 2**20 == 0:
        return f"{n // 2**20} MiB"
    return f"{n / 2**30:.2f} GiB"




def recommended_shm(c: ContainerSpec) -> int:
    """A /dev/shm size for the fix: 8 GiB, but at most a quarter of the memory limit (tmpfs pages are
    charged to the container), and at least 1 GiB when the limit allows it."""
    limit = c.memory_limit
    if not limit:
        return 8 * 2**30
    quarter = (limit // 4) // 2**30 * 2**30
    if quarter >= 2**30:
        return min(8 * 2**30, quarter)
    half = (limit // 2) // 2**20 * 2**20
    return min(2**30, max(half, DEFAULT_SHM))


def k8s_size(n: int) -> str:
    return f"{n // 2**30}Gi" if n % 2**30 == 0 else f"{n // 2**20}Mi"


def docker_size(n: int) -> str:
    return f"{n // 2**30}g" if n % 2**30 == 0 else f"{n // 2**20}m"
