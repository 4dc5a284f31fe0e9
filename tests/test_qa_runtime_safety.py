"""QA pass: oomdoctor never hurts the user's job (no torch/CUDA in-process, time limits, errors contained)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from oomdoctor.collectors import context

ROOT = Path(__file__).resolve().parents[1]


def test_import_and_doctor_do_not_import_torch_in_process():
    code = textwrap.dedent("""
        import contextlib, io, sys
        import oomdoctor
        assert "torch" not in sys.modules, "import oomdoctor"
        from oomdoctor.cli import main
        with contextlib.redirect_stdout(io.StringIO()):
            for argv in (["doctor"], ["doctor", "--format", "json"], ["doctor", "--bundle", sys.argv[1]]):
                main(argv)
                assert "torch" not in sys.modules, argv
        print("clean")
    """)
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(ROOT / "src")}  # PATH: the refused dmesg (conftest)
    res = subprocess.run([sys.executable, "-c", code, str(ROOT / "examples" / "seed-a100-k8s")],
                         capture_output=True, text=True, timeout=120, env=env)
    assert res.returncode == 0 and "clean" in res.stdout, res.stderr[-2000:]


class _Unkillable:
    """A child stuck in uninterruptible sleep (nvidia-smi on a GPU that fell off the bus): SIGKILL does
    not take effect, so wait() without a limit never returns."""

    def __init__(self, *args, **kwargs):
        self.stdout = self.stderr = None
        self.returncode = None
        self.killed = False

    def communicate(self, timeout=None):
        raise subprocess.TimeoutExpired("nvidia-smi", timeout)

    def kill(self):
        self.killed = True

    def wait(self, timeout=None):
        if timeout is None:
            raise AssertionError("waited without a time limit for a process that cannot die")
        raise subprocess.TimeoutExpired("nvidia-smi", timeout)


def test_command_runner_gives_up_on_a_process_that_survives_kill(monkeypatch):
    monkeypatch.setattr(context.subprocess, "Popen", _Unkillable)
    res = context.CommandRunner().run(["nvidia-smi", "-q", "-x"], timeout=0.1)
    assert res.returncode is None and "timed out" in (res.error or "")


def test_command_runner_times_out_a_real_command():
    t0 = time.monotonic()
    res = context.CommandRunner().run([sys.executable, "-c", "import time; time.sleep(30)"], timeout=0.5)
    assert "timed out after 0.5 s" in (res.error or "")
    assert time.monotonic() - t0 < 20


def test_command_runner_still_returns_output():
    res = context.CommandRunner().run([sys.executable, "-c", "import sys; print('hi'); sys.exit(3)"])
    assert (res.returncode, res.stdout.strip(), res.error) == (3, "hi", None)


def test_every_subprocess_call_in_src_has_a_timeout():
    """Each call that starts a process passes timeout=, or waits with one (communicate(timeout=...));
    the only exception is `record`, whose child is the user's job itself."""
    import ast

    starters = {"run", "Popen", "call", "check_call", "check_output", "system", "popen"}
    found, missing = [], []
    for path in (ROOT / "src").rglob("*.py"):
        source = path.read_text()
        tree = ast.parse(source)
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and isinstance(node.func.value, ast.Name) and node.func.value.id in ("subprocess", "os")
                    and node.func.attr in starters):
                continue
            if node.func.value.id == "os" and node.func.attr not in ("system", "popen"):
                continue
            where = f"{path.relative_to(ROOT)}:{node.lineno}"
            found.append(where)
            if where.startswith("src/oomdoctor/injob/record/launch.py"):
                continue
            limited = any(k.arg == "timeout" for k in node.keywords) or (
                node.func.attr == "Popen" and "communicate(timeout=" in source)
            if not limited:
                missing.append(where)
    assert found and not missing, missing


def test_watch_survives_recorder_internals_that_raise(tmp_path, monkeypatch):
    """Every probe and the writer raising: the user's block runs to the end and its own error is unchanged."""
    import oomdoctor
    from oomdoctor.injob.record import probes, recorder

    def boom(*a, **k):
        raise RuntimeError("recorder bug")

    for name in ("host_rss", "cuda_ready", "allocator"):
        if hasattr(probes, name):
            monkeypatch.setattr(probes, name, boom)
    monkeypatch.setattr(recorder.Recorder, "_tick", recorder._guard(boom))
    done = []
    with pytest.raises(ValueError, match="user's own error"):
        with oomdoctor.watch(str(tmp_path / "run"), every_ms=10):
            for i in range(5):
                oomdoctor.step()
                done.append(i)
            time.sleep(0.05)
            raise ValueError("user's own error")
    assert done == list(range(5))


def test_watch_with_an_unwritable_run_dir_still_runs_the_block(tmp_path):
    import oomdoctor

    blocker = tmp_path / "file"
    blocker.write_text("")
    ran = False
    with oomdoctor.watch(str(blocker / "run")):
        oomdoctor.step()
        ran = True
    assert ran


def test_max_batch_trial_that_survives_kill_is_a_timeout_not_a_hang(monkeypatch):
    from oomdoctor.trials import max_batch

    monkeypatch.setattr(max_batch.subprocess, "Popen", _Unkillable)
    out = max_batch.run_child(["w.py", "--batch", "1"], timeout=0.1)
    assert out["outcome"] == "timeout"
