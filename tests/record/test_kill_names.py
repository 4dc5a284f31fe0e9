"""The kernel's OOM-kill line names a process by its comm: the name of its main thread, 15 characters at most.

PyTorch renames threads (the main thread `pt_main_thread` in some versions, a DataLoader worker `pt_data_worker`,
torchrun's agent `pt_elastic`), setproctitle renames processes, and the kernel cuts a name to 15 characters: a
kill of the job's own process must not be lost because its name changed after the sampler last read it. The pid
decides, at a time the job held it (test_kill_window.py); the name is more evidence, and in a container's own pid
namespace (test_kill_in_container.py) the name is needed, with something else that ties the kill to the job.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from oomdoctor.analysis import kill
from oomdoctor.parsers.kernlog import parse_oom_kills

from .synth import fake_dmesg as _fake_dmesg


def _named_by_kernel(meta: dict) -> bool:
    """What `report` makes of the kill lines the recorder kept."""
    found = kill.evidence({**meta, "pid_namespace": "init", "returncode": -9}, [])["found"]
    return any("kernel log names a process of the job" in f for f in found)


def _kill_line(t: float, pid: int, comm: str) -> str:
    return (f"[{t:12.6f}] Memory cgroup out of memory: Killed process {pid} ({comm}) total-vm:1kB, anon-rss:2kB, "
            "file-rss:0kB, shmem-rss:0kB, UID:0 pgtables:1kB oom_score_adj:0")


@pytest.mark.parametrize("comm", ["pt_main_thread", "pt_data_worker", "pt_elastic", "pt_autograd_0"])
def test_a_kill_naming_a_pytorch_thread_name_is_the_jobs(tmp_path, monkeypatch, comm):
    """The sampler read `python` for the pid; PyTorch renamed it before the kill."""
    from oomdoctor.injob.record import kernel_kills

    _fake_dmesg(tmp_path, monkeypatch, [_kill_line(100.0, 4242, comm)])
    got = kernel_kills.kernel_oom_kills({4242: {"python"}, 7: {"sh"}}, 50.0)
    assert got["kernel_oom_kill"] is True, got
    assert got["kernel_oom_kills"][0]["comm_match"] is True
    assert _named_by_kernel(got)


def test_a_name_seen_on_another_process_of_the_job_matches(tmp_path, monkeypatch):
    """A worker renamed by setproctitle to a name the sampler read on its sibling."""
    from oomdoctor.injob.record import kernel_kills

    _fake_dmesg(tmp_path, monkeypatch, [_kill_line(100.0, 4243, "data-loader")])
    got = kernel_kills.kernel_oom_kills({4242: {"python", "data-loader"}, 4243: {"python"}}, 50.0)
    assert got["kernel_oom_kill"] is True, got


def test_a_long_name_is_compared_as_the_kernel_cuts_it(tmp_path, monkeypatch):
    """psutil gives a 15-character comm its full name from the command line; the kernel prints 15 characters."""
    from oomdoctor.injob.record import kernel_kills

    _fake_dmesg(tmp_path, monkeypatch, [_kill_line(100.0, 4242, "train_resnet50_")])
    got = kernel_kills.kernel_oom_kills({4242: {"train_resnet50_imagenet.py"}}, 50.0)
    assert got["kernel_oom_kill"] is True and got["kernel_oom_kills"][0]["comm_match"] is True


def test_a_name_with_parentheses_is_read_whole():
    """setproctitle("trainer (rank 0)") leaves the comm `trainer (rank 0`; `a (b) c` has a closing one inside."""
    lines = [_kill_line(100.0, 4242, "a (b) c"), _kill_line(101.0, 4243, "trainer (rank 0"),
             "[  102.000000] Out of memory: Killed process 4244 (x)"]
    assert [k["comm"] for k in parse_oom_kills(lines)] == ["a (b) c", "trainer (rank 0", "x"]


def test_another_programs_kill_on_a_pid_the_job_left_early_is_not_the_jobs(tmp_path, monkeypatch):
    """The pid may have been reused after the job's process exited: a kill after that is another program's."""
    from oomdoctor.injob.record import kernel_kills

    _fake_dmesg(tmp_path, monkeypatch, [_kill_line(100.0, 4242, "postgres")])
    got = kernel_kills.kernel_oom_kills({4242: {"python"}, 4300: {"python"}}, 50.0,
                                        lives={4242: [(None, 60.0)], 4300: [(None, 120.0)]})
    assert got["kernel_oom_kill"] is False
    assert got["kernel_oom_kills"][0]["pid_in_life"] is False
    assert not _named_by_kernel(got)


def test_a_pid_the_job_held_at_the_kill_is_the_jobs_whatever_its_name(tmp_path, monkeypatch):
    """Held by the job when the line was stamped: a name the sampler never read (an exec, a rename) does not
    matter."""
    from oomdoctor.injob.record import kernel_kills

    _fake_dmesg(tmp_path, monkeypatch, [_kill_line(100.0, 4242, "my-renamed-job")])
    got = kernel_kills.kernel_oom_kills({4242: {"python"}}, 50.0, lives={4242: [(None, 120.0)]})
    assert got["kernel_oom_kill"] is True
    entry = got["kernel_oom_kills"][0]
    assert entry["comm_match"] is False and entry["pid_in_life"] is True
    assert _named_by_kernel(got)


def test_a_kill_before_the_start_stays_rejected_even_for_a_pid_held_to_the_end(tmp_path, monkeypatch):
    from oomdoctor.injob.record import kernel_kills

    _fake_dmesg(tmp_path, monkeypatch, [_kill_line(5.0, 4242, "pt_main_thread")])
    got = kernel_kills.kernel_oom_kills({4242: {"python"}}, 50.0, lives={4242: [(None, 120.0)]})
    assert got == {"kernel_oom_kills": [], "kernel_oom_kill": False}


def test_in_another_pid_namespace_a_pytorch_name_alone_is_not_the_jobs(tmp_path, monkeypatch):
    """A container's log names host pids, and every PyTorch job on the machine has the same thread names: only a
    name the sampler read on the job's processes counts there, and only with something that ties it to the job."""
    from oomdoctor.injob.record import kernel_kills

    _fake_dmesg(tmp_path, monkeypatch, [_kill_line(100.0, 98765, "pt_main_thread")])
    got = kernel_kills.kernel_oom_kills({2: {"python"}}, 50.0, "other", oom_kill_rose=True)
    assert "kernel_oom_kill" not in got
    assert kernel_kills.kernel_oom_kills({2: {"python", "pt_main_thread"}}, 50.0, "other",
                                         oom_kill_rose=True)["kernel_oom_kill"] is True


