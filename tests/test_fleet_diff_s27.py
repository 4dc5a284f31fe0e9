"""GIVEN the session-27 walkthrough's fleet and diff inputs WHEN aggregated or compared THEN a finding's count
is shown per severity (not as all-worst), and diff never claims a difference for a fact known on one side
only, compares OOM events by their kinds and figures, and never prints a Python repr of them."""

from __future__ import annotations

import copy
import json
from pathlib import Path

from oomdoctor.analysis.diff import diff_facts, diff_reports, top_explanation
from oomdoctor.analysis.fleet import aggregate, summarize
from oomdoctor.facts import Category, Fact, FactSet, Unavailable, Verdict
from oomdoctor.facts.report import DoctorReport
from oomdoctor.render import diff as render_diff
from oomdoctor.render import fleet as render_fleet

BASE = json.loads((Path(__file__).parent / "fixtures" / "reports" / "seed-good.json").read_text())


def _node(name: str, severity: str) -> dict:
    doc = copy.deepcopy(BASE)
    doc["host"]["name"] = name
    for layer in doc["layers"]:
        if "host.name" in layer["facts"]:
            layer["facts"]["host.name"] = name
    doc["findings"] = [{"id": "CUDA001", "severity": severity, "layer": "cuda"}]
    return doc


def test_fleet_counts_each_finding_per_severity(tmp_path, capsys):
    sevs = ["info"] * 6 + ["warning", "error"]
    result = aggregate(summarize(_node(f"n{i}", s), "x") for i, s in enumerate(sevs))
    assert result.finding_counts == {"CUDA001": 8}
    assert result.finding_severity == {"CUDA001": "error"}  # the worst, as before
    assert result.finding_severity_counts == {"CUDA001": {"critical": 0, "error": 1, "warning": 1, "info": 6}}
    text = render_fleet.to_text(result)
    line = next(ln for ln in text.splitlines() if ln.strip().startswith("CUDA001"))
    assert "error 1, warning 1, info 6" in line and " 8 " in line
    assert json.loads(render_fleet.to_json(result))["finding_severity_counts"]["CUDA001"]["info"] == 6
    assert "error 1, warning 1, info 6" in render_fleet.to_html(result)


def test_severity_counts_always_have_every_severity_and_nothing_else():
    """docs/contracts.md promises the keys; a stranger's report may hold any string as a severity."""
    sevs = ["warning", "weird", "ERROR", "", "<script>"]
    result = aggregate(summarize(_node(f"n{i}", s), "x") for i, s in enumerate(sevs))
    assert result.finding_severity_counts == {"CUDA001": {"critical": 0, "error": 1, "warning": 1, "info": 3}}
    assert result.finding_severity == {"CUDA001": "error"}
    only = aggregate([summarize(_node("a", "bogus"), "x")])
    assert only.finding_severity_counts == {"CUDA001": {"critical": 0, "error": 0, "warning": 0, "info": 1}}
    assert only.finding_severity == {"CUDA001": "info"}


def _report(*facts) -> DoctorReport:
    return DoctorReport(FactSet(list(facts)), (), Verdict(Category.UNKNOWN, ""), {})


def test_a_fact_known_on_one_side_only_claims_no_difference():
    a = FactSet([Fact("driver.version", "580.95.05", "x"), Fact("cgroup.oom_events", 0, "x")])
    b = FactSet([Unavailable("driver.version", "commands/nvidia-smi-q.xml missing"),
                 Unavailable("cgroup.oom_events", "cgroup v1 counts only oom_kill")])
    diffs, _ = diff_facts(a, b)
    notes = {d.key: d.note for d in diffs}
    assert notes["driver.version"] == "known on A only; not read on B, so nothing to compare"
    assert notes["cgroup.oom_events"] == "known on A only; not read on B, so nothing to compare"
    # OOM kills that were seen still say so, on the side that saw them
    diffs, _ = diff_facts(FactSet([Unavailable("cgroup.oom_events", "v1")]), FactSet([Fact("cgroup.oom_events", 3, "x")]))
    assert diffs[0].note.startswith("host/cgroup OOM kills seen on B (3); not read on A")


_EV_A = {"file": "logs/k8s_oom.log", "line": 4, "kind": "torch_oom", "category": "true_capacity", "count": 1,
         "text": "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. " + "x" * 400,
         "numbers": {"requested_bytes": 2 * 2**30, "total_bytes": 80 * 2**30}}
_EV_B = {"file": "logs/oldtorch.log", "line": 4, "kind": "torch_oom", "category": "true_capacity", "count": 1,
         "text": "RuntimeError: CUDA out of memory. Tried to allocate 20.00 MiB", "numbers": {"requested_bytes": 20 * 2**20}}


def test_same_kinds_of_oom_events_say_what_differs_and_the_headline_is_a_summary():
    result = diff_reports(_report(Fact("workload.oom_events", [_EV_A], "logs")),
                          _report(Fact("workload.oom_events", [_EV_B], "logs")))
    [d] = result.differences
    assert "differ (A:" not in d.note
    assert "same kinds and causes" in d.note and "requested 2.00 GiB vs 20.00 MiB" in d.note
    assert "logs/k8s_oom.log vs logs/oldtorch.log" in d.note
    head = top_explanation(result)
    assert "{'" not in head and "xxxx" not in head and len(head) < 400
    assert head.startswith("workload.oom_events: 1 event: torch_oom -> true_capacity (A) vs 1 event:")
    text = render_diff.to_text(result, head)
    assert "{\"file\"" not in text and "torch_oom -> true_capacity" in text.splitlines()[7]


def test_different_kinds_of_oom_events_still_name_both():
    ev = dict(_EV_B, kind="hami_oom", category="gpu_sharing_limit")
    result = diff_reports(_report(Fact("workload.oom_events", [_EV_A], "logs")),
                          _report(Fact("workload.oom_events", [ev], "logs")))
    assert "A: torch_oom -> true_capacity; B: hami_oom -> gpu_sharing_limit" in result.differences[0].note


def test_table_cells_are_cut_after_a_whole_word():
    result = diff_reports(_report(Fact("driver.nvml_error", "NVML library not found (libnvidia-ml.so.1)", "x")),
                          _report(Fact("driver.nvml_error", "NVML initialisation failed with driver mismatch", "x")))
    row = render_diff.to_text(result, None).splitlines()[4]
    assert "NVML library not found …" in row and "libnvidia…" not in row

