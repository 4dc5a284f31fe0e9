"""docker-compose files -> `Workload`s (one per service).

Reads the fields that decide GPU access and memory: `shm_size`, `ipc`, `runtime`, `gpus`,
`deploy.resources.{limits,reservations}` (devices with `capabilities: [gpu]`), `mem_limit`, tmpfs
mounts of /dev/shm, `environment` (list or mapping) and `command`/`entrypoint`.
Reference: https://docs.docker.com/reference/compose-file/services/ and .../deploy/.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from typing import Any

from oomdoctor.errors import InputError
from oomdoctor.parsers.config_model import ContainerSpec, VolumeSpec, Workload, parse_docker_size
from oomdoctor.parsers.yamldocs import YamlDoc, line_of


def is_compose(data: Any) -> bool:
    return isinstance(data, Mapping) and isinstance(data.get("services"), Mapping) and "kind" not in data


def workloads_from_compose(doc: YamlDoc, name: str) -> list[Workload]:
    services = doc.data.get("services")
    out = []
    for svc, spec in services.items():
        if not isinstance(spec, Mapping):
            raise InputError(f"{name}: service {svc!r} is not a mapping")
        container = _container(doc, str(svc), spec)
        line = line_of(services, svc)
        out.append(Workload(
            source="compose", kind="ComposeService", name=str(svc), containers=(container,),
            volumes=container.tmpfs, doc_index=doc.index, pod_path=("services", svc),
            line=None if line is None else doc.start_line + line + 1, origin=f"service {svc}",
            host_ipc=str(spec.get("ipc") or "") == "host",
        ))
    return out


def _split(value: Any) -> tuple[str, ...]:
    if isinstance(value, list):
        return tuple(str(v) for v in value if v is not None)
    if isinstance(value, str):
        try:
            return tuple(shlex.split(value))
        except ValueError:
            return tuple(value.split())
    return ()


def _env(value: Any) -> tuple[tuple[str, str], ...]:
    out: list[tuple[str, str]] = []
    if isinstance(value, Mapping):
        out = [(str(k), "" if v is None else str(v)) for k, v in value.items()]
    elif isinstance(value, list):
        for item in value:
            text = str(item)
            k, _, v = text.partition("=")
            out.append((k, v))
    return tuple(out)


def _gpu_devices(spec: Mapping) -> tuple[str, int | None, list[str]]:
    """(description, count or None for all, problems) of the GPU devices a service asks for."""
    problems: list[str] = []
    gpus = spec.get("gpus")
    if gpus is not None:  # compose spec `gpus: all` / `gpus: [{count: 1}]`
        if str(gpus) == "all":
            return "gpus: all", None, problems
        if isinstance(gpus, list) and gpus and isinstance(gpus[0], Mapping):
            c = gpus[0].get("count")
            return f"gpus: count {c}", (int(c) if isinstance(c, int) else None), problems
    deploy = spec.get("deploy") if isinstance(spec.get("deploy"), Mapping) else {}
    res = deploy.get("resources") if isinstance(deploy.get("resources"), Mapping) else {}
    reservations = res.get("reservations") if isinstance(res.get("reservations"), Mapping) else {}
    devices = reservations.get("devices")
    if not isinstance(devices, list):
        return "", None, problems
    first: tuple[str, int | None] | None = None
    for dev in devices:
        if not isinstance(dev, Mapping):
            continue
        caps = [str(c) for c in dev.get("capabilities") or []] if isinstance(dev.get("capabilities"), list) else []
        driver = str(dev.get("driver") or "")
        if "gpu" not in caps and driver != "nvidia":
            continue
        if "gpu" not in caps:
            problems.append("device reservation has no `capabilities: [gpu]` (compose requires it; no GPU is given)")
        if "count" in dev and "device_ids" in dev:
            problems.append("device reservation sets both `count` and `device_ids` (mutually exclusive; compose refuses it)")
        count = dev.get("count")
        ids = dev.get("device_ids")
        if isinstance(ids, list):
            got: tuple[str, int | None] = (f"device_ids {list(map(str, ids))}", len(ids))
        elif count is None or str(count) == "all":
            got = (f"count {count or 'all (default)'}", None)
        else:
            try:
                got = (f"count {count}", int(count))
            except (TypeError, ValueError):
                problems.append(f"device reservation count {count!r} is not a number or 'all'")
                got = (f"count {count}", None)
        first = first or got
    if first is None:
        return "", None, problems
    return first[0], first[1], problems


def _tmpfs(spec: Mapping) -> tuple[VolumeSpec, ...]:
    out = []
    tmpfs = spec.get("tmpfs")
    for item in ([tmpfs] if isinstance(tmpfs, str) else tmpfs if isinstance(tmpfs, list) else []):
        path, _, opts = str(item).partition(":")
        size = next((o.split("=", 1)[1] for o in opts.split(",") if o.startswith("size=")), "")
        out.append(VolumeSpec(path, "tmpfs", "Memory", parse_docker_size(size) if size else None, size))
    vols = spec.get("volumes")
    if isinstance(vols, list):
        for v in vols:
            if isinstance(v, Mapping) and v.get("type") == "tmpfs":
                opts = v.get("tmpfs") if isinstance(v.get("tmpfs"), Mapping) else {}
                raw = opts.get("size")
                out.append(VolumeSpec(str(v.get("target", "")), "tmpfs", "Memory",
                                      parse_docker_size(raw) if raw is not None else None, "" if raw is None else str(raw)))
    return tuple(out)


def _container(doc: YamlDoc, svc: str, spec: Mapping) -> ContainerSpec:
    deploy = spec.get("deploy") if isinstance(spec.get("deploy"), Mapping) else {}
    res = deploy.get("resources") if isinstance(deploy.get("resources"), Mapping) else {}
    limits = res.get("limits") if isinstance(res.get("limits"), Mapping) else {}
    mem = limits.get("memory") if limits.get("memory") is not None else spec.get("mem_limit")
    gpus, count, problems = _gpu_devices(spec)
    shm = spec.get("shm_size")
    line = line_of(doc.data.get("services"), svc)
    return ContainerSpec(
        name=svc, image=str(spec.get("image") or ""), command=_split(spec.get("entrypoint")),
        args=_split(spec.get("command")), env=_env(spec.get("environment")), path=("services", svc),
        line=None if line is None else doc.start_line + line + 1,
        shm_size=parse_docker_size(shm) if shm is not None else None, shm_raw="" if shm is None else str(shm),
        ipc=str(spec.get("ipc") or ""), gpus=gpus, gpu_count=count, runtime=str(spec.get("runtime") or ""),
        memory_limit_raw="" if mem is None else str(mem), tmpfs=_tmpfs(spec), problems=tuple(problems),
    )