LAUNCHER = """
import subprocess, sys, time
rc = subprocess.Popen([sys.executable, "child.py", *sys.argv[1:]]).wait()
time.sleep(3.5)  # alive well past the child's end: a later kill of its pid is another program's
sys.exit(1 if rc else 0)
"""

RENAMED_CHILD = """
import os, signal, sys, time
time.sleep(float(sys.argv[2]))
with open("/proc/self/comm", "w") as f:  # what PyTorch's and setproctitle's renames do to the main thread
    f.write("pt_main_thread")
with open(sys.argv[1], "w") as f:
    f.write(f"{os.getpid()} {open('/proc/self/comm').read().strip()} {time.monotonic()}")
os.kill(os.getpid(), signal.SIGKILL)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the kernel log and /proc are Linux's")
def test_record_attributes_the_kill_of_a_child_renamed_after_the_last_sample_and_no_later_kill_of_its_pid(tmp_path):
    """`oomdoctor record` sampling every second of a launcher whose child (not the command) is read as `python`,
    renames itself to `pt_main_thread` and is killed before the next sample; the launcher lives on 3.5 s, then
    exits 1. The kernel log names the child `pt_main_thread` at its kill, and names its pid again later
    (`pt_data_worker`, stamped when the log is read): the pid reused by another program's worker."""
    (tmp_path / "launcher.py").write_text(LAUNCHER)
    (tmp_path / "child.py").write_text(RENAMED_CHILD)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "dmesg").write_text(
        f"#!{sys.executable}\nimport time\npid, comm, t = open({str(tmp_path / 'childpid')!r}).read().split()\n"
        "tail = 'total-vm:1kB, anon-rss:2kB, file-rss:0kB, shmem-rss:0kB, UID:0 pgtables:1kB oom_score_adj:0'\n"
        "print(f'[{float(t):12.6f}] Memory cgroup out of memory: Killed process {pid} ({comm}) {tail}')\n"
        "print(f'[{time.monotonic():12.6f}] Memory cgroup out of memory: Killed process {pid} (pt_data_worker) {tail}')\n")
    (bin_dir / "dmesg").chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith("OOMDOCTOR")}
    env.update(PYTHONPATH=os.path.abspath("src"), PATH=f"{bin_dir}:{os.environ.get('PATH', '/usr/bin:/bin')}")
    proc = subprocess.run([sys.executable, "-m", "oomdoctor", "record", "-q", "--dir", str(tmp_path / "run"),
                           "--every-ms", "1000", "--", sys.executable, "launcher.py", "childpid", "2.3"],
                          capture_output=True, cwd=tmp_path, timeout=120, env=env)
    assert proc.returncode == 1, proc.stderr
    meta = json.loads((tmp_path / "run" / "run.json").read_text())
    if meta.get("pid_namespace") == "other":
        pytest.skip("run inside a container's own pid namespace: pids are not matched there")
    pid = int((tmp_path / "childpid").read_text().split()[0])
    assert pid != meta["command_pid"]
    assert meta["kernel_oom_kill"] is True, meta
    assert [(k["pid"], k["comm"]) for k in meta["kernel_oom_kills"]] == [(pid, "pt_main_thread"),
                                                                         (pid, "pt_data_worker")]
    first, later = meta["kernel_oom_kills"]
    assert first["comm_match"] is True  # a PyTorch thread name: more evidence, inside the time the job held the pid
    assert kill.job_kills(meta) == [first], meta["kernel_oom_kills"]
    assert later["pid_in_life"] is False
