"""GIVEN `record` inside a container (its own pid namespace: the kernel log's pids are the host's) WHEN the kernel log
holds an OOM kill, after the job's start, of a process with a name the job's processes have (`python`) THEN the kill
is put on the job only with something that ties it to the job: the job's cgroup's `oom_kill` count rose while it
ran, or the kill line's cgroup (`task_memcg`, `oom_memcg`) is the job's own. A name alone is "possible", low.

Found in review: a job that exited 1 with a ValueError on a node where another pod's `python` was OOM-killed got
`host_oom`, error, high confidence. Calling a job's failure a host OOM because another process was killed is worse
than missing one.
"""

from __future__ import annotations

import pytest

from oomdoctor.analysis import kill, postmortem
from oomdoctor.parsers.kernlog import parse_oom_kills

from .synth import fake_dmesg as _fake_dmesg

MINE = "/kubepods/burstable/podMINE/ctr1"
OTHER = "/kubepods/burstable/podOTHER/abc"


def _lines(t: float, pid: int = 873311, comm: str = "python", task_memcg: str | None = OTHER,
           oom_memcg: str | None = "/kubepods/burstable/podOTHER") -> list[str]:
    kill_line = (f"[{t:12.6f}] Memory cgroup out of memory: Killed process {pid} ({comm}) total-vm:9000000kB, "
                 "anon-rss:8000000kB, file-rss:0kB, shmem-rss:0kB, UID:1001 pgtables:100kB oom_score_adj:0")
    if task_memcg is None:
        return [kill_line]
    memcg = f"oom_memcg={oom_memcg}," if oom_memcg else ""
    return [f"[{t:12.6f}] oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=x,mems_allowed=0,{memcg}"
            f"task_memcg={task_memcg},task={comm},pid={pid},uid=1001", kill_line]


def _entry(**kw) -> dict:
    text = _lines(100.0, task_memcg=None)[0]
    return {"pid": 873311, "comm": "python", "uptime": 100.0, "anon_rss_kb": 8000000, "file_rss_kb": 0,
            "shmem_rss_kb": 0, "pid_match": None, "comm_match": True, "text": text, **kw}


def _verdict(meta: dict, processes: list | None = None) -> dict:
    meta = {"returncode": 1, "argv": ["python", "train.py"], "pid_namespace": "other", "command_pid": 1, **meta}
    return postmortem.verdict(processes or [], [], meta, {}, kill.evidence(meta, {}))


# --- what `report` makes of the kill lines kept ---


def test_a_name_alone_in_another_pid_namespace_is_no_firm_host_oom():
    """The reviewer's case: a recording whose kill line matched by name only (as recorders before this one kept)."""
    v = _verdict({"kernel_oom_kills": [_entry()], "kernel_oom_kill": True})
    assert not (v["category"] == "host_oom" and v["confidence"] == "high"), v
    assert v["severity"] != "error", v
    assert "killed" not in v, v


def test_a_name_alone_is_said_as_one_possible_cause_with_low_confidence():
    v = _verdict({"kernel_oom_kills": [_entry(memcg_match=None)], "cgroup_oom_kill_rose": None})
    assert v["category"] == "host_oom" and v["confidence"] == "low" and v["severity"] == "warning", v
    assert "one possible cause" in v["summary"] and "python" in v["summary"], v["summary"]
    assert "not confirmed" in v["summary"], v["summary"]


def test_a_kill_line_in_the_jobs_own_cgroup_is_the_jobs():
    v = _verdict({"kernel_oom_kills": [_entry(memcg_match=True)], "cgroup_oom_kill_rose": None})
    assert v["category"] == "host_oom" and v["confidence"] == "high" and v["severity"] == "error", v
    assert v["summary"].startswith("a process of the job (pid 873311, python)"), v["summary"]


def test_the_jobs_oom_kill_count_rising_ties_the_named_kill_to_the_job():
    v = _verdict({"kernel_oom_kills": [_entry(memcg_match=None)], "cgroup_oom_kill_rose": True})
    assert v["category"] == "host_oom" and v["confidence"] == "high", v


@pytest.mark.parametrize("meta", [
    {"kernel_oom_kills": [_entry(memcg_match=False)], "cgroup_oom_kill_rose": None},   # another cgroup's process
    {"kernel_oom_kills": [_entry(memcg_match=None)], "cgroup_oom_kill_rose": False},   # the job's count stayed
    {"kernel_oom_kills": [_entry(memcg_match=False)], "cgroup_oom_kill_rose": True},   # a rise, but not this line
])
def test_evidence_against_leaves_the_named_kill_off_the_job(meta):
    v = _verdict(meta)
    assert v["category"] != "host_oom" and "killed" not in v, v


def test_a_sigkill_with_a_name_alone_is_not_firm():
    meta = {"returncode": -9, "signal": "SIGKILL", "pid_namespace": "other", "kernel_oom_kills": [_entry()]}
    ev = kill.evidence(meta, {})
    assert not ev["firm"], ev
    v = postmortem.verdict([], [], meta, {}, ev)
    assert v["confidence"] == "low", v


