"""The doctor report as one self-contained HTML file: verdict box, layer table, finding cards.

No CDN, no fonts or scripts fetched: CSS is inline in base.html.j2. Each finding card carries its
check's documentation (the same text as docs/checks/<id>.md) so the file explains itself offline.
"""

from __future__ import annotations

from oomdoctor.checks.registry import CHECKS
from oomdoctor.facts import LAYERS, Unavailable
from oomdoctor.facts.model import LayerStatus
from oomdoctor.facts.report import DoctorReport
from oomdoctor.render.doctor_common import fact_value_text
from oomdoctor.render.html import render_page


def render_html(report: DoctorReport) -> str:
    layers = []
    for name in LAYERS:
        entries = report.facts.by_layer(name)
        layers.append({
            "name": name,
            "status": report.layer_status.get(name, LayerStatus.UNKNOWN).value,
            "reason": report.layer_reason.get(name),
            "facts": [(k, fact_value_text(k, e.value), e.source) for k, e in entries.items() if e.available],
            "unavailable": [(k, e.reason) for k, e in entries.items() if isinstance(e, Unavailable)],
            "findings": [f.id for f in report.findings if f.layer.value == name],
        })
    docs = {f.id: CHECKS[f.id].doc for f in report.findings if f.id in CHECKS}
    return render_page("doctor.html.j2", title=f"oomdoctor doctor: {report.host_name or 'report'}",
                       report=report, layers=layers, docs=docs, meta=dict(report.meta))
