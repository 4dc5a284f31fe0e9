"""The report's tables agree with its verdict: host growth has its own column (HTML), and no empty heading (text)."""

from __future__ import annotations

import json
import re

from oomdoctor.analysis.timeline import analyse
from oomdoctor.facts.recording import RunFiles
from oomdoctor.render.record import render_html, render_text

MiB = 1 << 20


def _jsonl(rows):
    return "".join(json.dumps(r) + "\n" for r in rows)


def _host_leak_run():
    """A CPU-only job whose host memory grows 8 MiB a step (no allocator figures: no GPU growth to show)."""
    rows = [{"kind": "header", "schema_version": 1, "format": "oomdoctor-record", "pid": 7, "label": "pid7", "t": 0}]
    for s in range(1, 41):
        rows.append({"kind": "step", "t": s * 0.1, "step": s, "rss": (200 + 8 * s) * MiB, "rss_file": 0})
    return analyse(RunFiles(path="run", meta={"returncode": 0}, timelines={"pid7": _jsonl(rows)}))


def test_the_processes_table_shows_the_host_growth_the_verdict_names():
    doc = _host_leak_run()
    assert "host memory" in doc["verdict"]["summary"] and "8.00 MiB/step" in doc["verdict"]["summary"]
    page = render_html(doc)
    table = re.sub(r"<[^>]+>", " ", page[page.index("<h2>Processes"):page.index("</table>", page.index("<h2>Processes"))])
    assert "host growth across steps" in table
    assert "leak" in table and "8.00 MiB/step" in table, table


def test_no_empty_largest_live_allocations_heading():
    rows = [{"kind": "header", "schema_version": 1, "format": "oomdoctor-record", "pid": 7, "label": "pid7", "t": 0},
            {"kind": "step", "t": 1, "step": 1, "allocated": 100 * MiB, "reserved": 200 * MiB}]
    oom = {"file": "oom-pid7-1.json", "kind": "oom", "label": "pid7", "pid": 7, "t": 2, "step": 1, "fatal": True,
           "source": "exception", "requested": 2 << 30, "device_limit": 4 << 30, "snapshot": {}}
    doc = analyse(RunFiles(path="run", meta={"returncode": 1}, timelines={"pid7": _jsonl(rows)}, evidence=(oom,)))
    assert doc["ooms"] and not doc["ooms"][-1]["largest_live"]
    text = render_text(doc)
    assert "largest live allocations" not in text, text
    assert not text.rstrip().endswith(":")
