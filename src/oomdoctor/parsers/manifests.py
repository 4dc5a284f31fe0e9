"""Kubernetes manifests -> `Workload`s: find every pod template, whatever object carries it.

Known kinds use their documented paths (Deployment `spec.template.spec`, CronJob
`spec.jobTemplate.spec.template.spec`, Kubeflow `spec.<x>ReplicaSpecs.<Role>.template.spec`,
`List.items`). Other kinds (Argo Rollouts, RayCluster, LeaderWorkerSet, ...) are searched for a
mapping with a `containers` list. Kinds that never run containers (Service, ConfigMap, ...) are
skipped; a file with nothing auditable and kinds we do not know is an input error.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from oomdoctor.errors import InputError
from oomdoctor.parsers.config_model import ContainerSpec, Mount, VolumeSpec, Workload, quantity_bytes
from oomdoctor.parsers.yamldocs import YamlDoc, line_of

_POD_TEMPLATE = {
    "Deployment": ("spec", "template", "spec"),
    "StatefulSet": ("spec", "template", "spec"),
    "DaemonSet": ("spec", "template", "spec"),
    "ReplicaSet": ("spec", "template", "spec"),
    "ReplicationController": ("spec", "template", "spec"),
    "Job": ("spec", "template", "spec"),
    "CronJob": ("spec", "jobTemplate", "spec", "template", "spec"),
    "Pod": ("spec",),
    "PodTemplate": ("template", "spec"),
}
# Kinds that carry no containers: skipped silently.
NON_POD_KINDS = frozenset({
    "Service", "ConfigMap", "Secret", "ServiceAccount", "Role", "RoleBinding", "ClusterRole",
    "ClusterRoleBinding", "Namespace", "PersistentVolumeClaim", "PersistentVolume", "Ingress", "IngressClass",
    "NetworkPolicy", "PodDisruptionBudget", "HorizontalPodAutoscaler", "StorageClass", "PriorityClass",
    "LimitRange", "ResourceQuota", "CustomResourceDefinition", "RuntimeClass", "ServiceMonitor", "PodMonitor",
    "PrometheusRule", "Endpoints", "EndpointSlice", "ValidatingWebhookConfiguration",
    "MutatingWebhookConfiguration", "APIService", "Certificate", "Issuer", "ClusterIssuer", "Lease", "Event",
    "VerticalPodAutoscaler", "Gateway", "HTTPRoute", "VirtualService", "DestinationRule", "CSIDriver",
    "PodSecurityPolicy", "ClusterPolicy", "Queue", "PodGroup", "ClusterQueue", "LocalQueue", "ResourceFlavor",
})
_MAX_DEPTH = 10


def workloads_from_documents(docs: list[YamlDoc], name: str) -> list[Workload]:
    out: list[Workload] = []
    unknown: list[str] = []
    for doc in docs:
        if not isinstance(doc.data, Mapping):
            unknown.append(f"document {doc.index + 1} is a {type(doc.data).__name__}, not an object")
            continue
        found, unknown_kind = _from_object(doc, doc.data, ())
        out.extend(found)
        if unknown_kind:
            unknown.append(unknown_kind)
    if not out and unknown:
        raise InputError(f"{name}: {unknown[0]}; expected Pod, Deployment, StatefulSet, DaemonSet, ReplicaSet, "
                         "Job, CronJob, PyTorchJob or a List of them")
    return out


def _from_object(doc: YamlDoc, obj: Mapping[str, Any], prefix: tuple[Any, ...]) -> tuple[list[Workload], str]:
    kind = obj.get("kind")
    if not isinstance(kind, str) or not kind:
        return [], f"document {doc.index + 1} has no 'kind'"
    meta = obj.get("metadata") if isinstance(obj.get("metadata"), Mapping) else {}
    name = str(meta.get("name") or meta.get("generateName") or "?")
    if kind == "List":
        items = obj.get("items")
        found: list[Workload] = []
        unknown = ""
        if isinstance(items, list):
            for i, item in enumerate(items):
                if isinstance(item, Mapping):
                    sub, u = _from_object(doc, item, (*prefix, "items", i))
                    found.extend(sub)
                    unknown = unknown or u
        return found, unknown
    if kind in _POD_TEMPLATE:
        path = _POD_TEMPLATE[kind]
        spec = _get(obj, path)
        if isinstance(spec, Mapping):
            return [_workload(doc, kind, name, spec, (*prefix, *path), "")], ""
        return [], ""
    if kind in NON_POD_KINDS:
        return [], ""
    found = []
    spec = obj.get("spec")
    if isinstance(spec, Mapping):
        for key, replicas in spec.items():  # Kubeflow: pytorchReplicaSpecs, tfReplicaSpecs, mpiReplicaSpecs
            if str(key).endswith("ReplicaSpecs") and isinstance(replicas, Mapping):
                for role, rs in replicas.items():
                    pod = _get(rs, ("template", "spec"))
                    if isinstance(pod, Mapping):
                        path = (*prefix, "spec", key, role, "template", "spec")
                        found.append(_workload(doc, kind, name, pod, path, str(role)))
    if not found:
        for path, pod in _search_pod_specs(obj, (), 0):
            found.append(_workload(doc, kind, name, pod, (*prefix, *path), ".".join(map(str, path[:-1]))))
    return found, ("" if found else f"unknown kind {kind!r} (no pod template found)")


def _search_pod_specs(node: Any, path: tuple[Any, ...], depth: int) -> Iterator[tuple[tuple[Any, ...], Mapping]]:
    if depth > _MAX_DEPTH:
        return
    if isinstance(node, Mapping):
        containers = node.get("containers")
        if isinstance(containers, list) and any(isinstance(c, Mapping) and "image" in c for c in containers):
            yield path, node
            return
        for k, v in node.items():
            if k not in ("metadata", "status"):
                yield from _search_pod_specs(v, (*path, k), depth + 1)
    elif isinstance(node, list):
        for i, v in enumerate(node[:1000]):
            yield from _search_pod_specs(v, (*path, i), depth + 1)


def _get(obj: Any, path: tuple[Any, ...]) -> Any:
    for key in path:
        if not isinstance(obj, Mapping):
            return None
        obj = obj.get(key)
    return obj


def _line(doc: YamlDoc, node: Any) -> int | None:
    n = line_of(node)
    return None if n is None else doc.start_line + n + 1


def _workload(doc: YamlDoc, kind: str, name: str, spec: Mapping, path: tuple[Any, ...], role: str) -> Workload:
    containers: list[ContainerSpec] = []
    for field, init in (("initContainers", True), ("containers", False)):
        items = spec.get(field)
        if isinstance(items, list):
            for i, c in enumerate(items):
                if isinstance(c, Mapping):
                    containers.append(_container(doc, c, (*path, field, i), init))
    volumes = []
    vols = spec.get("volumes")
    if isinstance(vols, list):
        volumes = [_volume(v) for v in vols if isinstance(v, Mapping)]
    return Workload(
        source="kubernetes", kind=kind, name=name, containers=tuple(containers), volumes=tuple(volumes),
        doc_index=doc.index, pod_path=path, line=_line(doc, spec), origin=doc.helm_source,
        host_ipc=spec.get("hostIPC") is True, runtime_class=str(spec.get("runtimeClassName") or ""), role=role,
    )


def _strs(value: Any) -> tuple[str, ...]:
    if isinstance(value, list):
        return tuple(str(v) for v in value if v is not None)
    if isinstance(value, str):
        return (value,)
    return ()


def _container(doc: YamlDoc, c: Mapping, path: tuple[Any, ...], init: bool) -> ContainerSpec:
    env: list[tuple[str, str]] = []
    if isinstance(c.get("env"), list):
        for e in c["env"]:
            if isinstance(e, Mapping) and e.get("name") is not None:
                if "valueFrom" in e:
                    env.append((str(e["name"]), "<from valueFrom>"))
                else:
                    v = e.get("value")
                    env.append((str(e["name"]), "" if v is None else str(v)))
    res = c.get("resources") if isinstance(c.get("resources"), Mapping) else {}
    mounts = []
    if isinstance(c.get("volumeMounts"), list):
        for m in c["volumeMounts"]:
            if isinstance(m, Mapping) and m.get("name") is not None:
                mounts.append(Mount(str(m["name"]), str(m.get("mountPath", "")), m.get("readOnly") is True))
    return ContainerSpec(
        name=str(c.get("name", "?")), image=str(c.get("image") or ""), command=_strs(c.get("command")),
        args=_strs(c.get("args")), env=tuple(env), requests=_resources(res.get("requests")),
        limits=_resources(res.get("limits")), mounts=tuple(mounts), path=path, line=_line(doc, c), init=init,
    )


def _resources(value: Any) -> dict[str, str]:
    if not isinstance(value, Mapping):
        return {}
    return {str(k): str(v) for k, v in value.items() if v is not None}


def _volume(v: Mapping) -> VolumeSpec:
    name = str(v.get("name", "?"))
    if isinstance(v.get("emptyDir"), Mapping) or "emptyDir" in v:
        ed = v.get("emptyDir") if isinstance(v.get("emptyDir"), Mapping) else {}
        raw = ed.get("sizeLimit")
        return VolumeSpec(name, "emptyDir", str(ed.get("medium") or ""),
                          quantity_bytes(raw) if raw is not None else None, "" if raw is None else str(raw))
    if isinstance(v.get("hostPath"), Mapping):
        return VolumeSpec(name, "hostPath", host_path=str(v["hostPath"].get("path", "")))
    other = next((str(k) for k in v if k != "name"), "other")
    return VolumeSpec(name, other)
