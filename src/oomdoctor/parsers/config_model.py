"""One normalised model of "a container that will run a GPU job", whatever file described it.

Kubernetes manifests, compose files and `docker run` lines all become `Workload`s holding
`ContainerSpec`s, so the audit rules are written once. Sizes are integer bytes (None: not set);
the raw strings stay next to them so findings can quote what the user wrote.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Optional

# Kubernetes resource quantities: https://kubernetes.io/docs/reference/kubernetes-api/common-definitions/quantity/
_K8S_SUFFIX = {
    "": 1, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60,
    "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18, "m": 10**-3,
}
_K8S_QTY = re.compile(r"^\s*([+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+))(?:[eE]([+-]?[0-9]+))?\s*(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E|m)?\s*$")
# Docker sizes (go-units RAMInBytes): every unit is binary, `8g` = `8gb` = 8 GiB.
_DOCKER_SIZE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([kmgtp]?)(i?b)?\s*$", re.IGNORECASE)
_DOCKER_UNIT = {"": 1, "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40, "p": 2**50}

GPU_RESOURCE = "nvidia.com/gpu"
_GPU_PREFIXES = ("nvidia.com/", "tencent.com/vcuda", "aliyun.com/gpu", "amd.com/gpu")


def parse_quantity(value: Any) -> Optional[float]:
    """A Kubernetes quantity ('8Gi', '500M', '1e9', 2) as a number, None if it is not one."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if not isinstance(value, str):
        return None
    m = _K8S_QTY.match(value)
    if not m:
        return None
    try:
        number = float(m.group(1)) * (10 ** int(m.group(2)) if m.group(2) else 1)
    except (OverflowError, ValueError):
        return None
    return number * _K8S_SUFFIX[m.group(3) or ""]


def quantity_bytes(value: Any) -> Optional[int]:
    q = parse_quantity(value)
    if q is None or q != q or q in (float("inf"), float("-inf")):
        return None
    return int(q)


def parse_docker_size(value: Any) -> Optional[int]:
    """Docker/compose size ('8g', '8gb', '512m', 1073741824) in bytes, binary units; None if invalid."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if not isinstance(value, str):
        return None
    m = _DOCKER_SIZE.match(value)
    if not m:
        return None
    return int(float(m.group(1)) * _DOCKER_UNIT[m.group(2).lower()])


@dataclass(frozen=True)
class Mount:
    name: str
    path: str
    read_only: bool = False


@dataclass(frozen=True)
class VolumeSpec:
    """A pod volume (Kubernetes) or a tmpfs (docker/compose). `medium` is 'Memory' for RAM-backed ones."""

    name: str
    type: str  # emptyDir | hostPath | tmpfs | other
    medium: str = ""
    size_limit: Optional[int] = None
    size_raw: str = ""
    host_path: str = ""


@dataclass(frozen=True)
class ContainerSpec:
    name: str
    image: str = ""
    command: tuple[str, ...] = ()
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()  # valueFrom entries have value "<from secret/configMap>"
    requests: dict[str, str] = field(default_factory=dict)
    limits: dict[str, str] = field(default_factory=dict)
    mounts: tuple[Mount, ...] = ()
    path: tuple[Any, ...] = ()  # key path of this container inside its document
    line: Optional[int] = None  # 1-based line in the file
    init: bool = False
    # docker run / compose only
    shm_size: Optional[int] = None
    shm_raw: str = ""
    ipc: str = ""
    gpus: str = ""  # what the user wrote: `--gpus all`, compose `count: 2`, ...
    gpu_count: Optional[int] = None  # None = all / unknown
    runtime: str = ""
    memory_limit_raw: str = ""
    memory_limit_source: str = ""  # where a limit not written on the container came from (`#SBATCH --mem=32G`)
    tmpfs: tuple[VolumeSpec, ...] = ()
    problems: tuple[str, ...] = ()  # GPU device-request mistakes the parser saw (compose/docker run)

    def env_map(self) -> dict[str, str]:
        return dict(self.env)

    @property
    def memory_limit(self) -> Optional[int]:
        raw = self.limits.get("memory", self.memory_limit_raw)
        if not raw:
            return None
        return quantity_bytes(raw) if "memory" in self.limits else parse_docker_size(raw)

    @property
    def memory_request(self) -> Optional[int]:
        return quantity_bytes(self.requests.get("memory")) if "memory" in self.requests else None

    def resource(self, name: str) -> tuple[Optional[str], Optional[str]]:
        """(request, limit) of an extended resource, as written."""
        r, lim = self.requests.get(name), self.limits.get(name)
        return (None if r is None else str(r), None if lim is None else str(lim))

    def gpu_resources(self) -> dict[str, tuple[Optional[str], Optional[str]]]:
        """Every GPU-ish extended resource (nvidia.com/*, tencent.com/vcuda-*, aliyun.com/gpu-*)."""
        names = {n for n in (*self.requests, *self.limits) if is_gpu_resource(n)}
        return {n: self.resource(n) for n in sorted(names)}

    @property
    def wants_gpu(self) -> bool:
        return bool(self.gpu_resources()) or bool(self.gpus) or self.runtime == "nvidia"


def is_gpu_resource(name: str) -> bool:
    return str(name).startswith(_GPU_PREFIXES)


@dataclass(frozen=True)
class Workload:
    """A pod template (Kubernetes), a service (compose) or one `docker run` (shell)."""

    source: str  # kubernetes | compose | docker-run | slurm
    kind: str  # Pod, Deployment, ..., ComposeService, DockerRun, sbatch
    name: str
    containers: tuple[ContainerSpec, ...] = ()
    volumes: tuple[VolumeSpec, ...] = ()
    doc_index: int = 0
    pod_path: tuple[Any, ...] = ()  # key path of the pod spec (k8s) or the service (compose)
    line: Optional[int] = None
    origin: str = ""  # Helm `# Source:` template, compose service name, script line
    host_ipc: bool = False
    runtime_class: str = ""
    role: str = ""  # PyTorchJob replica type (Master/Worker), CronJob, ...

    @property
    def label(self) -> str:
        text = f"{self.kind}/{self.name}"
        return f"{text} [{self.role}]" if self.role else text

    def volume(self, name: str) -> Optional[VolumeSpec]:
        for v in self.volumes:
            if v.name == name:
                return v
        return None
