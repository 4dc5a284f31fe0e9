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


def _run(argv: list[str], *, tty: bool, warnings: bool = False, **env: str) -> tuple[int, str, bytes]:
    """(exit code, stdout, stderr bytes) of `python -m oomdoctor ARGV`; stderr a pty when tty. Python's warnings
    are ignored unless `warnings`."""
    full_env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "FORCE_COLOR", "TERM", "PYTHONWARNINGS")}
    full_env.update({"TERM": "xterm-256color", "COLUMNS": "100", **env})
    master = slave = None
    if tty:
        master, slave = _openpty()
    proc = subprocess.Popen([sys.executable, "-W", "default" if warnings else "ignore", "-m", "oomdoctor", *argv],
                            stdin=subprocess.DEVNULL,
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


# A model whose library talks while it is traced, as transformers does: a logger with its own handler, made at import,
# so bound to the stderr of that moment (not to rich's redirect while the spinner runs), a warning in every forward;
# and a Python warning. Session 25: transformers' "`use_cache=True` is incompatible with gradient checkpointing" was
# written onto the spinner's line.
CHATTY = """
import logging, time, warnings
import torch

log = logging.getLogger("chattylib")
_handler = logging.StreamHandler()
_handler.setFormatter(logging.Formatter("[chattylib] %(message)s"))
log.addHandler(_handler)
log.propagate = False


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = torch.nn.Linear(64, 128), torch.nn.Linear(128, 4)

    def forward(self, x):
        log.warning("use_cache=True is incompatible with gradient checkpointing. Setting use_cache=False.")
        warnings.warn("chattylib: `enable` is deprecated, use `activate`", FutureWarning)
        return self.b(torch.relu(self.a(x)))


def build(batch_size):
    time.sleep(0.3)  # the spinner has drawn a frame
    print("chattylib: model built")  # on stdout, as some libraries do
    return {"model": Net(), "inputs": (torch.randn(batch_size, 64),),
            "target": torch.randint(0, 4, (batch_size,)), "loss": torch.nn.functional.cross_entropy}
"""
LOGGED = "[chattylib] use_cache=True is incompatible with gradient checkpointing. Setting use_cache=False."
WARNED = "FutureWarning: chattylib: `enable` is deprecated, use `activate`"


@pytest.fixture(scope="module")
def chatty(tmp_path_factory):
    pytest.importorskip("torch")
    p = tmp_path_factory.mktemp("w") / "chatty.py"
    p.write_text(CHATTY)
    return str(p)


def _lines(err: bytes) -> list[str]:
    """What a terminal keeps of each line: what was written after its last carriage return (rich returns and
    erases the line before each frame and before each line it prints above the spinner)."""
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", err.decode(errors="replace"))
    return [next((seg for seg in reversed(ln.split("\r")) if seg.strip()), "") for ln in text.split("\n")]


def test_library_warnings_during_the_spinner_get_lines_of_their_own_once(chatty):
    """Before: the logged warning was written after the spinner's text on its line, once per traced step."""
    rc, out, err = _run(["estimate", chatty, "--batch-size", "8"], tty=True, warnings=True)
    assert rc == 0 and "peak reserved" in out
    assert SPINNER.search(err.decode(errors="replace"))
    lines = _lines(err)
    mixed = [ln for ln in lines if "tracing " in ln and "chattylib" in ln]
    assert not mixed, mixed
    assert lines.count(LOGGED) == 1, lines
    assert sum(WARNED in ln for ln in lines) == 1, lines


@pytest.mark.parametrize("tty", [True, False], ids=["terminal", "pipe"])
def test_json_stdout_stays_json_and_library_warnings_go_to_stderr_once(chatty, tty):
    rc, out, err = _run(["estimate", chatty, "--max-batch", "--memory-limit", "256MiB", "--format", "json"], tty=tty,
                        warnings=True)
    assert rc == 0 and json.loads(out)["max_batch_size"] > 0
    lines = _lines(err)
    assert lines.count(LOGGED) == 1 and sum(WARNED in ln for ln in lines) == 1, lines
    assert "chattylib" not in out and "chattylib: model built" in lines


def test_warnings_from_a_library_are_not_swallowed_when_the_step_fails(tmp_path):
    """A config problem a library warns about, then the failure: both reach the user."""
    pytest.importorskip("torch")
    bad = tmp_path / "bad.py"
    bad.write_text(CHATTY.replace("return self.b(", "raise ValueError('hidden_size 3 is not divisible by 4 heads')\n"
                                  "        return self.b("))
    rc, out, err = _run(["estimate", str(bad), "--batch-size", "8"], tty=False, warnings=True)
    lines = [ln for ln in _lines(err) if ln.strip()]
    assert rc == 2 and out == ""
    assert lines.count(LOGGED) == 1 and "hidden_size 3" in lines[-1], lines


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
