"""The in-job recorder on a CPU workload: timelines, step markers, and no error ever reaches the job."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import oomdoctor
from oomdoctor.injob import record
from oomdoctor.injob.record import probes
from oomdoctor.injob.record.recorder import Recorder

ROOT = Path(__file__).resolve().parents[2]


def _records(run_dir: Path) -> list[dict]:
    files = sorted(run_dir.glob("timeline-*.jsonl"))
    assert len(files) == 1, files
    return [json.loads(line) for line in files[0].read_text().splitlines()]


def test_import_does_not_import_torch():
    code = "import sys, oomdoctor; oomdoctor.watch; oomdoctor.step; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin"})
    assert out.stdout.strip() == "False"


def test_watch_records_steps_and_samples_on_cpu(tmp_path):
    torch = pytest.importorskip("torch")
    model = torch.nn.Linear(64, 8)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with oomdoctor.watch(tmp_path / "run", every_ms=20) as rec:
        assert rec is not None and record.current() is rec
        for _ in range(12):
            model(torch.randn(16, 64)).sum().backward()
            opt.step()
            opt.zero_grad()
            oomdoctor.step()
    assert record.current() is None
    recs = _records(tmp_path / "run")
    assert recs[0]["kind"] == "header" and recs[0]["schema_version"] == 1
    steps = [r for r in recs if r["kind"] == "step"]
    assert [r["step"] for r in steps] == list(range(1, 13))
    assert all(r["rss"] > 0 for r in steps)
    assert any(r["kind"] == "sample" for r in recs)
    assert recs[-1]["kind"] == "end"
    assert not torch.cuda.is_initialized()  # never initialised CUDA for the job
    assert not list((tmp_path / "run").glob("errors-*.log"))


def test_step_without_recorder_is_a_noop():
    oomdoctor.step()
    oomdoctor.step(5)


def test_failing_probe_never_reaches_the_job(tmp_path, monkeypatch):
    def boom(*a, **k):
        raise RuntimeError("probe exploded")

    monkeypatch.setattr(probes, "host_rss", boom)
    monkeypatch.setattr(probes, "cgroup_memory", boom)
    with oomdoctor.watch(tmp_path / "run", every_ms=10):
        for _ in range(5):
            oomdoctor.step()
    errors = (tmp_path / "run").glob("errors-*.log")
    text = "".join(p.read_text() for p in errors)
    assert "probe exploded" in text


def test_unwritable_run_dir_degrades_silently(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a dir")
    with oomdoctor.watch(blocker / "run") as rec:  # cannot create: the job still runs
        oomdoctor.step()
    assert rec is None or not rec.active


def test_exception_escapes_unchanged_and_oom_is_noted(tmp_path):
    err = RuntimeError("CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 1.00 GiB total capacity)")
    with pytest.raises(RuntimeError) as info:
        with oomdoctor.watch(tmp_path / "run", every_ms=1000):
            oomdoctor.step()
            raise err
    assert info.value is err
    recs = _records(tmp_path / "run")
    assert any(r["kind"] == "exception" and "out of memory" in r["message"] for r in recs)
    ooms = list((tmp_path / "run").glob("oom-*.json"))
    assert len(ooms) == 1 and json.loads(ooms[0].read_text())["source"] == "exception"


def test_nested_watch_reuses_the_running_recorder(tmp_path):
    with oomdoctor.watch(tmp_path / "a") as outer:
        with oomdoctor.watch(tmp_path / "b") as inner:
            assert inner is outer
        assert record.current() is outer
    assert not (tmp_path / "b").exists()


def test_rank_from_environment_names_the_file(tmp_path, monkeypatch):
    monkeypatch.setenv("RANK", "3")
    rec = Recorder(str(tmp_path / "run"), sampler=False).start()
    rec.step()
    rec.stop()
    assert (tmp_path / "run" / "timeline-rank3.jsonl").exists()


def test_forked_child_does_not_write(tmp_path):
    code = textwrap.dedent(f"""
        import os, oomdoctor
        with oomdoctor.watch({str(tmp_path / 'run')!r}, every_ms=10):
            pid = os.fork()
            if pid == 0:
                oomdoctor.step(); os._exit(0)
            os.waitpid(pid, 0)
            oomdoctor.step()
    """)
    subprocess.run([sys.executable, "-c", code], check=True, env={"PYTHONPATH": str(ROOT / "src")})
    steps = [r for r in _records(tmp_path / "run") if r["kind"] == "step"]
    assert len(steps) == 1


def test_bounded_writer_decimates(tmp_path):
    rec = Recorder(str(tmp_path / "run"), sampler=False, max_lines=50)
    rec.start()
    for _ in range(2000):
        rec.step()
    rec.stop()
    lines = _records(tmp_path / "run")
    assert len(lines) < 1000  # 2000 steps, kept 1 in 2, then 1 in 4, ...
    assert any(r["kind"] == "note" and "decimating" in r["note"] for r in lines)


def test_observer_calls_then_fatal_exception(tmp_path):
    """Survived OOMs (cuDNN retries) are cheap records; the fatal one gets the full dump and is reported."""
    from oomdoctor.analysis import timeline
    from oomdoctor.collectors import rundir

    err = RuntimeError("CUDA out of memory. Tried to allocate 2.30 GiB.")
    with pytest.raises(RuntimeError):
        with oomdoctor.watch(tmp_path / "run", every_ms=1000) as rec:
            rec._observer(0, 7 << 30, 80 << 30, 4 << 30)  # a convolution workspace attempt, survived
            rec._observer(0, 7 << 30, 80 << 30, 4 << 30)
            rec._observer(0, 2466250752, 80 << 30, 2 << 30)  # the one that ends the run
            raise err
    dumps = sorted((tmp_path / "run").glob("oom-*.json"))
    assert [json.loads(p.read_text())["source"] for p in dumps] == ["observer", "exception"]
    recs = _records(tmp_path / "run")
    assert sum(r["kind"] == "oom" for r in recs) == 3
    doc = timeline.analyse(rundir.load(tmp_path / "run"))
    fatal = doc["ooms"][-1]
    assert fatal["fatal"] and fatal["requested"] == 2466250752 and fatal["oom_events"] == 3
    assert "2.30 GiB" in fatal["message"]


def test_sampler_thread_picks_the_busy_device_not_its_own_current_one():
    from types import SimpleNamespace

    stats = {0: {}, 1: {"reserved_bytes.all.current": 5 << 30, "allocated_bytes.all.current": 4 << 30}, 2: {}}
    cuda = SimpleNamespace(device_count=lambda: 3, memory_stats=lambda i: stats[i], current_device=lambda: 0)
    fake = SimpleNamespace(cuda=cuda)
    assert probes.busiest_device(fake) == 1
    assert probes.allocator(fake, 1) == {"allocated": 4 << 30, "reserved": 5 << 30, "device": 1}


@pytest.mark.parametrize("value", ["²", "-1", "x", "", " 7 "])
def test_odd_rank_values_never_break_start(tmp_path, monkeypatch, value):
    monkeypatch.setenv("RANK", value)
    rec = Recorder(str(tmp_path / "run"), sampler=False).start()
    assert rec is not None and rec.active
    rec.stop()
    expected = "timeline-rank7.jsonl" if value.strip() == "7" else f"timeline-pid{rec.pid}.jsonl"
    assert (tmp_path / "run" / expected).exists()


def test_sampling_starts_when_cuda_comes_up_and_is_fast_at_first(tmp_path, monkeypatch):
    """every_ms=1000, CUDA 'comes up' 0.3 s in: the first allocator sample follows within ~50 ms and
    the next second is sampled every 50 ms, so a one-second run still has a curve to judge."""
    import time
    from types import SimpleNamespace

    from oomdoctor.injob.record import recorder as rmod

    up_at = time.time() + 0.3
    fake = SimpleNamespace(cuda=SimpleNamespace())
    monkeypatch.setattr(probes, "cuda_ready", lambda: fake if time.time() >= up_at else None)
    monkeypatch.setattr(probes, "busiest_device", lambda torch: 0)
    monkeypatch.setattr(probes, "allocator", lambda torch, dev: {"allocated": int(time.time() * 1000) % 10**9})
    monkeypatch.setattr(rmod.Recorder, "_attach", lambda self, torch: setattr(self, "_cuda_attached", True))
    rec = Recorder(str(tmp_path / "run"), every_ms=1000).start()
    time.sleep(1.5)
    rec.stop(final_snapshot=False)
    samples = [r for r in _records(tmp_path / "run") if r["kind"] == "sample" and "allocated" in r]
    assert samples and samples[0]["t"] - up_at < 0.25
    assert len(samples) >= 10


def test_cgroup_readings_follow_the_path_in_proc_self_cgroup(tmp_path):
    """On a host, a VM or a Slurm step (no cgroup namespace) the job's cgroup is under the path /proc/self/cgroup
    names; the top is the root cgroup, without memory.current (an H200 VM recorded no cgroup reading, session 27).
    A parent's limit binds: the tightest one on the way up is the limit."""
    from oomdoctor.injob.record import probes

    (tmp_path / "proc/self").mkdir(parents=True)
    (tmp_path / "proc/self/cgroup").write_text("0::/slurm/uid_0/job_7/step_0\n")
    job = tmp_path / "sys/fs/cgroup/slurm/uid_0/job_7"
    (job / "step_0").mkdir(parents=True)
    (job / "memory.max").write_text(f"{3 << 30}\n")
    (job.parent / "memory.max").write_text(f"{8 << 30}\n")
    (job / "step_0/memory.max").write_text("max\n")
    (job / "step_0/memory.current").write_text(f"{1 << 30}\n")
    (job / "step_0/memory.events").write_text("low 0\nhigh 0\nmax 9\noom 1\noom_kill 1\n")
    (tmp_path / "sys/fs/cgroup/memory.max").write_text("max\n")
    assert probes.cgroup_memory(str(tmp_path)) == {"cgroup_current": 1 << 30, "cgroup_limit": 3 << 30,
                                                   "cgroup_oom_kill": 1}
    (job / "step_0/memory.stat").write_text(f"anon {600 << 20}\nfile {400 << 20}\nkernel 1\nshmem {24 << 20}\n")
    assert probes.cgroup_memory(str(tmp_path))["cgroup_anon"] == 624 << 20  # what the kernel cannot take back
    v1 = tmp_path / "v1"
    (v1 / "proc/self").mkdir(parents=True)
    (v1 / "proc/self/cgroup").write_text("5:memory:/kubepods/pod1/c1\n0::/\n")
    mem = v1 / "sys/fs/cgroup/memory/kubepods/pod1/c1"
    mem.mkdir(parents=True)
    (mem / "memory.usage_in_bytes").write_text("4096\n")
    (mem / "memory.limit_in_bytes").write_text("9223372036854771712\n")
    (mem.parent / "memory.limit_in_bytes").write_text(f"{1 << 30}\n")
    (mem / "memory.stat").write_text("cache 10\nrss 1\nshmem 0\ntotal_cache 10\ntotal_rss 2048\ntotal_shmem 0\n")
    assert probes.cgroup_memory(str(v1)) == {"cgroup_current": 4096, "cgroup_limit": 1 << 30, "cgroup_anon": 2048}


