"""`fleet` reports: groups, outliers and finding counts (text, JSON per docs/contracts.md §4, HTML)."""

from __future__ import annotations

import json
from typing import Any

from oomdoctor.render.envelope import dumps
from oomdoctor.render.html import render_page
from oomdoctor.render.svg import bar_chart

_SHOWN = {"driver.gpu_count": "", "driver.gpu_names": "x", "kernel.release": "kernel", "driver.version": "driver",
          "cuda.driver_max": "CUDA", "torch.version": "torch", "os.id": ""}
_SEV_COLOR = {"critical": "#82071e", "error": "#cf222e", "warning": "#9a6700", "info": "#57606a"}


def to_json(result) -> str:
    return dumps(result.to_json())


def _value(v: Any) -> str:
    if isinstance(v, list) and all(isinstance(x, str) for x in v):
        return "/".join(v)
    return v if isinstance(v, str) else json.dumps(v, default=str)


def _describe(values: dict[str, Any]) -> str:
    parts = [f"{label} {_value(values[k])}".strip() for k, label in _SHOWN.items() if values.get(k) is not None]
    return " ".join(parts[:2]) + (", " if len(parts) > 2 else "") + ", ".join(parts[2:]) if parts else "no fingerprint facts"


def by_severity(result, fid: str) -> str:
    """'error 1, warning 1, info 6': how many nodes had the finding at each severity (a check's severity
    depends on the node: CUDA001 is info where the driver is new enough, an error where it is not)."""
    counts = getattr(result, "finding_severity_counts", {}).get(fid) or {}
    if not counts:
        return result.finding_severity.get(fid, "")
    return ", ".join(f"{sev} {counts[sev]}" for sev in _SEV_COLOR if counts.get(sev))


def to_text(result, max_groups: int = 10, max_outliers: int = 50) -> str:
    lines = [f"{result.nodes} node(s), {len(result.groups)} configuration group(s), {len(result.outliers)} outlier(s)"]
    if result.duplicates:
        lines.append(f"({result.duplicates} older duplicate report(s) of the same node ignored)")
    lines += ["", "Groups (by configuration fingerprint):"]
    for i, (fp, names) in enumerate(result.groups[:max_groups], 1):
        sample = ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")
        lines.append(f"  #{i} {fp}  {len(names):>6} node(s)  {_describe(result.group_values.get(fp, {}))}")
        if result.group_differs.get(fp):
            lines.append(f"      differs from a larger group in: {', '.join(result.group_differs[fp])}")
        lines.append(f"      nodes: {sample}")
    if len(result.groups) > max_groups:
        lines.append(f"  ... {len(result.groups) - max_groups} more group(s) (see --format json)")
    lines += ["", "Outliers:"]
    if not result.outliers:
        lines.append("  none")
    for node, keys in result.outliers[:max_outliers]:
        lines.append(f"  {node:<32} {', '.join(keys)}")
    if len(result.outliers) > max_outliers:
        lines.append(f"  ... {len(result.outliers) - max_outliers} more (see --format json)")
    lines += ["", "Findings across the fleet (nodes, by severity on each node):"]
    if not result.finding_counts:
        lines.append("  none")
    top = max(result.finding_counts.values(), default=1)
    for fid, n in result.finding_counts.items():
        bar = "#" * max(1, round(30 * n / top))
        lines.append(f"  {fid:<8} {n:>6}  {by_severity(result, fid):<34} {bar}")
    for src, why in result.skipped[:20]:
        lines.append(f"skipped {src}: {why}")
    if len(result.skipped) > 20:
        lines.append(f"skipped {len(result.skipped) - 20} more input(s)")
    return "\n".join(lines) + "\n"


def to_html(result) -> str:
    items = list(result.finding_counts.items())[:40]
    chart = bar_chart(items, colors=[_SEV_COLOR.get(result.finding_severity.get(f, ""), "#0969da") for f, _ in items])
    groups = [{"fp": fp, "n": len(names), "desc": _describe(result.group_values.get(fp, {})),
               "differs": ", ".join(result.group_differs.get(fp, [])), "sample": ", ".join(names[:5])}
              for fp, names in result.groups[:100]]
    findings = [{"id": f, "n": n, "by_severity": by_severity(result, f)} for f, n in list(result.finding_counts.items())[:200]]
    return render_page("fleet.html.j2", "oomdoctor fleet", result=result, groups=groups, chart=chart, findings=findings)
