"""GIVEN a launcher (torchrun, accelerate, deepspeed, mpirun, a bash wrapper) whose rank the kernel's OOM killer
SIGKILLs WHEN the launcher then exits 1 (it stops the other ranks and reports a failure, not the signal) THEN
`record` still reads the kernel log and `report` names the killed rank's host OOM; an ordinary failure with an
unrelated kill in the log is not called one.

Found with a 2-rank CPU torchrun run: `record` read the kernel log only after a SIGKILL or an exit 137 of the
command itself, so a rank's host OOM under torchrun was reported as "no OOM". The kernel log is injected through a
fake `dmesg` first on PATH (the seam the other record tests use): the real kernel log is never read here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
GiB_KB = 1 << 20

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the kernel log and /proc are Linux's")

# a launcher as torchrun behaves: starts a rank (RANK set), waits for it, exits 1 when it failed; asked to tolerate
# a failure, it restarts the rank as an elastic agent does (`--max-restarts`) and exits 0 when that one succeeds
LAUNCHER = """
import os, subprocess, sys
env = {**os.environ, "RANK": "1"}
rc = subprocess.Popen([sys.executable, sys.argv[1], *sys.argv[3:]], env=env).wait()
print(f"launcher: rank 1 exited with {rc}", file=sys.stderr)
if rc and sys.argv[2] == "tolerate":
    # the restarted rank runs long enough for the sampler (every 50 ms) to find the killed one gone under load
    rc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(2.5)"], env=env).wait()
sys.exit(1 if rc else 0)
"""

KILLED_RANK = """
import os, signal, sys, time
time.sleep(3.0)  # the outside sampler must have seen this pid (every 50 ms; 1 s was once too short under load)
with open(sys.argv[1], "w") as f:  # the kernel log stamps its kill line with this clock
    f.write(f"{os.getpid()} {open('/proc/self/comm').read().strip()} {time.monotonic()}")
os.kill(os.getpid(), signal.SIGKILL)
"""

FAILING_RANK = """
import os, sys, time
with open(sys.argv[1], "w") as f:
    f.write(f"{os.getpid()} {open('/proc/self/comm').read().strip()}")
time.sleep(1.0)
raise ValueError("bad batch")
"""

HEALTHY = "import time\ntime.sleep(0.5)\n"


def _env(**extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("OOMDOCTOR")}
    env["PYTHONPATH"] = str(ROOT / "src")
    env.update(extra)
    return env


def _fake_dmesg(tmp_path: Path, body: str) -> str:
    """A `dmesg` first on PATH that runs `body` (Python). Returns the PATH to use. (The machine facts collected at
    the start run `dmesg` too, so whether `record` read the log is told by run.json, not by a run of it.)"""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    exe = bin_dir / "dmesg"
    exe.write_text(f"#!{sys.executable}\nimport sys, time\n{body}\n")
    exe.chmod(0o755)
    return f"{bin_dir}:{os.environ.get('PATH', '/usr/bin:/bin')}"


def _kill_line_of(pid_expr: str, comm_expr: str, t_expr: str = "time.monotonic()") -> str:
    """Python that prints a kernel OOM-kill line for a pid and comm, stamped `t_expr` (the kernel log's clock: now
    by default)."""
    return (f"print(f'[{{{t_expr}:12.6f}}] Out of memory: Killed process {{{pid_expr}}} ({{{comm_expr}}}) "
            f"total-vm:9000000kB, anon-rss:{8 * GiB_KB}kB, file-rss:2048kB, shmem-rss:0kB, UID:1000 pgtables:1kB "
            "oom_score_adj:0')")


def _read_child(tmp_path: Path) -> str:
    """Python that reads the killed rank's pid, comm and the time of its kill."""
    return (f"pid, comm, t = open({str(tmp_path / 'childpid')!r}).read().split()\n")


