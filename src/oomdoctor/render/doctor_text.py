"""The doctor report as text: per-layer facts and status, findings with evidence and remedy, verdict.

Rendered by rich into a string at a fixed width; without colour (a pipe, a file, NO_COLOR) there are no
escape codes and the boxes are plain ASCII, so the output greps and diffs cleanly.
"""

from __future__ import annotations

import io
from typing import Any

from rich import box
from rich.console import Console
from rich.padding import Padding
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from oomdoctor._version import __version__
from oomdoctor.facts import LAYERS, Unavailable
from oomdoctor.facts.model import LayerStatus
from oomdoctor.facts.report import DoctorReport
from oomdoctor.render.doctor_common import fact_value_text, one_line

STATUS_STYLE = {"ok": "green", "warn": "yellow", "fail": "bold red", "unknown": "dim"}
SEVERITY_STYLE = {"info": "cyan", "warning": "yellow", "error": "bold red", "critical": "bold white on red"}
MAX_FACTS_PER_LAYER = 14


def _layer_table(report: DoctorReport, ascii_only: bool) -> Table:
    table = Table(title="Layers (outside in)", box=box.ASCII2 if ascii_only else box.SIMPLE_HEAD,
                  show_lines=ascii_only, expand=True, title_justify="left")
    table.add_column("layer", no_wrap=True)
    table.add_column("status", no_wrap=True)
    table.add_column("facts")
    for name in LAYERS:
        status = report.layer_status.get(name, LayerStatus.UNKNOWN).value
        entries = report.facts.by_layer(name)
        lines = []
        # None / [] / {} say "not present": shown in JSON and HTML, folded here (limits: None = unlimited).
        available = [(k, e) for k, e in entries.items()
                     if e.available and (e.value not in (None, [], {}) or "limit" in k)]
        empty = [k for k, e in entries.items() if e.available and (k, e) not in available]
        for key, entry in available[:MAX_FACTS_PER_LAYER]:
            lines.append(f"{key} = {fact_value_text(key, entry.value)}")
        if len(available) > MAX_FACTS_PER_LAYER:
            lines.append(f"... {len(available) - MAX_FACTS_PER_LAYER} more (--format json shows all)")
        if empty:
            lines.append(f"none/empty: {', '.join(empty[:6])}" + (" ..." if len(empty) > 6 else ""))
        # grouped by why, so that "no CUDA device" or "not run (use --probe)" shows here, not only in JSON
        why: dict[str, list[str]] = {}
        for k, e in entries.items():
            if isinstance(e, Unavailable):
                why.setdefault(one_line(e.reason, 110), []).append(k)
        for reason, keys in list(why.items())[:3]:
            lines.append(f"unavailable ({reason}): {', '.join(keys[:6])}" + (" ..." if len(keys) > 6 else ""))
        if len(why) > 3:
            rest = sum(len(v) for v in list(why.values())[3:])
            lines.append(f"... {rest} more unavailable (--format json says why)")
        if not lines:
            lines.append("no facts read")
        if status == "unknown" and report.layer_reason.get(name):  # first: why nothing here can be called OK
            lines.insert(0, f"why unknown: {report.layer_reason[name]}")
        table.add_row(name, Text(status.upper(), style=STATUS_STYLE[status]), Text("\n".join(lines)))
    return table


def _findings(console: Console, report: DoctorReport) -> None:
    console.rule("Findings", align="left")
    if not report.findings:
        console.print("No findings.")
    for f in report.findings:
        head = Text()
        head.append(f"[{f.severity.value.upper()}]", style=SEVERITY_STYLE[f.severity.value])
        head.append(f" {f.id} ", style="bold")
        head.append(f"({f.layer.value}, confidence {f.confidence.value}"
                    + (f", {f.category.value}" if f.category else "") + ") ")
        head.append(f.title)
        console.print(head)
        for e in f.evidence:
            console.print(Padding(Text(f"evidence: {e}", style="dim"), (0, 0, 0, 4)))
        console.print(Padding(Text(f"remedy: {f.remedy}"), (0, 0, 0, 4)))
        console.print()


def render_text(report: DoctorReport, *, color: bool = False, width: int = 100) -> str:
    """The whole report as a string. `color` only for a terminal."""
    buf = io.StringIO()
    console = Console(file=buf, width=width, force_terminal=color, color_system="standard" if color else None,
                      no_color=not color, highlight=False, emoji=False, legacy_windows=False, soft_wrap=False)
    meta: dict[str, Any] = dict(report.meta)
    where = meta.get("bundle") or meta.get("source") or "this machine"
    console.print(Text(f"oomdoctor {__version__} doctor: {report.host_name or 'unknown host'} ({where})", style="bold"))
    console.print(_layer_table(report, ascii_only=not color))
    _findings(console, report)
    v = report.verdict
    body = Text()
    body.append(f"{v.category.value}\n", style="bold red" if v.category.value != "unknown" else "bold")
    body.append(v.summary)
    console.print(Panel(body, title="Verdict", title_align="left", box=box.ASCII2 if not color else box.ROUNDED))
    text = buf.getvalue()
    if not color:  # rich pads lines to the width; a file should not carry trailing blanks
        text = "\n".join(line.rstrip() for line in text.split("\n"))
    return text


__all__ = ["render_text"]
