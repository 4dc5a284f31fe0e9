"""GIVEN a recorded run WHEN host memory (RSS) grew step after step and the GPU allocator did not THEN `report`
says so, as a lead and not a failure (exit 0: RSS also counts file-backed pages, a review found memory-mapped
datasets flagged), and says nothing of the kind for a run whose host memory did not keep growing.

A new user's walkthrough (session 25) recorded a job keeping 32 MiB of CPU tensors per step: the verdict was "no
OOM and no steady growth recorded". CPU runs: validation/record_host/ (docs/validation/record.md)."""

from __future__ import annotations

from oomdoctor.analysis.postmortem import verdict


def process(host_leak: dict | None) -> dict:
    return {"label": "pid1", "name": "pid1", "leak": None, "host_leak": host_leak, "fragmentation": {}, "events": []}


LEAK = {"leak": True, "unit": "step", "rate_per_step": 32 * 2**20, "rate_per_s": 3e8, "slope_bytes": 32 * 2**20,
        "growth_bytes": 1.2e9, "first": 3.7e8, "last": 1.57e9, "confidence": "high"}


def test_host_memory_that_keeps_growing_is_the_verdict():
    v = verdict([process(LEAK)], [], {"exit_code": 0}, {})
    assert v["category"] is None and v["severity"] == "ok" and "32.00 MiB/step" in v["summary"]
    assert "host memory (RSS) grew steadily" in v["summary"] and v["fixes"]
    assert "host RSS grew" in v["evidence"][0]


def test_no_host_verdict_without_steady_growth():
    for hl in (None, {**LEAK, "leak": False}):
        v = verdict([process(hl)], [], {"exit_code": 0}, {})
        assert v["severity"] == "ok" and "host memory" not in v["summary"]


# session 26: a GPU job reading an np.memmap dataset was flagged (validation/record_host_gpu/gpu_memmap.py); records
# now carry the file-backed pages (RssFile), and the lead is judged on RSS less those
import json  # noqa: E402
import sys  # noqa: E402

import pytest  # noqa: E402

from oomdoctor.analysis.timeline import analyse  # noqa: E402
from oomdoctor.facts.recording import RunFiles  # noqa: E402

MiB = 2**20


def timeline(rss_file_grows: bool | None) -> str:
    rows = [{"kind": "header", "schema_version": 1, "format": "oomdoctor-record", "pid": 7, "label": "pid7", "t": 0}]
    for step in range(40):
        rec = {"kind": "step", "t": float(step), "step": step + 1, "rss": (900 + 32 * step) * MiB}
        if rss_file_grows is not None:
            rec["rss_file"] = (100 + (32 * step if rss_file_grows else 0)) * MiB
        rows.append(rec)
    return "\n".join(json.dumps(r) for r in rows) + "\n"


def run_of(text: str) -> RunFiles:
    return RunFiles(path="run", meta={"returncode": 0}, timelines={"pid7": text})


@pytest.mark.parametrize(("file_grows", "lead", "measure"), [(True, False, "rss_anon"), (False, True, "rss_anon"),
                                                             (None, True, "rss")])
def test_file_backed_pages_are_not_a_host_leak(file_grows, lead, measure):
    out = analyse(run_of(timeline(file_grows)))
    hl = out["processes"][0]["host_leak"]
    assert bool(hl and hl.get("leak")) is lead and hl["measure"] == measure
    said = "grew steadily" in out["verdict"]["summary"]
    assert said is lead
    if lead and measure == "rss_anon":
        assert "not backed by files" in out["verdict"]["summary"] and "memory-mapped" not in out["verdict"]["summary"]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RssFile is Linux's")
def test_file_backed_reading_counts_a_mapped_file(tmp_path):
    import mmap

    from oomdoctor.injob.record.probes import host_memory

    def host_rss_file():
        rss, file_backed = host_memory()
        assert isinstance(rss, int) and rss >= file_backed
        return file_backed

    before = host_rss_file()
    assert isinstance(before, int)
    f = tmp_path / "data"
    f.write_bytes(b"\1" * (64 * MiB))
    with open(f, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as m:
        total = sum(m[i] for i in range(0, len(m), 4096))  # touch every page
        after = host_rss_file()
    assert total == 64 * MiB // 4096 and after - before >= 48 * MiB


def test_a_strangers_odd_readings_give_no_infinity_and_no_injected_figure():
    """Review: rss 1e308 beside rss_file -1e308 made `report --format json` print Infinity (not JSON)."""
    rows = [{"kind": "header", "schema_version": 1, "format": "oomdoctor-record", "pid": 7, "label": "pid7", "t": 0}]
    for step in range(40):
        rows.append({"kind": "step", "t": float(step), "step": step + 1, "rss": 1e308 if step > 20 else 900 * MiB,
                     "rss_file": -1e308, "rss_anon": 5 * MiB * step})
    out = analyse(run_of("\n".join(json.dumps(r) for r in rows) + "\n"))
    text = json.dumps(out, default=str)
    assert "Infinity" not in text and "NaN" not in text
    p = out["processes"][0]
    assert p["host_leak"] is None or p["host_leak"]["measure"] == "rss"  # the file's own rss_anon was not used


def test_the_sigkill_verdict_names_what_grew():
    out = analyse(RunFiles(path="run", meta={"returncode": 137, "signal": "SIGKILL"}, timelines={"pid7": timeline(False)}))
    assert any("memory not backed by files grew" in e for e in out["verdict"]["evidence"])