def _record(tmp_path: Path, rank_script: str, mode: str, path: str):
    (tmp_path / "launcher.py").write_text(LAUNCHER)
    (tmp_path / "rank.py").write_text(rank_script)
    return subprocess.run([sys.executable, "-m", "oomdoctor", "record", "-q", "--dir", str(tmp_path / "run"),
                           "--every-ms", "50", "--", sys.executable, "launcher.py", "rank.py", mode, "childpid"],
                          capture_output=True, cwd=tmp_path, timeout=120, env=_env(PATH=path))


def _report(tmp_path: Path, fmt: str = "json"):
    return subprocess.run([sys.executable, "-m", "oomdoctor", "report", "--format", fmt, str(tmp_path / "run")],
                          capture_output=True, env=_env(), timeout=120)


def _meta(tmp_path: Path) -> dict:
    meta = json.loads((tmp_path / "run" / "run.json").read_text())
    if meta.get("pid_namespace") == "other":
        pytest.skip("run inside a container's own pid namespace: pids are not matched there")
    return meta


def test_a_rank_killed_by_the_oom_killer_under_a_launcher_that_exits_1_is_a_host_oom(tmp_path):
    path = _fake_dmesg(tmp_path, _read_child(tmp_path) + _kill_line_of("pid", "comm", "float(t)"))
    proc = _record(tmp_path, KILLED_RANK, "fail", path)
    assert proc.returncode == 1, proc.stderr
    pid, comm, _ = (tmp_path / "childpid").read_text().split()
    meta = _meta(tmp_path)
    assert meta["kernel_oom_kill"] is True, meta
    assert [k["pid"] for k in meta["kernel_oom_kills"]] == [int(pid)]
    assert meta["kernel_oom_kills"][0]["anon_rss_kb"] == 8 * GiB_KB and meta["command_pid"] != int(pid)
    report = _report(tmp_path)
    assert report.returncode == 1, report.stderr
    doc = json.loads(report.stdout)
    v = doc["verdict"]
    assert v["category"] == "host_oom" and v["confidence"] == "high" and v["severity"] == "error", v
    assert doc["ended"] == "exit 1"
    # the killed rank by name, pid and comm, its memory from the kill line, and what the launcher did then
    assert f"rank 1 (pid {pid}, {comm})" in v["summary"], v["summary"]
    assert "anon-rss 8.00 GiB" in v["summary"], v["summary"]
    assert "then exited with status 1" in v["summary"], v["summary"]
    assert v["killed"][0]["pid"] == int(pid) and v["killed"][0]["anon_rss"] == 8 * (1 << 30)
    text = _report(tmp_path, "text").stdout.decode()
    assert "[host_oom]" in text and f"pid {pid}" in text


def test_an_ordinary_failure_with_an_unrelated_kill_in_the_log_is_not_a_host_oom(tmp_path):
    """The rank raises; the kernel log holds a kill, after the start, of a process outside the job (this test's own
    pid, named `python` like the job's processes)."""
    path = _fake_dmesg(tmp_path, _kill_line_of(str(os.getpid()), '"python"'))
    proc = _record(tmp_path, FAILING_RANK, "fail", path)
    assert proc.returncode == 1, proc.stderr
    meta = _meta(tmp_path)  # the log was read (exit 1), and found nothing of the job's
    assert meta["kernel_oom_kill"] is False and meta["kernel_oom_kills"] == [], meta
    report = _report(tmp_path)
    assert report.returncode == 0, report.stdout
    v = json.loads(report.stdout)["verdict"]
    assert v["category"] != "host_oom" and not v["oom"], v
    assert "killed" not in v
    assert str(os.getpid()) not in json.dumps(v)


