"""`oomdoctor record -- CMD`: the command behaves exactly as without us (argv, output, exit, signals)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _env(**extra):
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT / "src")
    env.update(extra)
    return env


def _record(tmp_path, *cmd, run="run", **kw):
    return subprocess.run([sys.executable, "-m", "oomdoctor", "record", "-q", "--dir", str(tmp_path / run),
                           "--every-ms", "50", "--", *cmd], capture_output=True, env=_env(), cwd=tmp_path,
                          timeout=120, **kw)


SCRIPT = """
import sys, oomdoctor
data = sys.stdin.read()
for i in range(5):
    oomdoctor.step()
print("argv=" + repr(sys.argv[1:]) + " stdin=" + repr(data))
print("err line", file=sys.stderr)
sys.exit(int(sys.argv[1]))
"""


@pytest.mark.parametrize("code", [0, 3, 42])
def test_exit_code_output_and_argv_pass_through(tmp_path, code):
    script = tmp_path / "job.py"
    script.write_text(SCRIPT)
    args = [sys.executable, str(script), str(code), "a b", "--flag=1"]
    plain = subprocess.run(args, input=b"hello", capture_output=True, env=_env(), cwd=tmp_path)
    rec = _record(tmp_path, *args, input=b"hello")
    assert rec.returncode == plain.returncode == code
    assert rec.stdout == plain.stdout
    assert rec.stderr == plain.stderr  # -q: nothing of ours
    timeline = list((tmp_path / "run").glob("timeline-*.jsonl"))
    assert len(timeline) == 1
    kinds = [json.loads(x)["kind"] for x in timeline[0].read_text().splitlines()]
    assert kinds.count("step") == 5
    meta = json.loads((tmp_path / "run" / "run.json").read_text())
    assert meta["returncode"] == code and meta["argv"] == args
    assert (tmp_path / "run" / "outside.jsonl").exists()
    assert not (tmp_path / "run" / ".bootstrap").exists()


def test_non_python_command_and_missing_command(tmp_path):
    rec = _record(tmp_path, "sh", "-c", "echo hi; exit 5")
    assert rec.returncode == 5 and rec.stdout == b"hi\n"
    rec = _record(tmp_path, "no-such-command-xyz", run="run2")
    assert rec.returncode == 127
    assert b"no-such-command-xyz" in rec.stderr


def test_usage_errors(tmp_path):
    rec = _record(tmp_path)
    assert rec.returncode == 2 and b"needs a command" in rec.stderr


def test_existing_sitecustomize_still_runs(tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text("import os\nos.environ['USER_SITECUSTOMIZE_RAN'] = 'yes'\n")
    script = tmp_path / "job.py"
    script.write_text("import os, sys\nprint(os.environ.get('USER_SITECUSTOMIZE_RAN'))\n"
                      "print('oomdoctor.injob.record' in sys.modules)\n")
    env = _env()
    env["PYTHONPATH"] = f"{ROOT / 'src'}{os.pathsep}{site}"
    rec = subprocess.run([sys.executable, "-m", "oomdoctor", "record", "-q", "--dir", str(tmp_path / "run"),
                          "--", sys.executable, str(script)], capture_output=True, env=env, timeout=120)
    assert rec.stdout.split() == [b"yes", b"True"]


def test_broken_recorder_does_not_stop_the_job(tmp_path):
    # the run dir cannot be created: the command must still run, unchanged
    (tmp_path / "blocker").write_text("x")
    rec = subprocess.run([sys.executable, "-m", "oomdoctor", "record", "--dir", str(tmp_path / "blocker" / "run"),
                          "--", sys.executable, "-c", "print('trained'); raise SystemExit(4)"],
                         capture_output=True, env=_env(), timeout=120)
    assert rec.returncode == 4 and rec.stdout == b"trained\n"
    assert b"running the command without recording" in rec.stderr


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signals_are_forwarded_and_death_is_passed_through(tmp_path, sig):
    script = tmp_path / "sleeper.py"
    script.write_text(
        "import signal, sys, time\n"
        "def h(n, f):\n    print('got', n, flush=True); sys.exit(17)\n"
        f"signal.signal({int(sig)}, h)\n"
        "print('ready', flush=True)\ntime.sleep(60)\n")
    proc = subprocess.Popen([sys.executable, "-m", "oomdoctor", "record", "-q", "--dir", str(tmp_path / "run"),
                             "--", sys.executable, str(script)], stdout=subprocess.PIPE, env=_env(),
                            start_new_session=True)
    assert proc.stdout.readline() == b"ready\n"
    proc.send_signal(sig)  # to the wrapper only, as kubelet or `kill` would
    out, _ = proc.communicate(timeout=60)
    assert out == f"got {int(sig)}\n".encode()
    assert proc.returncode == 17


DISPOSITIONS = "import signal; print([signal.getsignal(s) == signal.SIG_IGN for s in (signal.SIGHUP, signal.SIGINT, signal.SIGQUIT)])"


def test_ignored_signals_stay_ignored_for_the_job(tmp_path):
    """nohup ignores SIGHUP, a shell's `&` SIGINT and SIGQUIT: the job must inherit that as without us."""
    ignore = "trap '' HUP INT QUIT; exec \"$@\""
    job = [sys.executable, "-c", DISPOSITIONS]
    plain = subprocess.run(["sh", "-c", ignore, "sh", *job], capture_output=True, env=_env(), timeout=60)
    rec = subprocess.run(["sh", "-c", ignore, "sh", sys.executable, "-m", "oomdoctor", "record", "-q", "--dir",
                          str(tmp_path / "run"), "--", *job], capture_output=True, env=_env(), timeout=120)
    assert plain.stdout == b"[True, True, True]\n"
    assert rec.returncode == 0 and rec.stdout == plain.stdout


