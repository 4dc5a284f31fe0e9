"""GIVEN a run killed by SIGKILL without a CUDA OOM WHEN `report` gives its verdict THEN host memory is the firm
answer only with evidence in the recording (the kernel log naming the job, the cgroup's oom_kill count rising,
memory at the cgroup's limit or the machine's RAM used up); else it is one possible cause, with how to check.

A walkthrough (session 26): a bare SIGKILL (a user's `kill -9`, a preemption, a time limit send the same) was
reported as host_oom "(likely)" with no figure, its steps were lost, and the report said "(exit -9)" in one place
and "exit 137" in another; the host-memory lead of a run without steps said "grew 1.46 GiB from 94 MiB to 1.39 GiB"."""

from __future__ import annotations

import json

import pytest

from oomdoctor.analysis.timeline import analyse
from oomdoctor.facts.recording import RunFiles
from oomdoctor.render.record import render_html, render_text
from oomdoctor.units import format_bytes

MiB = 2**20
GiB = 2**30
KILLED = {"returncode": -9, "signal": "SIGKILL", "start": 0.0}


def _jsonl(rows: list[dict]) -> str:
    return "\n".join(json.dumps(r) for r in rows) + "\n"


def _timeline(steps: int = 12) -> str:
    rows = [{"kind": "header", "schema_version": 1, "format": "oomdoctor-record", "pid": 7, "label": "pid7", "t": 0}]
    for s in range(1, steps + 1):
        rows.append({"kind": "step", "t": float(s), "step": s, "rss": 900 * MiB})
        rows.append({"kind": "sample", "t": s + 0.5, "step": s, "rss": 900 * MiB, "cgroup_current": 3 * GiB})
    return _jsonl(rows)


def _outside(kills: tuple[int, int] | None = (0, 0), current: float = 3 * GiB, limit: float | None = 16 * GiB,
             available: float = 20 * GiB, rss: float = 900 * MiB) -> str:
    rows = [{"kind": "header", "label": "outside", "t": 0}]
    for i in range(10):
        rec = {"kind": "sample", "t": i + 0.2, "tree_rss": rss * (0.5 + i / 18), "cgroup_current": current * (0.5 + i / 18),
               "mem_total": 32 * GiB, "mem_available": available}
        if limit is not None:
            rec["cgroup_limit"] = limit
        if kills is not None:
            rec["cgroup_oom_kill"] = kills[0] if i < 9 else kills[1]
        rows.append(rec)
    return _jsonl(rows)


def _analyse(meta: dict, outside: str | None) -> dict:
    return analyse(RunFiles(path="run", meta={**KILLED, **meta}, timelines={"pid7": _timeline()}, outside=outside))


def test_a_bare_sigkill_names_host_memory_as_one_possible_cause_and_how_to_check():
    v = _analyse({"kernel_oom_kill": False}, _outside())["verdict"]
    assert v["category"] == "host_oom" and v["severity"] == "error" and v["confidence"] == "low"
    assert "one possible cause" in v["summary"] and "(likely)" not in v["summary"]
    assert any("oom_kill count did not rise" in e for e in v["evidence"])
    assert any("no OOM kill of the job's processes" in e for e in v["evidence"])
    fixes = " ".join(v["fixes"])
    assert "dmesg" in fixes and "memory.events" in fixes and "kubectl describe pod" in fixes


def test_unread_evidence_is_said_to_be_unknown():
    v = _analyse({"kernel_log": "dmesg denied: Operation not permitted"}, _outside(kills=None, limit=None))["verdict"]
    assert v["confidence"] == "low"
    said = "\n".join(v["evidence"])
    assert "dmesg denied" in said and "oom_kill count was not recorded" in said and "no memory limit" in said


@pytest.mark.parametrize(("meta", "outside", "says"), [
    ({"kernel_oom_kill": False}, {"kills": (0, 1)}, "oom_kill count rose from 0 to 1"),
    ({"kernel_oom_kill": False}, {"rss": 15.5 * GiB, "current": 15.8 * GiB}, "RSS peaked at 15.50 GiB of the cgroup's 16.00 GiB limit (97%)"),
    ({"kernel_oom_kill": False}, {"available": 200 * MiB}, "available RAM fell to 200.00 MiB"),
    ({"kernel_oom_kill": True}, {}, "kernel log names a process of the job"),
])
def test_evidence_of_memory_running_out_keeps_host_oom_firm(meta, outside, says):
    v = _analyse(meta, _outside(**outside))["verdict"]
    assert v["category"] == "host_oom" and v["confidence"] == "high"
    assert "memory ran out" in v["summary"] and "possible" not in v["summary"]
    assert any(says in e for e in v["evidence"]), v["evidence"]