def test_a_killed_rank_under_a_launcher_that_still_exits_0_is_a_warning(tmp_path):
    """An elastic launcher restarts its rank and succeeds: the sampler saw the killed rank vanish while the launcher
    ran, so the log is read."""
    path = _fake_dmesg(tmp_path, _read_child(tmp_path) + _kill_line_of("pid", "comm", "float(t)"))
    proc = _record(tmp_path, KILLED_RANK, "tolerate", path)
    assert proc.returncode == 0, proc.stderr
    pid = (tmp_path / "childpid").read_text().split()[0]
    assert _meta(tmp_path)["kernel_oom_kill"] is True
    report = _report(tmp_path)
    assert report.returncode == 1
    v = json.loads(report.stdout)["verdict"]
    assert v["category"] == "host_oom" and v["severity"] == "warning" and not v["oom"], v
    assert f"pid {pid}" in v["summary"] and "exit 0" in v["summary"], v["summary"]


def test_a_clean_run_without_a_vanished_process_does_not_read_the_kernel_log(tmp_path):
    path = _fake_dmesg(tmp_path, "print('[    1.000000] nothing')")
    (tmp_path / "job.py").write_text(HEALTHY)
    proc = subprocess.run([sys.executable, "-m", "oomdoctor", "record", "-q", "--dir", str(tmp_path / "run"),
                           "--every-ms", "50", "--", sys.executable, "job.py"],
                          capture_output=True, cwd=tmp_path, timeout=120, env=_env(PATH=path))
    assert proc.returncode == 0, proc.stderr
    meta = json.loads((tmp_path / "run" / "run.json").read_text())
    assert "kernel_oom_kills" not in meta and "kernel_log" not in meta


def test_an_unreadable_kernel_log_after_a_failed_launcher_is_said_with_the_command_to_check(tmp_path):
    path = _fake_dmesg(tmp_path, "sys.stderr.write('dmesg: read kernel buffer failed: Operation not permitted\\n')\n"
                                 "sys.exit(1)")
    proc = _record(tmp_path, KILLED_RANK, "fail", path)
    assert proc.returncode == 1, proc.stderr  # the record does not fail
    meta = _meta(tmp_path)
    assert meta["kernel_log"].startswith("dmesg denied"), meta
    report = _report(tmp_path)
    v = json.loads(report.stdout)["verdict"]
    said = v["summary"] + "\n" + "\n".join(v["evidence"] + v["fixes"])
    assert "the kernel log could not be read (dmesg denied" in said, said
    assert "sudo dmesg -T | grep -i 'killed process'" in said, said
    text = _report(tmp_path, "text").stdout.decode()
    assert "sudo dmesg -T | grep -i 'killed process'" in text


# --- the report's side, on recordings written here (no process is run) ---

MiB = 1 << 20


def _jsonl(rows: list[dict]) -> str:
    return "\n".join(json.dumps(r) for r in rows) + "\n"


def _rank_timeline(pid: int, rank: int) -> str:
    rows = [{"kind": "header", "schema_version": 1, "format": "oomdoctor-record", "pid": pid, "rank": rank,
             "label": f"rank{rank}", "t": 0}]
    rows += [{"kind": "sample", "t": 0.5 * i, "rss": 900 * MiB} for i in range(1, 6)]
    return _jsonl(rows)


def _outside(kills: tuple[int, int] | None = None) -> str:
    rows = [{"kind": "header", "label": "outside", "t": 0}]
    for i in range(6):
        rec: dict = {"kind": "sample", "t": 0.5 * i, "tree_rss": 2 * 900 * MiB}
        if kills is not None:
            rec["cgroup_oom_kill"] = kills[0] if i < 5 else kills[1]
        rows.append(rec)
    return _jsonl(rows)


def _kill(pid: int, comm: str = "python", **kw) -> dict:
    text = (f"[  100.000000] Out of memory: Killed process {pid} ({comm}) total-vm:1kB, anon-rss:{3 * GiB_KB}kB, "
            "file-rss:1024kB, shmem-rss:512kB, UID:0 pgtables:1kB oom_score_adj:0")
    return {"pid": pid, "comm": comm, "uptime": 100.0, "pid_match": True, "comm_match": True, "text": text, **kw}


