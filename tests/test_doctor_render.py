"""Renderers: JSON exactly per docs/contracts.md §4, text readable without a TTY, HTML self-contained."""

from __future__ import annotations

import json
import re

from builders import make_facts, seed_facts
from oomdoctor.checks.engine import diagnose
from oomdoctor.facts import CATEGORIES, LAYERS
from oomdoctor.facts.report import report_from_json
from oomdoctor.render.doctor_html import render_html
from oomdoctor.render.doctor_json import render_json
from oomdoctor.render.doctor_text import render_text

FINDING_KEYS = {"id", "layer", "severity", "confidence", "category", "title", "evidence", "remedy"}


def seed_report():
    return diagnose(seed_facts(), {"source": "bundle", "bundle": "examples/seed"})


def test_json_shape_matches_the_contract():
    doc = json.loads(render_json(seed_report()))
    assert doc["schema_version"] == 1 and isinstance(doc["tool_version"], str)
    assert list(doc)[:2] == ["schema_version", "tool_version"]
    assert [layer["name"] for layer in doc["layers"]] == list(LAYERS)
    for layer in doc["layers"]:
        assert layer["status"] in ("ok", "warn", "fail", "unknown") and isinstance(layer["facts"], dict)
    assert doc["layers"][LAYERS.index("driver")]["facts"]["kernel.release"] == "3.10.0-1062.9.1.el7.x86_64"
    assert doc["findings"]
    for f in doc["findings"]:
        assert FINDING_KEYS <= set(f)
        assert f["layer"] in LAYERS and f["severity"] in ("info", "warning", "error", "critical")
        assert f["confidence"] in ("low", "medium", "high")
        assert f["category"] is None or f["category"] in CATEGORIES
        assert all(isinstance(e, str) for e in f["evidence"]) and f["remedy"]
    assert doc["verdict"]["category"] == "context_or_driver" and doc["verdict"]["summary"]


def test_json_round_trips_for_diff_and_fleet():
    report = seed_report()
    back = report_from_json(json.loads(render_json(report)))
    assert back.verdict.category == report.verdict.category
    assert [f.id for f in back.findings] == [f.id for f in report.findings]
    assert back.facts.value("driver.version") == "535.129.03"


def test_text_without_tty_has_no_escape_codes_and_all_parts():
    out = render_text(seed_report(), color=False, width=100)
    assert "\x1b[" not in out
    assert all(len(line) <= 100 and line == line.rstrip() for line in out.splitlines())
    for layer in LAYERS:
        assert re.search(rf"\| {layer}\s+\| (OK|WARN|FAIL|UNKNOWN)", out), layer
    assert "[ERROR] DRV003" in out and "remedy:" in out and "evidence: kernel.release" in out
    assert "Verdict" in out and "context_or_driver" in out
    assert out.isascii() or "…" in out  # plain ASCII boxes; only shortened values use an ellipsis


def test_text_with_colour_uses_escape_codes():
    assert "\x1b[" in render_text(seed_report(), color=True)


def test_text_of_an_empty_report():
    from oomdoctor.facts import FactSet

    out = render_text(diagnose(FactSet(), {}), color=False)
    assert "No findings." in out and "no facts read" in out and "unknown" in out


def test_html_is_self_contained_and_complete():
    html = render_html(seed_report())
    assert not re.search(r"""src\s*=\s*["']?(https?:)?//""", html, re.I)
    assert not re.search(r"""<link[^>]+href\s*=\s*["']?(https?:)?//""", html, re.I)
    assert "@import" not in html and "<script" not in html.lower()
    assert 'id="verdict"' in html and "context_or_driver" in html
    for layer in LAYERS:
        assert f'id="layer-{layer}"' in html
    assert 'href="#finding-DRV003"' in html and 'id="finding-DRV003"' in html
    assert "Why (DRV003)" in html  # the check's documentation travels with the report
    assert 'class="badge fail"' in html


def test_html_escapes_fact_values():
    r = diagnose(make_facts(torch__error="<script>alert(1)</script> boom"), {})
    html = render_html(r)
    assert "<script>alert(1)" not in html and "&lt;script&gt;" in html


def test_long_reasons_and_values_are_cut_between_words_in_narrow_and_wide_text():
    """Walkthrough (session 26): doctor's text cut reasons mid-word ("driver librarie…", "OOMKil…", "versi…").
    A cut now falls between words, marked with " …", in a narrow (80) and a wide (160) terminal."""
    from pathlib import Path

    from oomdoctor.collectors import machine

    root = Path(__file__).resolve().parents[1]
    for bundle in ("old_driver_new_torch", "cgroup_oom_137", "hami_slice", "mig_slice"):
        report = diagnose(machine.collect_bundle(str(root / "tests/fixtures/bundles" / bundle), []), {"source": "bundle"})
        for width in (80, 160):
            out = render_text(report, width=width)
            assert "…" in out  # there is something long to cut
            # an ellipsis right after a letter or digit is a word cut in two
            assert not re.search(r"[A-Za-z0-9]…", out), (bundle, width, re.findall(r".{30}[A-Za-z0-9]…", out))


def test_cutting_text_keeps_whole_words():
    from oomdoctor.units import cut_words

    assert cut_words("a b c", 10) == "a b c"
    assert cut_words("Please update your GPU driver by downloading it", 30) == "Please update your GPU …"
    assert len(cut_words("x" * 50, 20)) == 20 and cut_words("x" * 50, 20).endswith("…")  # one long word: cut it
    assert cut_words("  folded \n  spaces  ", 40) == "folded spaces"