def test_the_steps_before_the_kill_and_the_memory_figure_are_in_the_verdict():
    v = _analyse({"kernel_oom_kill": False}, _outside())["verdict"]
    assert any("last step recorded before the kill was step 12" in e for e in v["evidence"])
    assert any("at most 900.00 MiB" in e for e in v["evidence"])


def test_one_wording_for_the_exit_of_a_killed_job():
    doc = _analyse({"kernel_oom_kill": False}, _outside())
    doc["meta"]["argv"] = ["python", "train.py"]
    for out in (render_text(doc), render_html(doc)):
        assert "exit -9" not in out and "returncode" not in out
        assert "killed by SIGKILL (exit 137 in a shell)" in out


def test_the_host_lead_of_a_run_without_steps_adds_up():
    # samples only (no step markers), growth faster at the end: the fitted trend's growth differs from last - first
    rows = [{"kind": "header", "schema_version": 1, "format": "oomdoctor-record", "pid": 7, "label": "pid7", "t": 0}]
    for i in range(60):
        rows.append({"kind": "sample", "t": i * 0.1, "rss": int((100 + 10 * i + 0.4 * i * i) * MiB), "rss_file": 0})
    doc = analyse(RunFiles(path="run", meta={"returncode": 0}, timelines={"pid7": _jsonl(rows)}))
    hl = doc["processes"][0]["host_leak"]
    assert hl["leak"]
    line = doc["verdict"]["evidence"][0]
    assert f"from {format_bytes(hl['first'])} to {format_bytes(hl['last'])} (+{format_bytes(hl['last'] - hl['first'])}" \
        in line, line


def test_the_cgroups_use_near_its_limit_is_a_hint_not_proof():
    """The cgroup's use counts the page cache, which the kernel takes back before it kills: a job reading files
    sits near its limit without running out. Only the job's RSS near the limit is evidence."""
    v = _analyse({"kernel_oom_kill": False}, _outside(current=15.8 * GiB))["verdict"]
    assert v["confidence"] == "low"
    assert any(e.startswith("hint: the cgroup's use (page cache included)") for e in v["evidence"])
    assert any("RSS peaked at 900.00 MiB" in e and e.startswith("not seen") for e in v["evidence"])


def test_a_summed_rss_above_the_cgroups_use_is_not_proof():
    """Forked DataLoader workers share their parent's pages; summed over the tree they count many times (a review:
    46 GiB summed in a cgroup using 30 GiB of 48 GiB). The figure is never more than the cgroup's use."""
    v = _analyse({"kernel_oom_kill": False}, _outside(rss=46 * GiB / (0.5 + 9 / 18), current=30 * GiB / (0.5 + 9 / 18),
                                                      limit=48 * GiB))["verdict"]
    assert v["confidence"] == "low", v["evidence"]
    assert any("peaked at 30.00 GiB of the cgroup's 48.00 GiB limit" in e and e.startswith("not seen")
               for e in v["evidence"]), v["evidence"]


def test_the_oom_kill_count_is_compared_within_one_source():
    """The outside sampler and a process may read different cgroups (counts 5 and 0): no rise across them."""
    rows = [{"kind": "header", "pid": 7, "label": "pid7", "t": 0}] + [
        {"kind": "sample", "t": 0.1 + i / 100, "rss": 900 * MiB, "cgroup_oom_kill": 0} for i in range(5)]
    doc = analyse(RunFiles(path="run", meta={**KILLED, "kernel_oom_kill": False}, timelines={"pid7": _jsonl(rows)},
                           outside=_outside(kills=(5, 5))))
    v = doc["verdict"]
    assert v["confidence"] == "low", v["evidence"]
    assert not any("rose" in e for e in v["evidence"])


