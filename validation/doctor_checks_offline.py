"""Diagnose facts recorded on the device machine (FactSet JSON, as written by doctor-collect's
validation run) with the current checks: `python validation/doctor_checks_offline.py FACTS.json...`."""

from __future__ import annotations

import json
import sys

from oomdoctor.checks.engine import diagnose
from oomdoctor.facts import FactSet
from oomdoctor.render.doctor_text import render_text

for path in sys.argv[1:]:
    with open(path, encoding="utf-8") as fh:
        facts = FactSet.from_json(json.load(fh))
    report = diagnose(facts, {"source": f"live facts recorded in {path}"})
    text = render_text(report, color=False, width=110)
    print(f"### {path}\n")
    print(text[text.index("Findings"):])
