"""GIVEN the kernel log's OOM kill of a pid the job held at some time WHEN the line's time stamp falls outside the time
the job held that pid THEN it is not the job's, whatever name the line gives: the pid may have been reused by another
program since (pid_max may be 32768). Inside that time the pid is the job's and the name is only more evidence.

Found in review: a DataLoader worker's pid, seen early in a run, was later reused by another job's worker; its kill
line (`pt_data_worker`, a PyTorch thread name) was put on a clean exit-0 run as `host_oom`. And the sampler thread,
still running after its join timed out, changed what the end of the run read: "the kernel log could not be read
(RuntimeError)".
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from oomdoctor.analysis import kill

from .synth import fake_dmesg as _fake_dmesg

ROOT = Path(__file__).resolve().parents[2]
linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the kernel log and /proc are Linux's")


def _kill_line(t: float | None, pid: int, comm: str) -> str:
    stamp = f"[{t:12.6f}] " if t is not None else ""
    return (f"{stamp}Out of memory: Killed process {pid} ({comm}) total-vm:1kB, anon-rss:2kB, "
            "file-rss:0kB, shmem-rss:0kB, UID:0 pgtables:1kB oom_score_adj:0")


def _judged(got: dict) -> list[int]:
    """The pids `report` puts on the job from what the recorder kept."""
    return [k["pid"] for k in kill.job_kills({**got, "pid_namespace": "init"})]


SEEN = {100: {"python"}, 4242: {"pt_data_worker"}}
LIVES = {100: [(None, 120.0)], 4242: [(55.0, 60.0)]}  # the command to the end; a worker of the first epoch


def test_a_kill_after_the_job_let_the_pid_go_is_not_the_jobs_whatever_its_name(tmp_path, monkeypatch):
    """The reviewer's case: the worker's pid reused by another job's DataLoader worker, killed later."""
    from oomdoctor.injob.record import kernel_kills

    _fake_dmesg(tmp_path, monkeypatch, [_kill_line(100.0, 4242, "pt_data_worker")])
    got = kernel_kills.kernel_oom_kills(SEEN, 50.0, lives=LIVES)
    assert got["kernel_oom_kill"] is False, got
    assert got["kernel_oom_kills"][0]["pid_in_life"] is False
    assert _judged(got) == []


@pytest.mark.parametrize("comm", ["pt_data_worker", "my-renamed-job", "python"])
def test_a_kill_while_the_job_held_the_pid_is_the_jobs_whatever_its_name(tmp_path, monkeypatch, comm):
    from oomdoctor.injob.record import kernel_kills

    _fake_dmesg(tmp_path, monkeypatch, [_kill_line(58.0, 4242, comm)])
    got = kernel_kills.kernel_oom_kills(SEEN, 50.0, lives=LIVES)
    assert got["kernel_oom_kill"] is True and got["kernel_oom_kills"][0]["pid_in_life"] is True, got
    assert _judged(got) == [4242]


def test_a_kill_before_the_job_had_the_pid_is_not_the_jobs(tmp_path, monkeypatch):
    from oomdoctor.injob.record import kernel_kills

    _fake_dmesg(tmp_path, monkeypatch, [_kill_line(52.0, 4242, "pt_data_worker")])
    got = kernel_kills.kernel_oom_kills(SEEN, 50.0, lives=LIVES)
    assert got["kernel_oom_kill"] is False and _judged(got) == []


def test_a_pid_the_job_held_twice_is_not_the_jobs_in_between(tmp_path, monkeypatch):
    """pid_max wraps in a long job: the same pid for a worker of epoch 1 and one of epoch 40, another program's
    between them."""
    from oomdoctor.injob.record import kernel_kills

    lives = {**LIVES, 4242: [(55.0, 60.0), (90.0, 110.0)]}
    _fake_dmesg(tmp_path, monkeypatch, [_kill_line(75.0, 4242, "python"), _kill_line(95.0, 4242, "python")])
    got = kernel_kills.kernel_oom_kills(SEEN, 50.0, lives=lives)
    assert [k["pid_in_life"] for k in got["kernel_oom_kills"]] == [False, True]
    assert got["kernel_oom_kill"] is True and [k["uptime"] for k in kill.job_kills(
        {**got, "pid_namespace": "init"})] == [95.0]


def test_a_kill_line_without_a_time_stamp_is_not_put_on_a_pid(tmp_path, monkeypatch):
    """printk.time=0: when the pid was the job's cannot be told."""
    from oomdoctor.injob.record import kernel_kills

    _fake_dmesg(tmp_path, monkeypatch, [_kill_line(None, 4242, "pt_data_worker")])
    got = kernel_kills.kernel_oom_kills(SEEN, 50.0, lives=LIVES)
    assert got["kernel_oom_kill"] is False and _judged(got) == []


def test_the_sampler_keeps_when_the_job_held_each_pid():
    """A pid found at a sample was born after the last complete look that did not find it, and had died by the
    end of the first look that no longer found it."""
    from oomdoctor.injob.record.launch import PidLives

    lives = PidLives()
    lives.look({1, 2}, 10.0, 10.1)
    lives.look({1, 2, 3}, 11.0, 11.1)
    lives.look({1, 3}, 12.0, 12.1)
    lives.look({1}, 13.0, 13.1)
    lives.look({1, 3}, 14.0, 14.1)   # pid 3 again: reused within the job
    got = lives.spans(ended=20.0)
    assert got[1] == [(None, 20.0)] and got[2] == [(None, 12.1)]
    assert got[3] == [(10.0, 13.1), (13.0, 20.0)]