def test_cgroup_oom_kill_count_and_host_meminfo_are_read(tmp_path):
    """The evidence a SIGKILL's verdict needs (session 27): the cgroup's oom_kill count (v2 memory.events, v1
    memory.oom_control) and the machine's MemAvailable / MemTotal."""
    from oomdoctor.injob.record import probes

    v2 = tmp_path / "v2" / "sys/fs/cgroup"
    v2.mkdir(parents=True)
    (v2 / "memory.events").write_text("low 0\nhigh 0\nmax 3\noom 2\noom_kill 2\noom_group_kill 0\n")
    (v2 / "memory.current").write_text("1048576\n")
    assert probes.cgroup_memory(str(tmp_path / "v2")) == {"cgroup_current": 1048576, "cgroup_oom_kill": 2}
    v1 = tmp_path / "v1" / "sys/fs/cgroup/memory"
    v1.mkdir(parents=True)
    (v1 / "memory.oom_control").write_text("oom_kill_disable 0\nunder_oom 0\noom_kill 5\n")
    assert probes.cgroup_oom_kills(str(tmp_path / "v1")) == 5
    assert probes.cgroup_oom_kills(str(tmp_path / "none")) is None
    mi = tmp_path / "meminfo"
    mi.write_text("MemTotal:       24684084 kB\nMemFree:        20357916 kB\nMemAvailable:   22210212 kB\n")
    assert probes.host_meminfo(str(mi)) == {"mem_total": 24684084 * 1024, "mem_available": 22210212 * 1024}
    assert probes.host_meminfo(str(tmp_path / "nothing")) == {}