def _verdict(meta: dict, outside: str | None = None) -> dict:
    from oomdoctor.analysis.timeline import analyse
    from oomdoctor.facts.recording import RunFiles

    meta = {"start": 0.0, "argv": ["/usr/bin/torchrun", "--nproc-per-node", "2", "train.py"], "command_pid": 10,
            "pid_namespace": "init", **meta}
    return analyse(RunFiles(path="run", meta=meta, outside=outside or _outside(),
                            timelines={"rank0": _rank_timeline(11, 0), "rank1": _rank_timeline(12, 1)}))["verdict"]


def test_the_verdict_names_the_killed_rank_its_memory_and_the_launchers_exit():
    v = _verdict({"returncode": 1, "kernel_oom_kills": [_kill(12)], "kernel_oom_kill": True})
    assert v["category"] == "host_oom" and v["confidence"] == "high" and v["oom"], v
    assert v["summary"].startswith("rank 1 (pid 12, python) was killed by the kernel's OOM killer (anon-rss 3.00 GiB, "
                                   "file-rss 1.00 MiB, shmem-rss 512.00 KiB at the kill)"), v["summary"]
    assert "the launcher (torchrun) then exited with status 1" in v["summary"], v["summary"]


def test_the_memory_of_an_older_recording_is_read_from_the_kill_lines_text():
    """Recorders before this one kept the line's text, not its figures."""
    v = _verdict({"returncode": 1, "kernel_oom_kills": [_kill(12)]})
    assert v["killed"][0]["anon_rss"] == 3 * (1 << 30) and v["killed"][0]["shmem_rss"] == 512 * 1024


def test_a_pid_the_job_left_early_killed_under_another_name_is_not_the_jobs():
    """The existing rule: the pid may have been reused by another program since (name differs, not held to the end)."""
    v = _verdict({"returncode": 1, "kernel_oom_kills": [_kill(12, "postgres", comm_match=False,
                                                                 pid_live_at_end=False)]})
    assert v["category"] != "host_oom" and "killed" not in v, v
    assert "the kernel log holds no OOM kill of the job's processes after the job started" in v["evidence"]


def test_a_command_killed_by_another_signal_after_its_rank_says_so():
    v = _verdict({"returncode": -15, "signal": "SIGTERM", "kernel_oom_kills": [_kill(12)]})
    assert "then was killed by SIGTERM (exit 143 in a shell)" in v["summary"], v["summary"]


def test_in_another_pid_namespace_the_kill_is_not_put_on_a_rank_by_pid():
    """The log's pids are the host's there: the name matched and the kill line's cgroup is the job's, but pid 12 of
    the container is not host pid 12."""
    v = _verdict({"returncode": 1, "pid_namespace": "other",
                  "kernel_oom_kills": [_kill(12, pid_match=None, comm_match=True, memcg_match=True)]})
    assert v["category"] == "host_oom" and v["summary"].startswith("a process of the job (pid 12, python)"), v
    assert v["confidence"] == "high"


def test_in_another_pid_namespace_a_name_alone_is_one_possible_cause():
    """Another pod's `python` killed after the start has the same name: without the job's cgroup in the kill line
    or its oom_kill count rising, the kill is not put on the job."""
    v = _verdict({"returncode": 1, "pid_namespace": "other",
                  "kernel_oom_kills": [_kill(12, pid_match=None, comm_match=True)]})
    assert v["category"] == "host_oom" and v["confidence"] == "low" and v["severity"] == "warning", v
    assert "killed" not in v and "one possible cause" in v["summary"], v


def test_an_unread_kernel_log_with_the_cgroups_oom_kill_count_rising_is_one_possible_cause():
    v = _verdict({"returncode": 1, "kernel_log": "dmesg denied: Operation not permitted"}, _outside(kills=(0, 1)))
    assert v["category"] == "host_oom" and v["confidence"] == "low" and v["severity"] == "warning", v
    assert "oom_kill count rose from 0 to 1" in v["summary"] and "could not be read" in v["summary"], v["summary"]
    assert any("sudo dmesg -T | grep -i 'killed process'" in f for f in v["fixes"])