def test_hangup_of_the_process_group_under_nohup_does_not_kill_the_job(tmp_path):
    """Session 27: under nohup, a SIGHUP to the whole group killed the recorded job (a spawn Pool test died of it
    in CI), though the same job without record ignores it."""
    script = tmp_path / "job.py"
    script.write_text("import sys, time\nprint('ready', flush=True)\nsys.stdin.readline()\nprint('done')\n")
    proc = subprocess.Popen(["sh", "-c", "trap '' HUP; exec \"$@\"", "sh", sys.executable, "-m", "oomdoctor", "record",
                             "-q", "--dir", str(tmp_path / "run"), "--", sys.executable, str(script)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=_env(), start_new_session=True)
    try:
        assert proc.stdout.readline() == b"ready\n"
        os.killpg(proc.pid, signal.SIGHUP)  # as a hangup reaches every process of the group
        time.sleep(0.5)
        out, _ = proc.communicate(b"go\n", timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 0 and out == b"done\n"


def test_child_killed_by_signal_kills_wrapper_the_same_way(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "oomdoctor", "record", "-q", "--dir", str(tmp_path / "run"),
                           "--", sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"],
                          env=_env(), timeout=120)
    assert proc.returncode == -signal.SIGKILL
    meta = json.loads((tmp_path / "run" / "run.json").read_text())
    assert meta["signal"] == "SIGKILL"
    report = subprocess.run([sys.executable, "-m", "oomdoctor", "report", str(tmp_path / "run")],
                            capture_output=True, env=_env(), timeout=120)
    assert report.returncode == 1 and b"host_oom" in report.stdout


def test_steps_made_before_a_sigkill_are_kept(tmp_path):
    """Walkthrough (session 26): step records waited in memory for the sampler's next flush (every_ms), so a job
    killed by SIGKILL lost them: a short run's report said "0 steps". They are written through now."""
    script = tmp_path / "killed.py"
    script.write_text("import os, signal, oomdoctor\nfor i in range(8):\n    oomdoctor.step()\n"
                      "os.kill(os.getpid(), signal.SIGKILL)\n")
    proc = subprocess.run([sys.executable, "-m", "oomdoctor", "record", "-q", "--dir", str(tmp_path / "run"),
                           "--every-ms", "5000", "--", sys.executable, str(script)], env=_env(), timeout=120)
    assert proc.returncode == -signal.SIGKILL
    report = subprocess.run([sys.executable, "-m", "oomdoctor", "report", "--format", "json", str(tmp_path / "run")],
                            capture_output=True, env=_env(), timeout=120)
    doc = json.loads(report.stdout)
    assert doc["processes"][0]["steps"] == 8
    assert any("step 8" in e for e in doc["verdict"]["evidence"])
    meta = json.loads((tmp_path / "run" / "run.json").read_text())
    assert "kernel_oom_kill" in meta or "kernel_log" in meta  # the kernel log was asked about the kill


def test_multiprocessing_helpers_are_not_recorded(tmp_path):
    script = tmp_path / "mp.py"
    script.write_text("import multiprocessing as mp\n"
                      "def f(x):\n    return x * 2\n"
                      "if __name__ == '__main__':\n"
                      "    with mp.get_context('spawn').Pool(2) as p:\n        print(sum(p.map(f, range(4))))\n")
    rec = _record(tmp_path, sys.executable, str(script))
    assert rec.returncode == 0 and rec.stdout == b"12\n"
    time.sleep(0.1)
    assert len(list((tmp_path / "run").glob("timeline-*.jsonl"))) == 1


def test_prometheus_endpoint_while_the_job_runs(tmp_path):
    import socket
    import urllib.request

    prom = pytest.importorskip("prometheus_client.parser")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    script = tmp_path / "job.py"
    script.write_text("import sys, time, oomdoctor\nfor i in range(3):\n    oomdoctor.step()\n"
                      "print('stepped', flush=True)\nsys.stdin.readline()\n")
    proc = subprocess.Popen([sys.executable, "-m", "oomdoctor", "record", "-q", "--dir", str(tmp_path / "run"),
                             "--every-ms", "50", "--prometheus", str(port), "--", sys.executable, str(script)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=_env())
    try:
        assert proc.stdout.readline() == b"stepped\n"
        body = ""
        for _ in range(100):
            try:
                body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
            except OSError:
                time.sleep(0.1)
                continue
            if 'oomdoctor_step{rank="pid' in body and "} 3.0" in body:
                break
            time.sleep(0.1)
        samples = {s.name: s for fam in prom.text_string_to_metric_families(body) for s in fam.samples}
        assert samples["oomdoctor_step"].value == 3
        assert samples["oomdoctor_process_rss_bytes"].value > 0
    finally:
        proc.communicate(b"\n", timeout=60)
    assert proc.returncode == 0


KILLED_CHILD = """
import os, signal, sys, time
with open(sys.argv[1], "w") as f:
    f.write(f"{os.getpid()} {open('/proc/self/comm').read().strip()}")
time.sleep(1.0)
os.kill(os.getpid(), signal.SIGKILL)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the kernel log and /proc are Linux's")
@pytest.mark.parametrize(("when", "oom"), [("now", True), ("before the start", False)])
def test_a_shell_reporting_137_asks_the_kernel_log_about_the_jobs_process(tmp_path, when, oom):
    """`sh -c 'python child.py'` reports the child's SIGKILL as exit 137; the kernel log's kill of that child (by pid,
    name and a time after the start) makes the OOM firm; the same pid killed before the job started does not."""
    (tmp_path / "child.py").write_text(KILLED_CHILD)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    stamp = "time.monotonic()" if when == "now" else "1.0"
    (bin_dir / "dmesg").write_text(
        f"#!{sys.executable}\nimport time\npid, comm = open({str(tmp_path / 'childpid')!r}).read().split()\n"
        f"print(f'[{{{stamp}:12.6f}}] Memory cgroup out of memory: Killed process {{pid}} ({{comm}}) total-vm:1kB, "
        "anon-rss:2kB, file-rss:0kB, shmem-rss:0kB, UID:0 pgtables:1kB oom_score_adj:0')\n")
    (bin_dir / "dmesg").chmod(0o755)
    proc = subprocess.run([sys.executable, "-m", "oomdoctor", "record", "-q", "--dir", str(tmp_path / "run"),
                           "--every-ms", "50", "--", "sh", "-c", f"{sys.executable} child.py childpid; exit $?"],
                          capture_output=True, cwd=tmp_path, timeout=120,
                          env=_env(PATH=f"{bin_dir}:{os.environ.get('PATH', '/usr/bin:/bin')}"))
    assert proc.returncode == 137, proc.stderr
    meta = json.loads((tmp_path / "run" / "run.json").read_text())
    if meta.get("pid_namespace") == "other":
        pytest.skip("run inside a container's own pid namespace: pids are not matched there")
    assert meta["kernel_oom_kill"] is oom, meta
    assert len(meta["kernel_oom_kills"]) == (1 if oom else 0)
    report = subprocess.run([sys.executable, "-m", "oomdoctor", "report", "--format", "json", str(tmp_path / "run")],
                            capture_output=True, env=_env(), timeout=120)
    doc = json.loads(report.stdout)
    assert doc["verdict"]["confidence"] == ("high" if oom else "low"), doc["verdict"]
    assert doc["ended"].startswith("exit 137")
