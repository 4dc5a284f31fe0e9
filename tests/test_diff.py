"""GIVEN two doctor reports WHEN diffed THEN the differences are ranked by OOM relevance: the seed's
kernel 4.18 (good) vs 3.10 (bad) comes first, with its explanation; noise comes last."""

from __future__ import annotations

import json
from pathlib import Path

from oomdoctor.analysis.diff import diff_facts, diff_reports, top_explanation
from oomdoctor.cli import main
from oomdoctor.facts import (
    Category,
    Confidence,
    Fact,
    FactSet,
    Finding,
    Layer,
    Severity,
    Unavailable,
    Verdict,
)
from oomdoctor.facts.report import DoctorReport, report_from_json

REP = Path(__file__).parent / "fixtures" / "reports"


def _load(name: str) -> DoctorReport:
    return report_from_json(json.loads((REP / name).read_text()))


def test_seed_pair_kernel_comes_first_with_explanation():
    result = diff_reports(_load("seed-good.json"), _load("seed-bad.json"))
    top = result.differences[0]
    assert top.key == "kernel.release"
    assert (top.a, top.b) == ("4.18.0-372.9.1.el8.x86_64", "3.10.0-1062.9.1.el7.x86_64")
    assert "older than 4.15" in top.note and "B" in top.note
    assert top_explanation(result).startswith("kernel.release: '4.18.0-372.9.1.el8.x86_64' (A) vs '3.10.0")
    keys = [d.key for d in result.differences]
    assert keys.index("driver.gpus[0].memory_used_bytes") < keys.index("host.name") < keys.index("bundle.created")
    assert keys[-1] == "bundle.created"
    # usage noise within 1% (MemTotal) and equal facts are not differences
    assert "host.mem_total_bytes" not in keys and "driver.version" not in keys


def test_finding_only_on_one_side_ranks_by_severity():
    result = diff_reports(_load("seed-good.json"), _load("seed-bad.json"))
    f = next(d for d in result.differences if d.kind == "finding")
    assert f.key == "DRV003" and f.a is None and f.b and "only on B" in f.note
    assert result.differences.index(f) == 1  # after the kernel, before anything of lower weight


def test_identical_reports_have_no_differences():
    r = _load("seed-bad.json")
    result = diff_reports(r, r)
    assert result.differences == [] and result.same > 20


def _fs(*facts):
    return FactSet(list(facts))


def test_lists_compare_element_wise_and_as_sets():
    g = {"index": 0, "name": "A100", "retired_pending": False, "uuid": "GPU-1"}
    a = _fs(Fact("driver.gpus", [g], "nvml"), Fact("runtime.dev_nodes", ["nvidia0", "nvidiactl"], "/dev"))
    b = _fs(Fact("driver.gpus", [{**g, "retired_pending": True, "uuid": "GPU-2"}], "nvml"),
            Fact("runtime.dev_nodes", ["nvidiactl"], "/dev"))
    diffs, _ = diff_facts(a, b)
    by_key = {d.key: d for d in diffs}
    assert by_key["driver.gpus[0].retired_pending"].score > by_key["driver.gpus[0].uuid"].score
    assert "GPU reset" in by_key["driver.gpus[0].retired_pending"].note
    assert by_key["runtime.dev_nodes"].a == ["nvidia0"] and by_key["runtime.dev_nodes"].b == []


def test_unavailable_on_one_side_is_a_weaker_difference():
    a = _fs(Fact("torch.version", "2.3.1", "x"), Fact("driver.version", "550.54.15", "x"))
    b = _fs(Unavailable("torch.version", "torch not installed"), Fact("driver.version", "535.129.03", "x"))
    diffs, _ = diff_facts(a, b)
    assert [d.key for d in sorted(diffs, key=lambda d: -d.score)] == ["driver.version", "torch.version"]
    drv = next(d for d in diffs if d.key == "driver.version")
    assert "550 vs 535" in drv.note and "12.4 vs 12.2" in drv.note