def test_an_unread_kernel_log_without_other_evidence_stays_a_plain_failure_that_says_how_to_check():
    v = _verdict({"returncode": 1, "kernel_log": "dmesg: timed out after 2 s"}, _outside(kills=(0, 0)))
    assert v["category"] is None and v["severity"] == "ok", v
    assert v["summary"].startswith("exit 1; no OOM"), v["summary"]
    assert any("the kernel log could not be read (dmesg: timed out after 2 s)" in e for e in v["evidence"])


# --- the step shown with the kill: the killed process's own, not the furthest rank's ---


def _stepped_timeline(pid: int, rank: int, steps: range) -> str:
    rows = [{"kind": "header", "schema_version": 1, "format": "oomdoctor-record", "pid": pid, "rank": rank,
             "label": f"rank{rank}", "t": 0}]
    for s in steps:
        rows.append({"kind": "step", "t": 1.0 + s, "step": s, "rss": 900 * MiB})
        rows.append({"kind": "sample", "t": 1.5 + s, "rss": 900 * MiB})
    return _jsonl(rows)


def _verdict_with_steps(meta: dict, rank0: range, rank1: range) -> dict:
    """rank 0 is pid 11, rank 1 is pid 12 (as in `_verdict`), each with its own step markers."""
    from oomdoctor.analysis.timeline import analyse
    from oomdoctor.facts.recording import RunFiles

    meta = {"start": 0.0, "argv": ["/usr/bin/torchrun", "--nproc-per-node", "2", "train.py"], "command_pid": 10,
            "pid_namespace": "init", "returncode": 1, **meta}
    return analyse(RunFiles(path="run", meta=meta, outside=_outside(),
                            timelines={"rank0": _stepped_timeline(11, 0, rank0),
                                       "rank1": _stepped_timeline(12, 1, rank1)}))


def _step_lines(v: dict) -> list[str]:
    return [e for e in v["evidence"] if "step" in e]


def test_the_step_shown_with_a_killed_rank_is_its_own_not_the_furthest_ranks():
    """torchrun, rank 1 killed at step 7 while rank 0 got to step 21: the report said rank 0's step 21."""
    doc = _verdict_with_steps({"kernel_oom_kills": [_kill(12)]}, range(1, 22), range(1, 8))
    v = doc["verdict"]
    assert v["category"] == "host_oom" and v["confidence"] == "high", v
    assert _step_lines(v) == ["rank 1: the last step recorded before the kill was step 7 (rank 0 got further, "
                              "to step 21)"], v["evidence"]
    assert v["killed"][0]["name"] == "rank 1" and v["killed"][0]["last_step"] == 7, v["killed"]
    from oomdoctor.render.record import render_text
    assert "rank 1: the last step recorded before the kill was step 7" in render_text(doc)


def test_a_killed_rank_ahead_of_the_others_is_not_compared_with_them():
    v = _verdict_with_steps({"kernel_oom_kills": [_kill(12)]}, range(1, 9), range(1, 10))["verdict"]
    assert _step_lines(v) == ["rank 1: the last step recorded before the kill was step 9"], v["evidence"]


def test_a_killed_rank_that_marked_no_step_says_so_and_not_another_ranks_step():
    v = _verdict_with_steps({"kernel_oom_kills": [_kill(12)]}, range(1, 22), range(0))["verdict"]
    assert _step_lines(v) == ["rank 1: no step was recorded before the kill (rank 0 got further, to step 21)"], \
        v["evidence"]
    assert v["killed"][0]["last_step"] is None


def test_step_0_is_a_step():
    v = _verdict_with_steps({"kernel_oom_kills": [_kill(12)]}, range(0, 4), range(0, 1))["verdict"]
    assert _step_lines(v) == ["rank 1: the last step recorded before the kill was step 0 (rank 0 got further, "
                              "to step 3)"], v["evidence"]


