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