def test_cli_text_json_html_and_exit_codes(capsys):
    a, b = str(REP / "seed-good.json"), str(REP / "seed-bad.json")
    assert main(["diff", a, b]) == 1
    text = capsys.readouterr().out
    assert "Most relevant difference:" in text and text.index("kernel.release") < text.index("host.name")
    assert main(["diff", "--format", "json", a, b]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["schema_version"] == 1 and doc["differences"][0]["key"] == "kernel.release"
    assert doc["differences"][0]["explanation"] and doc["headline"]
    assert main(["diff", "--format", "html", a, b]) == 1
    assert "kernel.release" in capsys.readouterr().out
    assert main(["diff", a, a]) == 2  # the same input twice


def test_cli_bad_inputs(tmp_path, capsys):
    junk = tmp_path / "junk.json"
    junk.write_text("{not json")
    assert main(["diff", str(junk), str(REP / "seed-bad.json")]) == 2
    assert "junk.json" in capsys.readouterr().err
    wrong = tmp_path / "wrong.json"
    wrong.write_text('{"events": []}')
    assert main(["diff", str(wrong), str(REP / "seed-bad.json")]) == 2
    assert "not an oomdoctor doctor report" in capsys.readouterr().err
    assert main(["diff", str(tmp_path / "missing.json"), str(REP / "seed-bad.json")]) == 2


def test_report_round_trip_keeps_findings_for_diff():
    f = Finding("STO001", Layer.STORAGE, Severity.WARNING, Confidence.HIGH, "t", "r", Category.SHM_EXHAUSTED)
    r = DoctorReport(_fs(Fact("kernel.release", "5.15.0", "x")), (f,), Verdict(Category.UNKNOWN, ""), {})
    back = report_from_json(r.to_json())
    assert diff_reports(r, back).differences == []


def _bundle(root: Path, kernel: str) -> Path:
    (root / "proc").mkdir(parents=True)
    (root / "meta.json").write_text('{"format": "oomdoctor-bundle", "version": 1, "created": "2026-11-21T00:00:00Z"}')
    (root / "proc" / "version").write_text(
        f"Linux version {kernel} (mockbuild@x) (gcc version 4.8.5 20150623 (Red Hat 4.8.5-39) (GCC) ) #1 SMP\n")
    return root


def test_bundles_are_collected_and_diagnosed(tmp_path, capsys):
    import importlib.util

    a = _bundle(tmp_path / "good", "4.18.0-372.9.1.el8.x86_64")
    b = _bundle(tmp_path / "bad", "3.10.0-1062.9.1.el7.x86_64")
    rc = main(["diff", "--format", "json", str(a), str(b)])
    if importlib.util.find_spec("oomdoctor.collectors.machine") is None:
        assert rc == 2 and "collectors.machine" in capsys.readouterr().err
        return
    assert rc == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["differences"][0]["key"] == "kernel.release"


def test_crossed_threshold_outranks_an_equal_weight_version_change():
    a = _fs(Fact("kernel.release", "6.8.0-79-generic", "x"), Fact("driver.version", "580.95.05", "x"))
    b = _fs(Fact("kernel.release", "3.10.0-1062.9.1.el7.x86_64", "x"), Fact("driver.version", "535.129.03", "x"))
    result = diff_reports(DoctorReport(a, (), Verdict(Category.UNKNOWN, ""), {}),
                          DoctorReport(b, (), Verdict(Category.UNKNOWN, ""), {}))
    assert [d.key for d in result.differences] == ["kernel.release", "driver.version"]


def test_an_empty_reading_beside_an_unread_fact_claims_nothing_and_a_finding_can_head():
    # a new user's walkthrough (session 25): a live report against its own machine's bundle headlined
    # "k8s.terminations 'unavailable' vs []: host/cgroup OOM kills seen on one side", with none on either side
    from oomdoctor.analysis.diff import diff_facts
    from oomdoctor.facts import Fact, FactSet, Unavailable

    a = FactSet([Unavailable("k8s.terminations", "live: no manifests given")])
    b = FactSet([Fact("k8s.terminations", [], "manifests")])
    (d,), _ = diff_facts(a, b)
    assert "OOM" not in d.note and d.note.startswith("read on B only")
