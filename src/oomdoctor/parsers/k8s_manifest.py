"""Kubernetes manifests added to a bundle (`k8s/*.yaml`): containers, resources, terminations.

Accepts Pods, workload kinds with a pod template (Deployment, Job, StatefulSet, DaemonSet,
ReplicaSet, CronJob) and `kind: List`, in multi-document YAML or JSON (`kubectl get -o yaml|json`).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from ruamel.yaml.error import YAMLError

from oomdoctor.parsers.budget import BudgetError, budget_yaml
from oomdoctor.units import parse_size

_SHARING_RESOURCE_MARKERS = ("gpu.shared", "gpumem", "gpucores", "vcuda", "mig-", "gpu-mem", "gpushare")
_GPU_RESOURCES = ("nvidia.com/gpu", "tencent.com/vcuda-core", "aliyun.com/gpu-mem", "amd.com/gpu")


class ManifestError(ValueError):
    pass


def load_documents(text: str) -> list[Any]:
    yaml = budget_yaml("safe")  # alias bombs and deep nesting are refused (parsers.budget)
    try:
        return [d for d in yaml.load_all(text) if d is not None]
    except BudgetError as exc:
        raise ManifestError(str(exc)) from None
    except (YAMLError, ValueError, RecursionError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ManifestError(f"invalid YAML: {first[:200]}") from None


def _pods(doc: Any) -> Iterator[tuple[str, Mapping[str, Any], Mapping[str, Any] | None]]:
    """(name, pod spec, pod status) for every pod or pod template in a document."""
    if not isinstance(doc, Mapping):
        return
    kind = str(doc.get("kind", ""))
    meta = doc.get("metadata") if isinstance(doc.get("metadata"), Mapping) else {}
    name = str(meta.get("name", "")) if meta else ""
    if kind == "List" and isinstance(doc.get("items"), list):
        for item in doc["items"]:
            yield from _pods(item)
        return
    spec = doc.get("spec") if isinstance(doc.get("spec"), Mapping) else None
    if spec is None:
        return
    if kind == "Pod" or "containers" in spec:
        status = doc.get("status") if isinstance(doc.get("status"), Mapping) else None
        yield name, spec, status
        return
    if kind == "CronJob":
        spec = (spec.get("jobTemplate") or {}).get("spec") or {}
    template = spec.get("template") if isinstance(spec, Mapping) else None
    if isinstance(template, Mapping) and isinstance(template.get("spec"), Mapping):
        yield name, template["spec"], None


def _quantity(value: Any) -> Any:
    """Memory quantities as bytes where they parse ('8Gi' -> bytes), else the raw string."""
    if not isinstance(value, (str, int, float)):
        return None
    text = str(value).strip()
    kube = {"Ki": "KiB", "Mi": "MiB", "Gi": "GiB", "Ti": "TiB", "K": "KB", "M": "MB", "G": "GB", "T": "TB"}
    for suffix, unit in kube.items():
        if text.endswith(suffix) and text[: -len(suffix)].replace(".", "", 1).isascii() and text[: -len(suffix)].replace(".", "", 1).isdigit():
            try:
                return parse_size(text[: -len(suffix)] + unit)
            except Exception:  # noqa: BLE001 - fall back to the raw text
                return text
    return text


def _resources(container: Mapping[str, Any], which: str) -> dict[str, Any]:
    res = container.get("resources")
    section = res.get(which) if isinstance(res, Mapping) else None
    if not isinstance(section, Mapping):
        return {}
    return {str(k): (_quantity(v) if str(k) in ("memory", "ephemeral-storage") else str(v)) for k, v in section.items()}


def _shm_volume(spec: Mapping[str, Any], container: Mapping[str, Any]) -> dict[str, Any] | None:
    mounts = container.get("volumeMounts") or []
    names = {m.get("name") for m in mounts if isinstance(m, Mapping) and m.get("mountPath") == "/dev/shm"}
    for vol in spec.get("volumes") or []:
        if isinstance(vol, Mapping) and vol.get("name") in names:
            empty = vol.get("emptyDir") if isinstance(vol.get("emptyDir"), Mapping) else {}
            return {"volume": vol.get("name"), "medium": empty.get("medium"),
                    "size_limit_bytes": _quantity(empty.get("sizeLimit")) if empty.get("sizeLimit") else None}
    return None


def containers_from(docs: list[Any], file: str = "") -> list[dict[str, Any]]:
    out = []
    for pod, spec, _status in (p for d in docs for p in _pods(d)):
        for container in spec.get("containers") or []:
            if not isinstance(container, Mapping):
                continue
            limits, requests = _resources(container, "limits"), _resources(container, "requests")
            gpu = next((limits.get(r) for r in _GPU_RESOURCES if r in limits), None)
            out.append({"pod": pod, "name": str(container.get("name", "")), "file": file,
                        "requests": requests, "limits": limits, "gpu": gpu,
                        "shm": _shm_volume(spec, container), "host_ipc": bool(spec.get("hostIPC")),
                        "host_pid": bool(spec.get("hostPID"))})
    return out


def sharing_resources_from(containers: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for c in containers:
        for which in ("limits", "requests"):
            for name, value in c[which].items():
                if any(marker in name for marker in _SHARING_RESOURCE_MARKERS):
                    out.append({"pod": c["pod"], "container": c["name"], "resource": name, "value": value})
    return out


def terminations_from(docs: list[Any], file: str = "") -> list[dict[str, Any]]:
    """`state.terminated` and `lastState.terminated` of every container status."""
    out = []
    for pod, _spec, status in (p for d in docs for p in _pods(d)):
        if not status:
            continue
        for group in ("initContainerStatuses", "containerStatuses"):
            for cs in status.get(group) or []:
                if not isinstance(cs, Mapping):
                    continue
                for state_key in ("state", "lastState"):
                    state = cs.get(state_key)
                    term = state.get("terminated") if isinstance(state, Mapping) else None
                    if isinstance(term, Mapping):
                        code = term.get("exitCode")
                        out.append({"pod": pod, "container": str(cs.get("name", "")), "file": file,
                                    "state": state_key, "reason": term.get("reason"),
                                    "exit_code": code if isinstance(code, int) else None,
                                    "restart_count": cs.get("restartCount"),
                                    "finished_at": str(term.get("finishedAt")) if term.get("finishedAt") else None})
    return out
