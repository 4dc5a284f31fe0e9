"""Facts collected live on an H100 by doctor-collect's validation run (validation/results/doctor-collect/),
diagnosed offline: idle GPU, a second process leaving 300 MiB (contexts fail), and leaving 650 MiB
(context fits, a 64 MiB tensor does not). The hog must be found and named."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from oomdoctor.checks.engine import diagnose
from oomdoctor.facts import FactSet

RESULTS = Path(__file__).resolve().parents[1] / "validation" / "results" / "doctor-collect"


def report(name):
    path = RESULTS / f"{name}.json"
    if not path.exists():
        pytest.skip(f"{path} not on this branch")
    return diagnose(FactSet.from_json(json.loads(path.read_text())), {"source": "live"})


def test_idle_h100_is_quiet():
    r = report("facts_idle")
    assert r.verdict.category.value == "unknown"
    assert [f.id for f in r.findings if f.severity.rank >= 1] == []
    assert "SHR011" not in {f.id for f in r.findings}  # CUDA total = NVML total - reserved: not a slice


@pytest.mark.parametrize("name,probe_id", [("facts_with_hog_leave300", "FWK003"), ("facts_with_hog_leave650", "FWK004")])
def test_hog_is_found_and_named(name, probe_id):
    r = report(name)
    assert r.verdict.category.value == "other_process"
    by = {f.id: f for f in r.findings}
    assert by["SHR010"].severity.value == "error"
    assert "pid" in str(by["SHR010"].evidence[-1]) and "python3" in str(by["SHR010"].evidence[-1])
    assert by[probe_id].category.value == "other_process" and by[probe_id].severity.rank >= 2
