"""`audit` reports: text, JSON (docs/contracts.md §4 `{"files": [{"path", "findings"}]}`), HTML."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from oomdoctor.render.envelope import dumps
from oomdoctor.render.html import render_page


@dataclass
class AuditedFile:
    path: str
    type: str
    workloads: int
    findings: list[Any]  # AuditFinding
    fixed: list[str] = field(default_factory=list)  # changes --fix made
    fixed_ids: set[str] = field(default_factory=set)
    output: str = ""  # where the patched copy went


def to_json(files: list[AuditedFile]) -> str:
    out = []
    for f in files:
        entry: dict[str, Any] = {"path": f.path, "type": f.type, "workloads": f.workloads,
                                 "findings": [{**a.to_json(), "fixed": a.finding.id in f.fixed_ids} for a in f.findings]}
        if f.output:
            entry["fix"] = {"output": f.output, "changes": f.fixed}
        out.append(entry)
    return dumps({"files": out})


def _summary(files: list[AuditedFile]) -> str:
    sev = Counter(a.finding.severity.value for f in files for a in f.findings)
    total = sum(sev.values())
    parts = ", ".join(f"{sev[s]} {s}" for s in ("critical", "error", "warning", "info") if sev[s])
    return f"{len(files)} file(s), {total} finding(s)" + (f" ({parts})" if parts else "")


def to_text(files: list[AuditedFile]) -> str:
    lines: list[str] = []
    for f in files:
        lines.append(f"{f.path}  ({f.type}, {f.workloads} workload{'s' if f.workloads != 1 else ''})")
        if not f.findings:
            lines.append("  no OOM risks found")
        for a in f.findings:
            fd = a.finding
            shown = a.container if a.container and not a.object.endswith(f"/{a.container}") else None
            where = f"{a.object}" + (f" > {shown}" if shown else "") + (f"  line {a.line}" if a.line else "")
            if a.origin and a.origin != f"line {a.line}":
                where += f"  ({a.origin})"
            mark = "  [fixed]" if fd.id in f.fixed_ids else ""
            lines.append(f"  {fd.severity.value.upper():8} {fd.id}  {where}{mark}")
            lines.append(f"           {fd.title}")
            for e in fd.evidence:
                lines.append(f"           - {e.fact} = {e.value}")
            lines.append(f"           fix: {fd.remedy}")
        for change in f.fixed:
            lines.append(f"  patched: {change}")
        if f.output:
            lines.append(f"  wrote {f.output}")
        lines.append("")
    lines.append(_summary(files))
    return "\n".join(lines) + "\n"


def to_html(files: list[AuditedFile]) -> str:
    return render_page("audit.html.j2", "oomdoctor audit", files=files, summary=_summary(files))
