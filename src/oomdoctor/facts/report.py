"""The doctor report as plain data, and its JSON shape (docs/contracts.md §4).

Layer JSON: `{"name", "status", "status_reason": why it is unknown|null, "facts": {key: value|null},
"sources": {key: where}, "unavailable": {key: reason}}`; `facts` holds plain values so scripts can read
`layers[i]["facts"]["driver.version"]` directly. `from_json` reads a report back for `diff`/`fleet`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from oomdoctor.facts.base import Fact, FactSet, Unavailable
from oomdoctor.facts.keys import FACT_KEYS
from oomdoctor.facts.model import (
    LAYERS,
    Category,
    Confidence,
    Finding,
    Layer,
    LayerStatus,
    Severity,
    Verdict,
)


@dataclass(frozen=True)
class DoctorReport:
    facts: FactSet
    findings: tuple[Finding, ...]
    verdict: Verdict
    layer_status: Mapping[str, LayerStatus]
    meta: Mapping[str, Any] = field(default_factory=dict)  # source ("live"|"bundle"), bundle path, created
    layer_reason: Mapping[str, str] = field(default_factory=dict)  # why an `unknown` layer is unknown

    @property
    def host_name(self) -> str | None:
        return self.facts.value("host.name")

    def worst_severity(self) -> Severity | None:
        if not self.findings:
            return None
        return max((f.severity for f in self.findings), key=lambda s: s.rank)

    def to_json(self) -> dict[str, Any]:
        layers = []
        for name in LAYERS:
            entries = self.facts.by_layer(name)
            layers.append({
                "name": name,
                "status": self.layer_status.get(name, LayerStatus.UNKNOWN).value,
                "status_reason": self.layer_reason.get(name),
                "facts": {k: v.value for k, v in entries.items()},
                "sources": {k: v.source for k, v in entries.items() if v.source},
                "unavailable": {k: v.reason for k, v in entries.items() if isinstance(v, Unavailable)},
            })
        return {
            "host": {"name": self.host_name},
            "meta": dict(self.meta),
            "layers": layers,
            "findings": [f.to_json() for f in self.findings],
            "verdict": self.verdict.to_json(),
        }


def report_from_json(doc: Mapping[str, Any]) -> DoctorReport:
    """Rebuild a report from `doctor --format json` output. Raises ValueError on a wrong shape."""
    if not isinstance(doc, Mapping) or not isinstance(doc.get("layers"), list):
        raise ValueError("not an oomdoctor doctor report (no 'layers' list)")
    entries: list[Fact | Unavailable] = []
    status: dict[str, LayerStatus] = {}
    reason: dict[str, str] = {}
    for layer in doc["layers"]:
        if not isinstance(layer, Mapping):
            raise ValueError("a layer is not an object")
        name = str(layer.get("name"))
        try:
            status[name] = LayerStatus(layer.get("status", "unknown"))
        except ValueError:
            status[name] = LayerStatus.UNKNOWN
        if isinstance(layer.get("status_reason"), str):
            reason[name] = layer["status_reason"]
        sources = layer.get("sources") or {}
        unavailable = layer.get("unavailable") or {}
        for key, value in (layer.get("facts") or {}).items():
            if key not in FACT_KEYS:
                continue
            if key in unavailable:
                entries.append(Unavailable(key, str(unavailable[key]), str(sources.get(key, ""))))
            else:
                entries.append(Fact(key, value, str(sources.get(key, ""))))
    host = (doc.get("host") or {}).get("name") if isinstance(doc.get("host"), Mapping) else None
    if host and not any(e.key == "host.name" for e in entries):
        entries.append(Fact("host.name", host, "report"))
    findings = tuple(_finding_from_json(f) for f in doc.get("findings") or [] if isinstance(f, Mapping))
    v = doc.get("verdict") or {}
    verdict = Verdict(_category(v.get("category")) or Category.UNKNOWN, str(v.get("summary", "")))
    return DoctorReport(FactSet(entries), findings, verdict, status, dict(doc.get("meta") or {}), reason)


def _category(value: Any) -> Category | None:
    try:
        return Category(value) if value else None
    except ValueError:
        return None


def _finding_from_json(f: Mapping[str, Any]) -> Finding:
    from oomdoctor.facts.model import Evidence

    def enum(cls, value, default):
        try:
            return cls(value)
        except ValueError:
            return default

    return Finding(
        id=str(f.get("id", "?")),
        layer=enum(Layer, f.get("layer"), Layer.WORKLOAD),
        severity=enum(Severity, f.get("severity"), Severity.INFO),
        confidence=enum(Confidence, f.get("confidence"), Confidence.LOW),
        title=str(f.get("title", "")),
        remedy=str(f.get("remedy", "")),
        category=_category(f.get("category")),
        evidence=tuple(Evidence(str(e), "", "") for e in f.get("evidence") or []),
    )
