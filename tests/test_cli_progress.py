"""Progress on stderr: a spinner only for a colour terminal; NO_COLOR, a pipe or --format json get none.

stderr is a real pseudo-terminal here (os.openpty), because rich animates only for a terminal: under
NO_COLOR it still animated and still wrote ESC[2m for `[dim]` until cli.common.progress/stderr_console.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading

import pytest

ANSI = re.compile(rb"\x1b\[")
SPINNER = re.compile("[\u2800-\u28ff]")  # rich's default 'dots' frames are braille characters

MLP = """
import torch

def build(batch_size):
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 4))
    return {"model": model, "inputs": (torch.randn(batch_size, 64),),
            "target": torch.randint(0, 4, (batch_size,)), "loss": torch.nn.functional.cross_entropy}
"""


def _openpty() -> tuple[int, int]:
    try:
        return os.openpty()
    except OSError as exc:  # a container without /dev/ptmx
        pytest.skip(f"no pseudo-terminal here: {exc}")


def _run(argv: list[str], *, tty: bool, **env: str) -> tuple[int, str, bytes]:
    """(exit code, stdout, stderr bytes) of `python -m oomdoctor ARGV`; stderr a pty when tty."""
    full_env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "FORCE_COLOR", "TERM")}
    full_env.update({"TERM": "xterm-256color", "COLUMNS": "100", **env})
    master = slave = None
    if tty:
        master, slave = _openpty()
    proc = subprocess.Popen([sys.executable, "-W", "ignore", "-m", "oomdoctor", *argv], stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=slave if tty else subprocess.PIPE, env=full_env)
    chunks: list[bytes] = []
    reader = None
    if tty:
        os.close(slave)

        def drain() -> None:  # a pty holds ~4 KiB: read while the child writes
            while True:
                try:
                    data = os.read(master, 4096)
                except OSError:
                    return
                if not data:
                    return
                chunks.append(data)

        reader = threading.Thread(target=drain, daemon=True)
        reader.start()
    out, err = proc.communicate(timeout=180)
    if reader is not None:
        reader.join(timeout=10)
        os.close(master)
        err = b"".join(chunks)
    return proc.returncode, out.decode(), err


@pytest.fixture(scope="module")
def mlp(tmp_path_factory):
    pytest.importorskip("torch")
    p = tmp_path_factory.mktemp("w") / "mlp.py"
    p.write_text(MLP)
    return str(p)


def test_spinner_on_a_colour_terminal(mlp):
    """The control: the harness does see rich's animation when it is wanted."""
    rc, out, err = _run(["estimate", mlp, "--batch-size", "8"], tty=True)
    assert rc == 0 and "peak reserved" in out
    assert SPINNER.search(err.decode(errors="replace")) and ANSI.search(err)


@pytest.mark.parametrize("env", [{"NO_COLOR": "1"}, {"TERM": "dumb"}], ids=["no_color", "dumb"])
def test_terminal_without_colour_gets_one_plain_line(mlp, env):
    rc, out, err = _run(["estimate", mlp, "--batch-size", "8"], tty=True, **env)
    assert rc == 0 and "peak reserved" in out
    text = err.decode(errors="replace")
    assert not ANSI.search(err) and not SPINNER.search(text), err[:300]
    lines = [ln for ln in text.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("tracing ") and "batch size 8" in lines[0]


def test_pipe_gets_no_progress_and_no_escapes(mlp):
    """A log or a pipe: the report on stdout only; stderr stays empty (bad input stays one line there)."""
    rc, out, err = _run(["estimate", mlp, "--batch-size", "8"], tty=False, NO_COLOR="1")
    assert rc == 0 and "peak reserved" in out and not ANSI.search(out.encode())
    assert err.strip() == b"", err[:300]


def test_json_gets_no_progress_at_all(mlp):
    rc, out, err = _run(["estimate", mlp, "--batch-size", "8", "--format", "json"], tty=True)
    assert rc == 0 and json.loads(out)["batch_size"] == 8
    assert err.strip() == b"", err[:300]


@pytest.mark.parametrize("env,plain", [({"NO_COLOR": "1"}, True), ({}, False)])
def test_stderr_console_is_plain_under_no_color(env, plain):
    """max-batch's trial lines use stderr_console: `[dim]` must not become ESC[2m under NO_COLOR."""
    code = "from oomdoctor.cli.common import stderr_console; stderr_console().print('[dim]trial[/dim]: batch 8')"
    master, slave = _openpty()
    full_env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "FORCE_COLOR")}
    proc = subprocess.run([sys.executable, "-c", code], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=slave,
                          env={**full_env, "TERM": "xterm-256color", **env}, timeout=60)
    os.close(slave)
    err = os.read(master, 4096)
    os.close(master)
    assert proc.returncode == 0 and b"trial: batch 8" in err.replace(b"\x1b[2m", b"").replace(b"\x1b[0m", b"")
    assert bool(ANSI.search(err)) is not plain, err
