"""The doctor report as JSON (docs/contracts.md §4): envelope + layers (all eight) + findings + verdict."""

from __future__ import annotations

from oomdoctor.facts.report import DoctorReport
from oomdoctor.render.envelope import dumps


def render_json(report: DoctorReport) -> str:
    return dumps(report.to_json())
