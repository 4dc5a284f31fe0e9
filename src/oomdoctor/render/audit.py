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
    notes: list[str] = field(default_factory=list)  # parts of the file that were not audited, and why


def to_json(files: list[AuditedFile], skipped: list[tuple[str, str]] = ()) -> str:
    out = []
    for f in files:
        entry: dict[str, Any] = {"path": f.path, "type": f.type, "workloads": f.workloads,
                                 "findings": [{**a.to_json(), "fixed": a.finding.id in f.fixed_ids} for a in f.findings]}
        if f.output:
            entry["fix"] = {"output": f.output, "changes": f.fixed}
        if f.notes:
            entry["notes"] = f.notes
        out.append(entry)
    return dumps({"files": out, "skipped": [{"path": p, "reason": r} for p, r in skipped]})


def _summary(files: list[AuditedFile], skipped: list[tuple[str, str]] = ()) -> str:
    sev = Counter(a.finding.severity.value for f in files for a in f.findings)
    total = sum(sev.values())
    parts = ", ".join(f"{sev[s]} {s}" for s in ("critical", "error", "warning", "info") if sev[s])
    text = f"{len(files)} file(s), {total} finding(s)" + (f" ({parts})" if parts else "")
    return text + (f"; {len(skipped)} file(s) skipped (not audited)" if skipped else "")


def to_text(files: list[AuditedFile], skipped: list[tuple[str, str]] = ()) -> str:
    lines: list[str] = []
    for f in files:
        lines.append(f"{f.path}  ({f.type}, {f.workloads} workload{'s' if f.workloads != 1 else ''})")
        for note in f.notes:
            lines.append(f"  note: {note}")
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
    for path, reason in skipped:
        lines += [f"{path}  (skipped: {reason})", ""]
    lines.append(_summary(files, skipped))
    return "\n".join(lines) + "\n"


def to_html(files: list[AuditedFile], skipped: list[tuple[str, str]] = ()) -> str:
    return render_page("audit.html.j2", "oomdoctor audit", files=files, skipped=list(skipped),
                       summary=_summary(files, skipped))