def _fake_dmesg(tmp_path, monkeypatch, body: str) -> None:
    """A `dmesg` first on PATH: a Python script whose body prints (or sleeps, or fails)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    exe = bin_dir / "dmesg"
    exe.write_text(f"#!{sys.executable}\nimport sys, time\n{body}\n")
    exe.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")


def _kill_line(t: float, pid: int, comm: str = "python") -> str:
    return (f"[{t:12.6f}] Memory cgroup out of memory: Killed process {pid} ({comm}) total-vm:1kB, anon-rss:2kB, "
            "file-rss:0kB, shmem-rss:0kB, UID:0 pgtables:1kB oom_score_adj:0")


def test_the_kernel_log_is_asked_about_the_jobs_pids(tmp_path, monkeypatch):
    """After a SIGKILL, `dmesg` decides whether the OOM killer killed one of the job's processes."""
    from oomdoctor.injob.record import kernel_kills

    _fake_dmesg(tmp_path, monkeypatch, f"print({_kill_line(100.0, 4242)!r})")
    got = kernel_kills.kernel_oom_kills({4242: {"python"}, 7: {"sh"}}, 50.0)
    assert got["kernel_oom_kill"] is True and got["kernel_oom_kills"][0]["pid"] == 4242
    assert kernel_kills.kernel_oom_kills({4243: {"python"}}, 50.0) == {"kernel_oom_kills": [], "kernel_oom_kill": False}