def test_two_killed_ranks_each_give_their_own_step():
    v = _verdict_with_steps({"kernel_oom_kills": [_kill(11), _kill(12)]}, range(1, 6), range(1, 4))["verdict"]
    assert _step_lines(v) == ["rank 0: the last step recorded before the kill was step 5; rank 1: the last step "
                              "recorded before the kill was step 3"], v["evidence"]


def test_a_killed_process_that_was_not_recorded_is_not_given_a_ranks_step():
    """A DataLoader worker (its own pid, no timeline of its own) was killed: which rank it served is not recorded,
    so the furthest step is said as that, not as the killed process's."""
    v = _verdict_with_steps({"kernel_oom_kills": [_kill(99, "pt_data_worker", pid_in_life=True)]},
                            range(1, 22), range(1, 8))["verdict"]
    assert v["category"] == "host_oom", v
    assert _step_lines(v) == ["the furthest step recorded before the kill: step 21 (rank 0)"], v["evidence"]


def test_a_killed_launcher_with_no_process_named_gives_the_furthest_step_as_that():
    """The whole torchrun killed by SIGKILL, the kernel log not read: no process is known to be the killed one."""
    v = _verdict_with_steps({"returncode": -9, "signal": "SIGKILL", "kernel_log": "dmesg denied"},
                            range(1, 22), range(1, 8))["verdict"]
    assert v["category"] == "host_oom" and v["confidence"] == "low", v
    assert _step_lines(v) == ["the furthest step recorded before the kill: step 21 (rank 0)"], v["evidence"]


def test_in_another_pid_namespace_the_killed_process_is_not_matched_to_a_rank_by_pid():
    v = _verdict_with_steps({"pid_namespace": "other",
                             "kernel_oom_kills": [_kill(12, pid_match=None, comm_match=True, memcg_match=True)]},
                            range(1, 22), range(1, 8))["verdict"]
    assert _step_lines(v) == ["the furthest step recorded before the kill: step 21 (rank 0)"], v["evidence"]


def test_a_killed_rank_that_marked_no_step_says_so_when_no_rank_marked_one():
    v = _verdict_with_steps({"kernel_oom_kills": [_kill(12)]}, range(0), range(0))["verdict"]
    assert v["category"] == "host_oom", v
    assert _step_lines(v) == ["rank 1: no step was recorded before the kill"], v["evidence"]


# --- the launcher's name: `python -m torch.distributed.run` is torchrun, not "python3" ---


@pytest.mark.parametrize(("argv", "name"), [
    (["/usr/bin/python3", "-m", "torch.distributed.run", "--nproc-per-node", "2", "train.py"], "torch.distributed.run"),
    (["python", "-u", "-m", "accelerate.commands.launch", "train.py"], "accelerate.commands.launch"),
    (["python3.11", "-mtorch.distributed.run", "train.py"], "torch.distributed.run"),
    (["python", "-W", "ignore", "-m", "deepspeed.launcher.runner", "train.py"], "deepspeed.launcher.runner"),
    (["/opt/conda/bin/torchrun", "train.py"], "torchrun"),
    (["python", "launch.py", "-m", "x"], "python"),
])
def test_the_launcher_is_named_by_the_module_it_runs(argv, name):
    v = _verdict({"returncode": 1, "argv": argv, "kernel_oom_kills": [_kill(12)]})
    assert f"the launcher ({name}) then exited with status 1" in v["summary"], v["summary"]


# --- a command that raised an exception of its own: say it, not "whether the OOM killer took one is unknown" ---


def _raised_timeline(pid: int, exc_type: str, message: str) -> str:
    rows = [{"kind": "header", "schema_version": 1, "format": "oomdoctor-record", "pid": pid, "label": f"pid{pid}",
             "t": 0}, {"kind": "sample", "t": 0.5, "rss": 90 * MiB},
            {"kind": "exception", "t": 0.6, "step": 0, "type": exc_type, "message": message}]
    return _jsonl(rows)


