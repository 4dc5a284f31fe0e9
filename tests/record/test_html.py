"""The HTML report: self-contained, and opened in headless Chromium without console errors."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from oomdoctor.analysis import timeline
from oomdoctor.collectors import rundir
from oomdoctor.render import record as render

from .synth import MiB, write_run

GiB = 1 << 30
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--enable-logging=stderr", "--v=0"]

OOM = {"source": "observer", "requested": GiB, "device": 0, "device_limit": 4 * GiB,
       "stats": {"allocated_bytes.all.current": GiB + GiB // 3, "reserved_bytes.all.current": 4 * GiB,
                 "inactive_split_bytes.all.current": 2 * GiB, "num_alloc_retries": 2},
       "snapshot": {"history": True, "segments": {"segments": 195, "largest_free_block": 14 * MiB},
                    "largest_live": [{"size": 7 * MiB, "source": "train.py:12 in <module>", "stack": ["a", "b"]}],
                    "live_by_source": [{"source": "train.py:12 in <module>", "bytes": GiB, "blocks": 195}],
                    "trace_peak": {"allocated": 3 * GiB, "events": 1000, "live_by_source": [
                        {"source": "train.py:10 <script>alert(1)</script>", "bytes": 2 * GiB, "blocks": 500}]}}}


@pytest.fixture()
def report_html(tmp_path) -> str:
    run = write_run(tmp_path / "run", leak_per_step=16 * MiB, oom=OOM)
    write_run(run, label="rank1", rank=1, seed=3)
    return render.render_html(timeline.analyse(rundir.load(run)))


def test_page_is_self_contained_and_escaped(report_html):
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", report_html)
    assert "<script" not in report_html  # user strings (source lines) are escaped
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in report_html
    assert "fragmentation" in report_html  # the verdict at the OOM: the cache held the bytes
    assert report_html.count("<svg") >= 4


def test_text_and_json_render(tmp_path):
    run = write_run(tmp_path / "run", leak_per_step=16 * MiB)
    doc = timeline.analyse(rundir.load(run))
    text = render.render_text(doc)
    assert "leak_in_code" in text and "LEAK" in text
    js = render.render_json(doc)
    assert '"schema_version": 1' in js and '"series"' not in js


def _console_messages(html_path: Path) -> list[str]:
    with tempfile.TemporaryDirectory() as profile:
        proc = subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={profile}", "--dump-dom", html_path.as_uri()],
                              capture_output=True, text=True, timeout=120)
    assert "</html>" in proc.stdout or "</body>" in proc.stdout, proc.stderr[-2000:]
    return [line for line in proc.stderr.splitlines() if ":CONSOLE" in line]


def test_page_parses_strictly_and_opens_in_chromium_without_console_errors(report_html, tmp_path):
    """The strict HTML5 parse runs everywhere; where Chromium is installed (CI installs it), the page is
    also opened in it and must log nothing to the console."""
    from test_qa_contracts import strict_html5_parse

    strict_html5_parse(report_html)
    if CHROMIUM is None:
        return
    # the capture itself must work: a page with a console error is caught
    canary = tmp_path / "canary.html"
    canary.write_text("<html><body><script>console.error('canary'); nope();</script></body></html>")
    assert any("canary" in m for m in _console_messages(canary))
    page = tmp_path / "report.html"
    page.write_text(report_html, encoding="utf-8")
    assert _console_messages(page) == []


def test_cli_report_writes_html(tmp_path):
    run = write_run(tmp_path / "run", leak_per_step=16 * MiB)
    out = tmp_path / "r.html"
    proc = subprocess.run([sys.executable, "-m", "oomdoctor", "report", str(run), "--format", "html", "-o", str(out)],
                          capture_output=True, text=True, timeout=120,
                          env={"PYTHONPATH": str(Path(__file__).resolve().parents[2] / "src"), "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 1  # a leak is a warning
    assert out.read_text().startswith("<!doctype html>")
    bad = subprocess.run([sys.executable, "-m", "oomdoctor", "report", str(tmp_path / "nope")],
                         capture_output=True, text=True, timeout=120,
                         env={"PYTHONPATH": str(Path(__file__).resolve().parents[2] / "src"), "PATH": "/usr/bin:/bin"})
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "no such run directory" in bad.stderr


def test_report_runs_doctor_checks_on_env_json_and_survives_junk(tmp_path):
    env = {"PYTHONPATH": str(Path(__file__).resolve().parents[2] / "src"), "PATH": "/usr/bin:/bin"}
    run = write_run(tmp_path / "run")
    (run / "env.json").write_text('{"schema_version": 1, "facts": {"not.a.key": {"value": 1}, "x": 3}}')
    proc = subprocess.run([sys.executable, "-m", "oomdoctor", "report", str(run), "--format", "json"],
                          capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["environment_findings"] == []