@pytest.mark.parametrize(("meta", "confidence", "says"), [
    ({"kernel_oom_kills": [{"pid": 7, "comm": "python", "pid_match": True, "comm_match": True}]}, "high",
     "kernel log names a process of the job"),
    ({"kernel_oom_kills": [{"pid": 7, "comm": "postgres", "pid_match": True, "comm_match": False}]}, "low",
     "no OOM kill of the job's processes"),
    ({"kernel_oom_kills": []}, "low", "no OOM kill of the job's processes"),
    ({"kernel_oom_kills": [{"pid": 99, "comm": "python", "pid_match": False, "comm_match": True, "memcg_match": True}],
      "pid_namespace": "other"}, "high", "kernel log names a process of the job"),
    ({"kernel_oom_kills": [{"pid": 99, "comm": "python", "pid_match": False, "comm_match": True}],
      "pid_namespace": "other", "cgroup_oom_kill_rose": True}, "high", "kernel log names a process of the job"),
    # a name alone in a container: another container's `python` has it too
    ({"kernel_oom_kills": [{"pid": 99, "comm": "python", "pid_match": False, "comm_match": True}],
      "pid_namespace": "other"}, "low", "only the name matches the job's processes"),
    ({"kernel_oom_kills": [], "pid_namespace": "other"}, "low", "unknown: the kernel log was not read (the kernel "
                                                                "log names pids of another pid namespace"),
])
def test_the_kill_lines_kept_by_the_recorder_decide(meta, confidence, says):
    v = _analyse(meta, _outside())["verdict"]
    assert v["confidence"] == confidence
    assert any(says in e for e in v["evidence"]), v["evidence"]


def test_an_old_recording_is_not_named_by_an_internal_session():
    v = _analyse({}, _outside())["verdict"]
    assert any("a recording by an older oomdoctor" in e for e in v["evidence"]), v["evidence"]


def test_the_low_confidence_summary_says_what_was_seen_and_what_was_not_read():
    unread = _analyse({"kernel_log": "dmesg denied"}, _outside(kills=None, limit=None, available=20 * GiB))["verdict"]
    assert "shows no OOM kill and no memory limit reached" not in unread["summary"], unread["summary"]
    assert "not read" in unread["summary"]
    seen = _analyse({"kernel_oom_kill": False}, _outside())["verdict"]
    assert "the recording shows no OOM kill" in seen["summary"], seen["summary"]


def test_a_recording_cut_short_with_firm_evidence_is_a_host_oom():
    """`record` died with the job (run.json has no exit status): the memory evidence still decides."""
    doc = analyse(RunFiles(path="run", meta={"start": 0.0}, timelines={"pid7": _timeline()},
                           outside=_outside(kills=(0, 1))))
    v = doc["verdict"]
    assert v["category"] == "host_oom" and v["confidence"] == "high", v
    assert "cut short" in v["summary"] and "oom_kill count rose from 0 to 1" in "\n".join(v["evidence"])


def test_a_recording_cut_short_without_evidence_says_the_end_is_unknown():
    doc = analyse(RunFiles(path="run", meta={"start": 0.0}, timelines={"pid7": _timeline()}, outside=_outside()))
    v = doc["verdict"]
    assert "no OOM and no steady growth recorded" != v["summary"]
    assert "cut short" in v["summary"] and "unknown" in v["summary"], v["summary"]
    assert doc["ended"] is None


def test_the_end_is_in_the_analysis_for_json():
    doc = _analyse({"kernel_oom_kill": False}, _outside())
    assert doc["ended"] == "killed by SIGKILL (exit 137 in a shell)"


def test_a_summed_rss_is_named_as_a_sum_where_it_is_shown():
    v = _analyse({"kernel_oom_kill": False}, _outside(rss=46 * GiB, current=30 * GiB, limit=64 * GiB))["verdict"]
    line = next(e for e in v["evidence"] if e.startswith("host memory of the job"))
    assert "summed over its processes" in line and "an overcount" in line, line
    assert any("cut to the cgroup's use" in e for e in v["evidence"]), v["evidence"]


@pytest.mark.parametrize(("anon", "confidence"), [(15.2 * GiB, "high"), (4 * GiB, "low")])
def test_the_cgroups_memory_not_backed_by_files_decides_where_recorded(anon, confidence):
    """memory.stat's anon + shmem counts each page once and leaves out the page cache: better than any RSS sum."""
    rows = [{"kind": "header", "label": "outside", "t": 0}] + [
        {"kind": "sample", "t": i + 0.2, "tree_rss": 40 * GiB, "cgroup_current": 15.9 * GiB, "cgroup_limit": 16 * GiB,
         "cgroup_anon": anon, "cgroup_oom_kill": 0} for i in range(5)]
    v = _analyse({"kernel_oom_kill": False}, _jsonl(rows))["verdict"]
    assert v["confidence"] == confidence, v["evidence"]
    assert any(f"not backed by files (anonymous and shared) peaked at {format_bytes(anon)}" in e
               for e in v["evidence"]), v["evidence"]
