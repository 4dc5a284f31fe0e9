"""Run every check over a FactSet and decide: sorted findings, per-layer status, one verdict.

The verdict is the category with the most weight behind it: each finding with a category adds
severity weight x confidence weight (info findings add nothing), so one high-confidence error outweighs
a couple of medium warnings, and a lone low-confidence hint is not a verdict. Below a floor of one
medium warning the verdict is `unknown`: no evidence, no guess.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from oomdoctor.checks.registry import CHECKS, CheckSpec
from oomdoctor.facts import LAYERS, Category, Confidence, FactSet, Finding, Layer, Severity, Verdict
from oomdoctor.facts.model import LayerStatus
from oomdoctor.facts.report import DoctorReport

SEVERITY_WEIGHT = {Severity.INFO: 0.0, Severity.WARNING: 2.0, Severity.ERROR: 5.0, Severity.CRITICAL: 8.0}
CONFIDENCE_WEIGHT = {Confidence.LOW: 0.5, Confidence.MEDIUM: 1.0, Confidence.HIGH: 1.5}
VERDICT_FLOOR = 2.0

MEANING = {
    Category.TRUE_CAPACITY: "the job needs more GPU memory than it may use",
    Category.FRAGMENTATION: "enough free memory in total, but not in one block",
    Category.OTHER_PROCESS: "another process, container or earlier script holds GPU memory",
    Category.LEAK_IN_CODE: "memory grows step after step in the job's code",
    Category.CONTEXT_OR_DRIVER: "the CUDA context or driver fails to get memory or initialise while the GPU is not really full",
    Category.SHM_EXHAUSTED: "/dev/shm is too small for DataLoader workers or IPC",
    Category.HOST_OOM: "host or cgroup RAM is exhausted (kernel OOM killer, OOMKilled, exit 137)",
    Category.GPU_SHARING_LIMIT: "a GPU sharing layer's limit is reached while the physical GPU has room",
    Category.NOT_OOM: "the failure mentions memory but is something else (program error, hardware, build)",
    Category.UNKNOWN: "not enough evidence",
}


def _run(spec: CheckSpec, facts: FactSet) -> list[Finding]:
    try:
        return list(spec.fn(facts))
    except Exception as exc:  # noqa: BLE001 - one broken check must not break the report
        return [Finding(id=spec.id, layer=spec.layer, severity=Severity.INFO, confidence=Confidence.LOW,
                        title=f"check {spec.id} failed internally ({type(exc).__name__}: {exc}); its rule was not evaluated",
                        remedy="please report this with the bundle (`oomdoctor bundle -o bundle.tar.gz`)")]


def sort_key(f: Finding) -> tuple[int, int, int, str]:
    return (-f.severity.rank, -f.confidence.rank, LAYERS.index(f.layer.value), f.id)


def weight(f: Finding) -> float:
    return SEVERITY_WEIGHT[f.severity] * CONFIDENCE_WEIGHT[f.confidence]


# What makes a layer read: the facts only a GPU's driver (NVML, nvidia-smi, /proc/driver/nvidia) or torch's device list
# give. Where none of them was read, the layer's other facts (the kernel's and the OS's names; "no HAMi variable", "no
# compat libcuda") say nothing of the GPU the layer is about, so the layer is unknown, not "OK" (a machine without a
# driver showed its driver layer OK, session 25, and its gpu_sharing and cuda layers OK, session 26). A finding at
# warning or above still sets the status (HAMi's LD_PRELOAD, CUDA_MPS_PIPE_DIRECTORY, a manifest's shared GPU).
_CORE = {
    "gpu_sharing": ("sharing.mig", "sharing.vgpu", "sharing.processes"),
    "cuda": ("cuda.driver_max", "cuda.device_capabilities"),
    "driver": ("driver.version", "driver.gpus", "driver.gpu_count"),
}
_NOT_READ = {  # what a user misses in each such layer, after "no NVIDIA driver answered: "
    "gpu_sharing": "MIG, vGPU and the processes on the GPU could not be read",
    "cuda": "the CUDA version the driver supports and the GPUs' compute capability could not be read, so PyTorch's "
            "CUDA could not be checked against them",
    "driver": "its version and its GPUs could not be read",
}


def _core_read(facts: FactSet, layer: str) -> bool:
    core = _CORE.get(layer)
    return core is None or any((e := facts.get(k)) is not None and e.available for k in core)


def layer_statuses(facts: FactSet, findings: list[Finding]) -> dict[str, LayerStatus]:
    out: dict[str, LayerStatus] = {}
    for name in LAYERS:
        mine = [f for f in findings if f.layer.value == name]
        # bundle.* describes the snapshot (when it was made), not the layer: it does not make a layer read
        has_facts = _core_read(facts, name) if name in _CORE else any(
            e.available for k, e in facts.by_layer(name).items() if not k.startswith("bundle."))
        worst = max((f.severity.rank for f in mine), default=-1)
        if worst >= Severity.ERROR.rank:
            out[name] = LayerStatus.FAIL
        elif worst == Severity.WARNING.rank:
            out[name] = LayerStatus.WARN
        elif has_facts:
            out[name] = LayerStatus.OK
        else:
            out[name] = LayerStatus.UNKNOWN
    return out


def _no_driver(facts: FactSet, layer: str) -> str:
    """Who did not answer, in a user's words: this machine's driver, or the bundle's record of one."""
    if layer != "driver" and _core_read(facts, "driver"):
        return "the NVIDIA driver's version was read, but not its GPUs"
    sources = [e.source for k in _CORE[layer] if (e := facts.get(k)) is not None]
    if any(s.startswith("bundle:") for s in sources):
        return "the bundle holds no usable reading of an NVIDIA driver (commands/nvidia-smi-q.xml)"
    return "no NVIDIA driver answered"