def _verdict_raised(meta: dict, exc_type: str = "KeyError", message: str = "KeyError: 'boom'") -> dict:
    from oomdoctor.analysis.timeline import analyse
    from oomdoctor.facts.recording import RunFiles

    meta = {"start": 0.0, "argv": ["python", "-c", "raise KeyError('boom')"], "command_pid": 10,
            "pid_namespace": "init", "returncode": 1, "kernel_log": "dmesg denied: Operation not permitted", **meta}
    return analyse(RunFiles(path="run", meta=meta, outside=_outside(),
                            timelines={"pid10": _raised_timeline(10, exc_type, message)}))["verdict"]


def test_a_command_that_raised_says_what_it_raised_not_how_to_read_the_kernel_log():
    v = _verdict_raised({"processes_vanished": 0})
    assert v["category"] is None and v["severity"] == "ok", v
    assert "the job raised KeyError: 'boom'" in v["summary"], v["summary"]
    assert "unknown" not in v["summary"], v["summary"]
    assert not any("dmesg" in f for f in v["fixes"]), v["fixes"]


def test_a_command_that_raised_after_one_of_its_processes_vanished_keeps_the_kernel_log_advice():
    """A DataLoader worker killed, then the main process raises ("DataLoader worker (pid 4242) is killed by signal")."""
    v = _verdict_raised({"processes_vanished": 1}, "RuntimeError",
                        "RuntimeError: DataLoader worker (pid(s) 4242) exited unexpectedly")
    assert any("sudo dmesg -T | grep -i 'killed process'" in f for f in v["fixes"]), v
    assert "the job raised RuntimeError" in v["summary"], v["summary"]


def test_an_error_saying_a_process_was_killed_keeps_the_kernel_log_advice_though_none_was_seen_vanishing():
    """A worker killed between two samples: the sampler did not see it vanish, the main process's error says it."""
    v = _verdict_raised({"processes_vanished": 0}, "RuntimeError",
                        "RuntimeError: DataLoader worker (pid 4242) is killed by signal: Killed. ")
    assert any("sudo dmesg -T | grep -i 'killed process'" in f for f in v["fixes"]), v


@pytest.mark.parametrize("exc_type", ["ChildFailedError", "CalledProcessError"])
def test_a_launchers_error_for_a_failed_child_keeps_the_kernel_log_advice(exc_type):
    """torchrun raises ChildFailedError and `accelerate launch` CalledProcessError when a rank fails: the rank's
    failure may be the OOM killer's."""
    v = _verdict_raised({"processes_vanished": 0}, exc_type, f"{exc_type}: train.py FAILED")
    assert any("sudo dmesg -T | grep -i 'killed process'" in f for f in v["fixes"]), v


def test_an_older_recording_without_the_vanished_count_keeps_the_kernel_log_advice():
    v = _verdict_raised({})
    assert any("sudo dmesg -T | grep -i 'killed process'" in f for f in v["fixes"]), v


def test_record_of_a_command_that_raises_with_dmesg_denied_says_what_it_raised(tmp_path):
    """The reviewer's case, end to end: `record -- python -c "raise KeyError('boom')"`, dmesg refused."""
    path = _fake_dmesg(tmp_path, "sys.stderr.write('dmesg: read kernel buffer failed: Operation not permitted\\n')\n"
                                 "sys.exit(1)")
    proc = subprocess.run([sys.executable, "-m", "oomdoctor", "record", "-q", "--dir", str(tmp_path / "run"),
                           "--every-ms", "50", "--", sys.executable, "-c", "raise KeyError('boom')"],
                          capture_output=True, cwd=tmp_path, timeout=120, env=_env(PATH=path))
    assert proc.returncode == 1, proc.stderr
    meta = json.loads((tmp_path / "run" / "run.json").read_text())
    assert meta["processes_vanished"] == 0 and meta["kernel_log"].startswith("dmesg denied"), meta
    v = json.loads(_report(tmp_path).stdout)["verdict"]
    assert "the job raised KeyError: 'boom'" in v["summary"], v
    assert not any("dmesg" in f for f in v["fixes"]), v["fixes"]
