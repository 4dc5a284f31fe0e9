"""Aggregate many doctor reports: configuration groups, outliers, findings across the fleet.

Nodes are grouped by a fingerprint: a hash of the facts registered with `fingerprint=True` (versions,
limits, sharing layers; not usage). The interesting nodes are the outliers: a small group that differs
from a bigger one in a few keys (the one node on an old kernel), and nodes whose GPUs report pending
page retirement / row remapping, uncorrectable ECC or Xid errors, or whose kernel is older than 4.15.

Works on the plain JSON dicts of `doctor --format json` (no FactSet per node) so 10,000 reports
aggregate in well under the 10 s budget (bench/fleet_scale.py).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Optional

from oomdoctor.facts.keys import FACT_KEYS

FINGERPRINT_KEYS: tuple[str, ...] = tuple(sorted(k for k, v in FACT_KEYS.items() if v.fingerprint))
_HEALTH_KEYS = ("driver.gpus", "driver.xid_events", "driver.nvrm_errors", "kernel.release")
_WANTED = frozenset((*FINGERPRINT_KEYS, *_HEALTH_KEYS, "host.name"))
_GPU_HEALTH = ("retired_pending", "remapped_pending", "remapped_failure", "reset_required", "ecc_uncorrected",
               "retired_pages")
MAX_DIFFERING_KEYS = 3  # a group that differs in more keys is another pool of machines, not an outlier
OLD_KERNEL = (4, 15)  # NVIDIA 560+ drivers refuse older kernels [NVLINUXH]
_SEVERITY_RANK = {"info": 0, "warning": 1, "error": 2, "critical": 3}


@dataclass
class NodeSummary:
    name: str
    values: dict[str, Any]  # fingerprint facts (None when unavailable)
    fingerprint: str
    health: list[str]  # fact keys with a health problem
    findings: dict[str, str]  # id -> severity
    kernel: Optional[str] = None


@dataclass
class FleetResult:
    nodes: int
    groups: list[tuple[str, list[str]]]
    outliers: list[tuple[str, list[str]]]
    finding_counts: dict[str, int]
    finding_severity: dict[str, str] = field(default_factory=dict)  # the worst severity a node had
    finding_severity_counts: dict[str, dict[str, int]] = field(default_factory=dict)  # id -> severity -> nodes
    group_values: dict[str, dict[str, Any]] = field(default_factory=dict)
    group_differs: dict[str, list[str]] = field(default_factory=dict)  # vs the nearest bigger group
    skipped: list[tuple[str, str]] = field(default_factory=list)
    duplicates: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "nodes": self.nodes,
            "groups": [{"fingerprint": fp, "nodes": names, "size": len(names),
                        "facts": self.group_values.get(fp, {}), "differs_from_larger": self.group_differs.get(fp, [])}
                       for fp, names in self.groups],
            "outliers": [{"node": n, "differs_in": keys} for n, keys in self.outliers],
            "finding_counts": self.finding_counts,
            "finding_severity": self.finding_severity,
            "finding_severity_counts": self.finding_severity_counts,
            "skipped": [{"source": s, "reason": r} for s, r in self.skipped],
            "duplicate_reports": self.duplicates,
        }


def _normalise(key: str, value: Any) -> Any:
    if key == "host.mem_total_bytes" and isinstance(value, (int, float)) and value > 0:
        # MemTotal of identical machines differs by a few MiB (firmware/kernel reservations): bucket it
        step = 4 * 2**30 if value > 32 * 2**30 else 2**30
        return int(round(value / step)) * step
    return value


def _kernel_tuple(release: Any) -> Optional[tuple[int, int]]:
    m = re.match(r"(\d+)\.(\d+)", str(release or ""))
    return (int(m.group(1)), int(m.group(2))) if m else None


def fingerprint(values: Mapping[str, Any]) -> str:
    blob = json.dumps([values.get(k) for k in FINGERPRINT_KEYS], sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha1(blob.encode()).hexdigest()[:12]


def summarize(doc: Any, fallback_name: str) -> NodeSummary:
    """The fleet's view of one `doctor --format json` document. Raises ValueError on a wrong shape."""
    if not isinstance(doc, Mapping) or not isinstance(doc.get("layers"), list):
        raise ValueError("not an oomdoctor doctor report (no 'layers' list)")
    facts: dict[str, Any] = {}
    for layer in doc["layers"]:
        if not isinstance(layer, Mapping):
            raise ValueError("a layer is not an object")
        lf = layer.get("facts")
        if not isinstance(lf, Mapping):
            continue
        unavailable = layer.get("unavailable") or {}
        for key, value in lf.items():
            if key in _WANTED:
                facts[key] = None if key in unavailable else value
    host = doc.get("host")
    name = (host.get("name") if isinstance(host, Mapping) else None) or facts.get("host.name") or fallback_name
    values = {k: _normalise(k, facts.get(k)) for k in FINGERPRINT_KEYS}
    findings: dict[str, str] = {}
    for f in doc.get("findings") or []:
        if isinstance(f, Mapping) and f.get("id"):
            sev = _severity(f.get("severity"))
            old = findings.get(str(f["id"]))
            if old is None or _SEVERITY_RANK.get(sev, 0) > _SEVERITY_RANK.get(old, 0):
                findings[str(f["id"])] = sev
    return NodeSummary(str(name), values, fingerprint(values), _health(facts), findings, facts.get("kernel.release"))