CUDA_WHEEL = ("install a CUDA build for a GPU: `pip install torch --index-url https://download.pytorch.org/whl/cu126` "
              "(pick the cuXYZ the driver supports)")


def _cpu_only_torch(facts: FactSet) -> str | None:
    """The torch that was read is a CPU-only build (torch.version.cuda is None, and not ROCm's): it can use no GPU,
    which is the first thing to say of the cuda layer, before any driver (walkthrough, session 26)."""
    version, runtime = facts.get("torch.version"), facts.get("cuda.torch_runtime")
    if version is None or runtime is None or not version.available or not runtime.available:
        return None
    if runtime.value is not None or not isinstance(version.value, str) or "rocm" in version.value.lower():
        return None
    return f"PyTorch {version.value} is a CPU-only build (torch.version.cuda is None): it cannot use a GPU; {CUDA_WHEEL}"


def layer_reasons(facts: FactSet, statuses: Mapping[str, LayerStatus]) -> dict[str, str]:
    """Why each `unknown` layer is unknown, one short sentence (`status_reason` in JSON, a line in text)."""
    out: dict[str, str] = {}
    for name, status in statuses.items():
        if status is not LayerStatus.UNKNOWN:
            continue
        entries = {k: e for k, e in facts.by_layer(name).items() if not k.startswith("bundle.")}
        if name == "cuda" and (cpu := _cpu_only_torch(facts)):
            out[name] = cpu if _core_read(facts, "driver") else (f"{cpu}. Also {_no_driver(facts, name)}: the CUDA version the driver "
                                                        "supports and the GPUs' compute capability could not be read")
        elif name in _CORE and any(e.available for e in entries.values()):
            out[name] = f"{_no_driver(facts, name)}: {_NOT_READ[name]}"
        else:
            out[name] = "none of this layer's facts could be read"
    return out


def _probes_tried(facts: FactSet) -> bool:
    """--probe was asked for: its facts were read, or say why they could not be; the probe collector's reason starts
    with "not run" where they were not (live without --probe, a bundle made without it)."""
    e = facts.get("probe.context")
    return e is not None and (e.available or not str(getattr(e, "reason", "")).startswith("not run"))


def choose_verdict(findings: list[Finding], statuses: Mapping[str, LayerStatus], probed: bool = False) -> Verdict:
    scores: dict[Category, float] = {}
    best: dict[Category, Finding] = {}
    for f in findings:
        if f.category is None or f.category is Category.UNKNOWN or weight(f) == 0:
            continue
        scores[f.category] = scores.get(f.category, 0.0) + weight(f)
        if f.category not in best or sort_key(f) < sort_key(best[f.category]):
            best[f.category] = f
    known = [n for n, s in statuses.items() if s is not LayerStatus.UNKNOWN]
    if not scores or max(scores.values()) < VERDICT_FLOOR:
        lead = ("No finding points at a root cause of OOM failures on this environment"
                if known else "Not enough evidence: no layer could be read")
        if scores:  # a warning that names a cause, too weak alone: "no finding points at one" contradicted it (b2)
            lean = max(scores, key=lambda c: scores[c])
            lead = (f"The findings lean to {lean.value} ({best[lean].id}, confidence {best[lean].confidence.value}), "
                    "not enough to name a root cause of OOM failures on this environment")
        seen = f" ({len(known)} of {len(LAYERS)} layers read: {', '.join(known)})" if known else ""
        return Verdict(Category.UNKNOWN, lead + seen + ". If a job still fails, run `oomdoctor explain` on its log"
                       + ("." if probed else " and `oomdoctor doctor --probe` on the node."))
    ranked = sorted(scores, key=lambda c: (-scores[c], sort_key(best[c])))
    winner = ranked[0]
    support = sorted((f for f in findings if f.category is winner and weight(f) > 0), key=sort_key)
    key_points = []
    for f in support[:3]:
        first = f" [{f.evidence[0]}]" if f.evidence else ""
        key_points.append(f"{f.id}: {f.title}{first}")
    others = [f"{c.value} ({scores[c]:.1f})" for c in ranked[1:4]]
    summary = (f"Most likely root cause of OOM failures here: {winner.value}: {MEANING[winner]}. "
               f"Key evidence: {'; '.join(key_points)}."
               + (f" Also weighed (score): {', '.join(others)} against {winner.value} ({scores[winner]:.1f})." if others else ""))
    return Verdict(winner, summary, tuple(dict.fromkeys(f.id for f in support)))


def diagnose(facts: FactSet, meta: Mapping[str, Any] | None = None) -> DoctorReport:
    """Run all registered checks (importing every check module) and build the report."""
    import oomdoctor.checks.all  # noqa: F401 - registers the checks

    findings: list[Finding] = []
    for spec in sorted(CHECKS.values(), key=lambda s: (LAYERS.index(s.layer.value), s.id)):
        findings.extend(_run(spec, facts))
    findings.sort(key=sort_key)
    statuses = layer_statuses(facts, findings)
    return DoctorReport(facts=facts, findings=tuple(findings), verdict=choose_verdict(findings, statuses, _probes_tried(facts)),
                        layer_status=statuses, meta=dict(meta or {}), layer_reason=layer_reasons(facts, statuses))


__all__ = ["Layer", "diagnose", "choose_verdict", "layer_reasons", "layer_statuses", "sort_key"]