# --- what the recorder keeps ---


def test_the_kill_lines_cgroups_are_read():
    got = parse_oom_kills(_lines(100.0))
    assert got[0]["task_memcg"] == OTHER and got[0]["oom_memcg"] == "/kubepods/burstable/podOTHER"
    # a global OOM has no oom_memcg; a constraint line of another pid is not put on the kill line after it
    got = parse_oom_kills(_lines(100.0, oom_memcg=None) + _lines(101.0, pid=5, task_memcg=None))
    assert got[0]["task_memcg"] == OTHER and got[0]["oom_memcg"] is None
    assert got[1]["task_memcg"] is None
    mixed = [_lines(100.0, pid=9)[0], _lines(100.0, pid=5, task_memcg=None)[0]]
    assert parse_oom_kills(mixed)[0]["task_memcg"] is None


def test_the_reviewers_container_case_is_not_the_jobs(tmp_path, monkeypatch):
    """Another pod's `python` killed after the start; the job (pid 1 in its container) is in podMINE."""
    from oomdoctor.injob.record import kernel_kills

    _fake_dmesg(tmp_path, monkeypatch, _lines(100.0))
    seen = {1: {"python"}, 57: {"python", "pt_data_worker"}}
    got = kernel_kills.kernel_oom_kills(seen, 50.0, "other", cgroup_path=MINE, oom_kill_rose=False)
    assert got.get("kernel_oom_kill") is not True, got
    assert got["kernel_oom_kills"][0]["memcg_match"] is False
    meta = {"returncode": 1, "argv": ["python", "train.py"], "pid_namespace": "other", "command_pid": 1, **got,
            "cgroup_oom_kill_rose": False}
    v = postmortem.verdict([], [], meta, {}, kill.evidence(meta, {}))
    assert v["category"] != "host_oom", v


@pytest.mark.parametrize(("task_memcg", "oom_memcg", "matches"), [
    (MINE, "/kubepods/burstable/podMINE", True),          # the killed task in the job's cgroup
    (MINE + "/sub", None, True),                          # in a cgroup below the job's
    (OTHER, MINE, True),                                  # the OOM inside the job's cgroup: its victim is in it
    ("/kubepods/burstable/podMINE/ctr10", None, False),   # a sibling whose name starts with the job's
    (OTHER, "/kubepods/burstable", False),                # a parent's OOM: the victim may be anyone below it
])
def test_a_kill_lines_cgroup_is_compared_with_the_jobs(tmp_path, monkeypatch, task_memcg, oom_memcg, matches):
    from oomdoctor.injob.record import kernel_kills

    _fake_dmesg(tmp_path, monkeypatch, _lines(100.0, task_memcg=task_memcg, oom_memcg=oom_memcg))
    got = kernel_kills.kernel_oom_kills({1: {"python"}}, 50.0, "other", cgroup_path=MINE)
    assert got["kernel_oom_kills"][0]["memcg_match"] is matches
    assert (got.get("kernel_oom_kill") is True) is matches, got


@pytest.mark.parametrize("job_path", [None, "/"])
def test_a_cgroup_namespaces_root_path_ties_nothing(tmp_path, monkeypatch, job_path):
    """Inside a cgroup namespace /proc/self/cgroup says `0::/`: every kill line's cgroup is "below" it."""
    from oomdoctor.injob.record import kernel_kills

    _fake_dmesg(tmp_path, monkeypatch, _lines(100.0, task_memcg=OTHER))
    got = kernel_kills.kernel_oom_kills({1: {"python"}}, 50.0, "other", cgroup_path=job_path)
    assert got["kernel_oom_kills"][0]["memcg_match"] is None
    assert "kernel_oom_kill" not in got and "nothing else ties it to the job" in got["kernel_log"], got
    rose = kernel_kills.kernel_oom_kills({1: {"python"}}, 50.0, "other", cgroup_path=job_path, oom_kill_rose=True)
    assert rose["kernel_oom_kill"] is True


def test_the_jobs_cgroup_path_is_recorded_at_the_start(tmp_path):
    from oomdoctor.injob.record import kernel_kills

    (tmp_path / "self").mkdir()
    (tmp_path / "self" / "cgroup").write_text(f"0::{MINE}\n")
    assert kernel_kills.job_cgroup_path(str(tmp_path)) == MINE
    # cgroup v1: the memory controller's hierarchy is the one the kill line names
    (tmp_path / "self" / "cgroup").write_text("12:cpu,cpuacct:/docker/x\n4:memory:/docker/abc\n0::/\n")
    assert kernel_kills.job_cgroup_path(str(tmp_path)) == "/docker/abc"
    assert kernel_kills.job_cgroup_path(str(tmp_path / "none")) is None
    assert "cgroup_path" in kernel_kills.start_marks()