def _severity(value: Any) -> str:
    """A report's severity as one of ours (case-insensitive); anything else a stranger's report holds counts
    as "info", the lowest, so it never raises the exit code and each node still counts once."""
    sev = str(value or "info").strip().lower()
    return sev if sev in _SEVERITY_RANK else "info"


def _truthy(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)):
        return value > 0
    if isinstance(value, (list, dict, str)):
        return bool(value) and value not in ("0", "No", "no", "false", "False", "N/A")
    return False


def _health(facts: Mapping[str, Any]) -> list[str]:
    out = []
    gpus = facts.get("driver.gpus")
    if isinstance(gpus, list):
        bad: set[str] = set()
        for g in gpus:
            if isinstance(g, Mapping):
                for f in _GPU_HEALTH:
                    v = g.get(f)
                    if v and _truthy(v):  # almost always False/0: skip the type dispatch
                        bad.add(f)
        out += [f"driver.gpus.{f}" for f in sorted(bad)]
    for key in ("driver.xid_events", "driver.nvrm_errors"):
        if isinstance(facts.get(key), list) and facts[key]:
            out.append(key)
    k = _kernel_tuple(facts.get("kernel.release"))
    if k is not None and k < OLD_KERNEL:
        out.append("kernel.release")
    return out


def _differing(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[str]:
    return [k for k in FINGERPRINT_KEYS if a.get(k) != b.get(k)]


def aggregate(summaries: Iterable[NodeSummary], skipped: Iterable[tuple[str, str]] = ()) -> FleetResult:
    nodes: dict[str, NodeSummary] = {}
    duplicates = 0
    for s in summaries:
        duplicates += s.name in nodes
        nodes[s.name] = s  # a later report of the same node wins (periodic DaemonSet runs)
    by_fp: dict[str, list[str]] = {}
    values: dict[str, dict[str, Any]] = {}
    counts: Counter[str] = Counter()
    severity: dict[str, str] = {}
    per_severity: dict[str, Counter[str]] = {}
    for s in nodes.values():
        by_fp.setdefault(s.fingerprint, []).append(s.name)
        values.setdefault(s.fingerprint, s.values)
        counts.update(s.findings.keys())
        for fid, sev in s.findings.items():
            per_severity.setdefault(fid, Counter())[sev] += 1
            if _SEVERITY_RANK.get(sev, 0) >= _SEVERITY_RANK.get(severity.get(fid, "info"), 0):
                severity[fid] = sev
    groups = sorted(((fp, sorted(names)) for fp, names in by_fp.items()), key=lambda g: (-len(g[1]), g[0]))
    outlier_keys: dict[str, set[str]] = {}
    differs: dict[str, list[str]] = {}
    for i, (fp, names) in enumerate(groups[1:], 1):
        best: Optional[list[str]] = None
        for bigger_fp, bigger in groups[:i]:
            if len(bigger) <= len(names):
                continue
            d = _differing(values[fp], values[bigger_fp])
            if best is None or len(d) < len(best):
                best = d
        if best is None:
            continue
        differs[fp] = best
        if len(best) <= MAX_DIFFERING_KEYS:
            for n in names:
                outlier_keys.setdefault(n, set()).update(best)
    for s in nodes.values():
        if s.health:
            outlier_keys.setdefault(s.name, set()).update(s.health)
    outliers = sorted((n, sorted(keys)) for n, keys in outlier_keys.items())
    finding_counts = dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))
    order = sorted(_SEVERITY_RANK, key=lambda k: -_SEVERITY_RANK[k])  # every severity, worst first, zeros kept
    by_sev = {fid: {sev: per_severity[fid][sev] for sev in order} for fid in finding_counts}
    return FleetResult(len(nodes), groups, outliers, finding_counts, severity, by_sev, values, differs, list(skipped),
                       duplicates)
