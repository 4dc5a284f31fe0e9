"""QA pass: every command's JSON carries the docs/contracts.md §4 keys; every HTML page is self-contained."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from oomdoctor.cli import main

ROOT = Path(__file__).resolve().parents[1]
SEED = ROOT / "examples" / "seed-a100-k8s"
HEALTHY = ROOT / "tests" / "fixtures" / "bundles" / "healthy_node"
REPORTS = ROOT / "tests" / "fixtures" / "reports"
POD = ROOT / "tests" / "fixtures" / "configs" / "pod-nvidia-visible-all.yaml"
LAYERS = ["resources", "runtime", "gpu_sharing", "cuda", "driver", "storage", "framework", "workload"]
CATEGORIES = {"true_capacity", "fragmentation", "other_process", "leak_in_code", "context_or_driver",
              "shm_exhausted", "host_oom", "gpu_sharing_limit", "not_oom", "unknown"}
FINDING_KEYS = {"id", "layer", "severity", "confidence", "category", "title", "evidence", "remedy"}
OOM_LOG = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity "
           "of 79.10 GiB of which 1.00 GiB is free. Including non-PyTorch memory, this process has 78.00 GiB "
           "memory in use. Of the allocated memory 70.00 GiB is allocated by PyTorch, and 7.00 GiB is reserved "
           "by PyTorch but unallocated.\n")


def _argvs(tmp_path: Path) -> dict[str, list[str]]:
    log = tmp_path / "oom.log"
    log.write_text(OOM_LOG)
    from record.synth import write_run  # tests/ is on sys.path (rootdir insertion)

    run = write_run(tmp_path / "run", steps=5)
    return {"doctor": ["doctor", "--bundle", str(SEED)], "explain": ["explain", str(log)],
            "audit": ["audit", str(POD)], "diff": ["diff", str(HEALTHY), str(SEED)],
            "fleet": ["fleet", str(REPORTS)], "report": ["report", str(run)]}


def _run(capsys, argv: list[str]) -> str:
    assert main(argv) in (0, 1), capsys.readouterr().err
    return capsys.readouterr().out


@pytest.mark.parametrize("cmd", ["doctor", "explain", "audit", "diff", "fleet", "report"])
def test_json_envelope(tmp_path, capsys, cmd):
    doc = json.loads(_run(capsys, [*_argvs(tmp_path)[cmd], "--format", "json"]))
    assert doc["schema_version"] == 1 and isinstance(doc["tool_version"], str) and doc["tool_version"]


def _check_finding(f: dict) -> None:
    assert FINDING_KEYS <= set(f)
    assert f["severity"] in ("info", "warning", "error", "critical")
    assert f["confidence"] in ("low", "medium", "high")
    assert f["category"] is None or f["category"] in CATEGORIES
    assert isinstance(f["evidence"], list) and all(isinstance(e, str) for e in f["evidence"])


def test_doctor_json_contract(tmp_path, capsys):
    doc = json.loads(_run(capsys, [*_argvs(tmp_path)["doctor"], "--format", "json"]))
    assert [layer["name"] for layer in doc["layers"]] == LAYERS
    assert all(layer["status"] in ("ok", "warn", "fail", "unknown") and isinstance(layer["facts"], dict)
               for layer in doc["layers"])
    for f in doc["findings"]:
        _check_finding(f)
        assert f["layer"] in LAYERS
    assert doc["verdict"]["category"] in CATEGORIES and doc["verdict"]["summary"]


def test_explain_json_contract_numbers_never_guessed(tmp_path, capsys):
    log = tmp_path / "partial.log"
    log.write_text("RuntimeError: CUDA out of memory. Tried to allocate 512.00 MiB\n")
    doc = json.loads(_run(capsys, ["explain", str(log), "--format", "json"]))
    (event,) = doc["events"]
    assert {"kind", "line", "text", "numbers"} <= set(event)
    assert event["numbers"] == {"requested_bytes": 512 << 20}  # nothing else is in the text
    assert doc["hypotheses"] and all({"category", "confidence", "evidence", "fixes"} <= set(h)
                                     for h in doc["hypotheses"])
    confidences = [h["confidence"] for h in doc["hypotheses"]]
    assert confidences == sorted(confidences, reverse=True)


def test_audit_and_fleet_json_contracts(tmp_path, capsys):
    argvs = _argvs(tmp_path)
    audit = json.loads(_run(capsys, [*argvs["audit"], "--format", "json"]))
    assert [f["path"] for f in audit["files"]] == [str(POD)]
    for f in audit["files"][0]["findings"]:
        _check_finding(f)
    fleet = json.loads(_run(capsys, [*argvs["fleet"], "--format", "json"]))
    assert isinstance(fleet["nodes"], int) and fleet["nodes"] >= 2
    assert all(set(g) >= {"fingerprint", "nodes"} for g in fleet["groups"])
    assert all(set(o) >= {"node", "differs_in"} for o in fleet["outliers"])
    assert all(isinstance(v, int) for v in fleet["finding_counts"].values())


_EXTERNAL = re.compile(r"<(?:script|link|img|iframe|source|video|audio)\b[^>]*\b(?:src|href)\s*=\s*[\"']?\s*(?:https?:)?//",
                       re.I)


@pytest.mark.parametrize("cmd", ["doctor", "explain", "audit", "diff", "fleet", "report"])
def test_html_is_one_self_contained_page(tmp_path, capsys, cmd):
    page = _run(capsys, [*_argvs(tmp_path)[cmd], "--format", "html"])
    assert page.lstrip().lower().startswith("<!doctype html>") and page.rstrip().endswith("</html>")
    assert not _EXTERNAL.search(page)
    assert not re.search(r"@import|@font-face|url\(\s*[\"']?(?:https?:)?//", page, re.I)
    strict_html5_parse(page)


def strict_html5_parse(page: str) -> None:
    """What a browser would repair silently is an error here: html5lib's strict parser (the WHATWG
    algorithm) raises on the first parse error, and every inline <svg> must be well-formed XML."""
    import xml.etree.ElementTree as ET

    import html5lib

    html5lib.HTMLParser(strict=True, namespaceHTMLElements=False).parse(page)
    for svg in re.findall(r"<svg\b.*?</svg>", page, re.S):
        ET.fromstring(svg.replace("&nbsp;", "&#160;"))