def test_a_kill_before_the_job_started_is_not_the_jobs(tmp_path, monkeypatch):
    """The ring buffer holds kills since boot; the pid number of an old kill may be the job's now (review)."""
    from oomdoctor.injob.record import kernel_kills, launch

    _fake_dmesg(tmp_path, monkeypatch, f"print({_kill_line(5.0, 4242)!r})")
    assert kernel_kills.kernel_oom_kills({4242: {"python"}}, 50.0)["kernel_oom_kill"] is False
    assert launch.kernel_oom_kill({4242}, 50.0)["kernel_oom_kills"] == []


def test_a_kill_of_another_program_with_the_jobs_pid_is_not_the_jobs(tmp_path, monkeypatch):
    from oomdoctor.injob.record import kernel_kills

    _fake_dmesg(tmp_path, monkeypatch, f"print({_kill_line(100.0, 4242, 'postgres')!r})")
    got = kernel_kills.kernel_oom_kills({4242: {"python"}}, 50.0)
    assert got["kernel_oom_kill"] is False and got["kernel_oom_kills"][0]["comm_match"] is False


def test_in_another_pid_namespace_the_name_and_time_match_with_the_jobs_oom_kill_count(tmp_path, monkeypatch):
    """A container's kernel log names the host's pids: no pid match there is not evidence against. A name alone is
    not enough (another container's process may have it): the job's cgroup's oom_kill count must have risen."""
    from oomdoctor.injob.record import kernel_kills

    _fake_dmesg(tmp_path, monkeypatch, f"print({_kill_line(100.0, 98765, 'trainer')!r})")
    assert kernel_kills.kernel_oom_kills({2: {"trainer"}}, 50.0, "other", oom_kill_rose=True)["kernel_oom_kill"] is True
    alone = kernel_kills.kernel_oom_kills({2: {"trainer"}}, 50.0, "other")
    assert "kernel_oom_kill" not in alone and "nothing else ties it to the job" in alone["kernel_log"]
    got = kernel_kills.kernel_oom_kills({2: {"python"}}, 50.0, "other", oom_kill_rose=True)
    assert "kernel_oom_kill" not in got and "another pid namespace" in got["kernel_log"]


def test_the_pid_namespace_is_told_from_proc(tmp_path):
    from oomdoctor.injob.record import kernel_kills

    (tmp_path / "self" / "ns").mkdir(parents=True)
    (tmp_path / "self" / "status").write_text("Name:\tpython\nNSpid:\t81234\t2\n")
    assert kernel_kills.pid_namespace(str(tmp_path)) == "other"
    (tmp_path / "self" / "status").write_text("Name:\tpython\nNSpid:\t2\n")
    assert kernel_kills.pid_namespace(str(tmp_path)) == "unknown"
    (tmp_path / "self" / "ns" / "pid").write_text("")  # a file, not the host's namespace inode
    assert kernel_kills.pid_namespace(str(tmp_path)) == "other"
    assert kernel_kills.pid_namespace("/proc") in ("init", "other")


@pytest.mark.parametrize(("body", "says"), [
    ("sys.stderr.write('dmesg: read kernel buffer failed: Operation not permitted\\n'); sys.exit(1)",
     "dmesg denied: dmesg: read kernel buffer failed"),
    ("time.sleep(30)", "timed out"),
])
def test_a_kernel_log_that_cannot_be_read_is_said_so(tmp_path, monkeypatch, body, says):
    from oomdoctor.injob.record import kernel_kills, launch

    _fake_dmesg(tmp_path, monkeypatch, body)
    t0 = time.monotonic()
    got = kernel_kills.kernel_oom_kills({4242: {"python"}}, 50.0)
    assert time.monotonic() - t0 < 10
    assert "kernel_oom_kill" not in got and says in got["kernel_log"], got
    assert says in launch.kernel_oom_kill({4242})["kernel_log"]


def test_kept_kill_lines_pass_the_redactor(tmp_path, monkeypatch):
    from oomdoctor.injob.record import kernel_kills

    line = _kill_line(100.0, 4242) + " HF_TOKEN=hf_abcdefghijklmnopqrstuvwxyz0123456789"
    _fake_dmesg(tmp_path, monkeypatch, "\n".join(f"print({line.replace('100.000000', f'{100 + i}.000000')!r})"
                                                  for i in range(30)))
    kept = kernel_kills.kernel_oom_kills({4242: {"python"}}, 50.0)["kernel_oom_kills"]
    assert len(kept) == kernel_kills.MAX_LINES
    assert all("hf_abcdefghij" not in k["text"] for k in kept)
