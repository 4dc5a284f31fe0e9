"""GIVEN a bundle whose logs hold OOM-like lines WHEN doctor reports them (WRK001) THEN the remedy is a command to
run as printed, on the bundle doctor read (`oomdoctor explain --bundle PATH`, which reads that bundle's logs/), not
"run `oomdoctor explain <log> --bundle <bundle>`" with placeholders (session 26). Where the path is not in the facts
the placeholder reads as one to replace (YOUR_BUNDLE), and names the log the events came from.

The path comes through the facts (`bundle.path`, added by the command that opened the bundle): the check reads no
file, and the bundle's own facts stay the same wherever it lies.
"""

from __future__ import annotations

import json
import shlex
import shutil
import tarfile
from pathlib import Path

from builders import SEED, log_events, make_facts
from oomdoctor.checks.engine import diagnose
from oomdoctor.cli import main

ROOT = Path(__file__).resolve().parents[1]
SEED_BUNDLE = ROOT / "examples" / "seed-a100-k8s"


def _wrk001(report_or_doc) -> list[str]:
    findings = report_or_doc["findings"] if isinstance(report_or_doc, dict) else [f.to_json() for f in report_or_doc.findings]
    return [f["remedy"] for f in findings if f["id"] == "WRK001"]


def test_doctor_bundle_prints_the_explain_command_for_that_bundle(tmp_path, capsys):
    bundle = tmp_path / "seed bundle"  # a space: the command is quoted for the shell
    shutil.copytree(SEED_BUNDLE, bundle)
    assert main(["doctor", "--bundle", str(bundle), "--format", "json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    (remedy,) = _wrk001(doc)
    assert "<log>" not in remedy and "<bundle>" not in remedy
    assert f"`oomdoctor explain --bundle {shlex.quote(str(bundle))}`" in remedy
    assert "logs/seed-traceback.txt" in remedy
    workload = next(layer for layer in doc["layers"] if layer["name"] == "workload")
    assert workload["facts"]["bundle.path"] == str(bundle)


def test_the_printed_command_runs_and_explains_the_same_log(tmp_path, capsys):
    assert main(["doctor", "--bundle", str(SEED_BUNDLE)]) == 1
    text = " ".join(capsys.readouterr().out.split())  # the remedy wraps over lines
    assert f"run `oomdoctor explain --bundle {SEED_BUNDLE}`" in text
    assert main(["explain", "--bundle", str(SEED_BUNDLE)]) == 1  # the command as printed: an OOM explained
    assert "logs/seed-traceback.txt:27" in capsys.readouterr().out


def test_a_tarball_bundle_names_the_tarball(tmp_path, capsys):
    tgz = tmp_path / "seed.tar.gz"
    with tarfile.open(tgz, "w:gz") as tar:
        tar.add(SEED_BUNDLE, arcname="oomdoctor-bundle")
    assert main(["doctor", "--bundle", str(tgz), "--format", "json"]) == 1
    (remedy,) = _wrk001(json.loads(capsys.readouterr().out))
    assert f"`oomdoctor explain --bundle {tgz}`" in remedy


def test_without_the_bundle_path_the_placeholder_reads_as_one_to_fill_in():
    # facts from elsewhere (a bundle opened by its extracted root, a program): no bundle.path
    report = diagnose(make_facts(SEED), {})
    (remedy,) = _wrk001(report)
    assert "<" not in remedy and ">" not in remedy
    assert "`oomdoctor explain --bundle YOUR_BUNDLE`" in remedy and "logs/test.log" in remedy
    assert "`oomdoctor explain YOUR_LOG`" in remedy


def test_events_from_several_logs_are_all_named():
    events = (log_events("RuntimeError: CUDA error: out of memory", file="logs/rank0.log")
              + log_events("RuntimeError: CUDA error: out of memory", file="logs/rank1.log"))
    report = diagnose(make_facts(SEED, workload__oom_events=events, bundle__path="/data/b.tar.gz"), {})
    (remedy,) = _wrk001(report)
    assert remedy.startswith("run `oomdoctor explain --bundle /data/b.tar.gz`")
    assert "logs/rank0.log, logs/rank1.log" in remedy


def test_diff_of_two_bundles_does_not_list_their_paths(tmp_path, capsys):
    a, b = tmp_path / "a", tmp_path / "b"
    shutil.copytree(SEED_BUNDLE, a)
    shutil.copytree(SEED_BUNDLE, b)
    main(["diff", "--format", "json", str(a), str(b)])
    keys = [d["key"] for d in json.loads(capsys.readouterr().out)["differences"]]
    assert "bundle.path" not in keys


def test_without_a_reading_of_the_gpu_it_does_not_say_the_gpu_was_not_full():
    """A walkthrough (session 26): a bundle made on a machine without a driver had WRK001 say "the GPU was not full
    when these facts were read", and that claim set the verdict."""
    from builders import UNAVAILABLE, a100

    events = log_events("RuntimeError: CUDA error: out of memory")
    unread = diagnose(make_facts(workload__oom_events=events, driver__gpus=UNAVAILABLE))
    (f,) = [f for f in unread.findings if f.id == "WRK001"]
    assert "not full" not in f.title and "not known" in f.title and f.confidence.value == "low"
    read = diagnose(make_facts(workload__oom_events=events, driver__gpus=[a100()]))
    (g,) = [f for f in read.findings if f.id == "WRK001"]
    assert "the GPU was not full when these facts were read" in g.title