WORKER_EPOCH = """
import subprocess, sys, time
w = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(1.5)"])  # a DataLoader worker of one epoch
with open(sys.argv[1], "w") as f:
    f.write(str(w.pid))
w.wait()
time.sleep(3.0)  # the next epoch, with workers of its own
"""


@linux
def test_a_clean_run_is_not_given_a_later_kill_of_a_finished_workers_pid(tmp_path):
    """Exit 0, a worker vanished (so the log is read); the kill line of its pid, named `pt_data_worker`, is stamped
    after the worker ended: another program's, not the job's."""
    (tmp_path / "job.py").write_text(WORKER_EPOCH)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "dmesg").write_text(
        f"#!{sys.executable}\nimport time\npid = open({str(tmp_path / 'workerpid')!r}).read().strip()\n"
        "print(f'[{time.monotonic():12.6f}] Out of memory: Killed process {pid} (pt_data_worker) total-vm:1kB, "
        "anon-rss:2kB, file-rss:0kB, shmem-rss:0kB, UID:0 pgtables:1kB oom_score_adj:0')\n")
    (bin_dir / "dmesg").chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith("OOMDOCTOR")}
    env.update(PYTHONPATH=str(ROOT / "src"), PATH=f"{bin_dir}:{os.environ.get('PATH', '/usr/bin:/bin')}")
    proc = subprocess.run([sys.executable, "-m", "oomdoctor", "record", "-q", "--dir", str(tmp_path / "run"),
                           "--every-ms", "100", "--", sys.executable, "job.py", "workerpid"],
                          capture_output=True, cwd=tmp_path, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr
    meta = json.loads((tmp_path / "run" / "run.json").read_text())
    if meta.get("pid_namespace") == "other":
        pytest.skip("run inside a container's own pid namespace: pids are not matched there")
    assert "kernel_oom_kills" in meta, meta  # the worker vanished while the job ran: the log was read
    assert meta["kernel_oom_kill"] is False, meta
    report = subprocess.run([sys.executable, "-m", "oomdoctor", "report", "--format", "json", str(tmp_path / "run")],
                            capture_output=True, env=env, timeout=120)
    v = json.loads(report.stdout)["verdict"]
    assert v["category"] != "host_oom" and "killed" not in v, v


class _FakeProc:
    """psutil.Process stand-in: a job whose tree gains new processes at every look (workers coming and going)."""
    next_pid = 10_000

    def __init__(self, pid: int):
        self.pid = pid

    def children(self, recursive: bool = False):
        first = _FakeProc.next_pid
        _FakeProc.next_pid += 3000
        return [_FakeProc(p) for p in range(first, first + 3000)]

    def name(self) -> str:
        return "python"

    def status(self) -> str:
        return "running"

    def memory_info(self):
        return type("M", (), {"rss": 1})()


@linux
def test_the_end_of_the_run_reads_the_samplers_state_while_it_still_samples(tmp_path, monkeypatch):
    """The sampler thread may outlive its join timeout; what the end reads must not change under it."""
    import psutil

    from oomdoctor.injob.record import launch

    monkeypatch.setattr(psutil, "Process", _FakeProc)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "run.json").write_text(json.dumps({"start_monotonic": time.monotonic(), "pid_namespace": "init"}))
    sampler = launch.OutsideSampler(str(run_dir), 1, 10)
    stop = threading.Event()

    def churn():
        while not stop.is_set():
            sampler.sample()

    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    t = threading.Thread(target=churn, daemon=True)
    t.start()
    try:
        errors = []
        deadline = time.monotonic() + 4.0
        while time.monotonic() < deadline and not errors:
            got = launch._kernel_log(str(run_dir), [sampler], 1, time.monotonic())
            errors += [got["kernel_log"]] if "could not be read" in got.get("kernel_log", "") else []
    finally:
        stop.set()
        t.join(10)
        sys.setswitchinterval(old)
    assert errors == []


def _run_dir(tmp_path, **meta) -> str:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "run.json").write_text(json.dumps({"start_monotonic": 10.0, "pid_namespace": "init", **meta}))
    return str(run_dir)


def test_the_commands_own_pid_is_the_jobs_until_its_end_though_no_sample_found_it(tmp_path, monkeypatch):
    """Killed before the sampler's first look: no other process gets the pid before `record` reaps it."""
    from oomdoctor.injob.record import launch

    _fake_dmesg(tmp_path, monkeypatch, [_kill_line(20.0, 4242, "python"), _kill_line(40.0, 4242, "python")])
    run_dir = _run_dir(tmp_path)
    sampler = launch.OutsideSampler(run_dir, 4242, 500)  # never started: it saw nothing
    got = launch._kernel_log(run_dir, [sampler], 4242, ended=25.0)
    assert got["kernel_oom_kill"] is True
    assert [k["pid_in_life"] for k in got["kernel_oom_kills"]] == [True, False]  # the second after it was reaped


def test_the_samplers_oom_kill_count_tells_whether_it_rose(tmp_path, monkeypatch):
    from oomdoctor.injob.record import launch, probes

    counts = iter([3, 3, 4])
    monkeypatch.setattr(probes, "cgroup_memory", lambda: {"cgroup_oom_kill": next(counts)})
    sampler = launch.OutsideSampler(_run_dir(tmp_path), os.getpid(), 500)
    sampler.sample()
    assert sampler.snapshot(None)["oom_kill_rose"] is None  # one reading
    sampler.sample()
    assert sampler.snapshot(None)["oom_kill_rose"] is False
    sampler.sample()
    assert sampler.snapshot(None)["oom_kill_rose"] is True
