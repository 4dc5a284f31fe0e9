"""QA pass: text output stays usable wherever it goes (pipes, NO_COLOR, non-UTF-8 stdout)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SEED = ROOT / "examples" / "seed-a100-k8s"
HEALTHY = ROOT / "tests" / "fixtures" / "bundles" / "healthy_node"
POD = ROOT / "tests" / "fixtures" / "configs" / "pod-nvidia-visible-all.yaml"

COMMANDS = {
    "doctor": ["doctor", "--bundle", str(SEED)],
    "diff": ["diff", str(HEALTHY), str(SEED)],
    "audit": ["audit", str(POD)],
    "explain": ["explain", "-"],
}
OOM_TEXT = "RuntimeError: CUDA error: out of memory\n§ CUDA kernel errors might be asynchronously reported…\n"


def _run(argv: list[str], **env: str) -> subprocess.CompletedProcess[bytes]:
    full = {**os.environ, "PYTHONPATH": str(ROOT / "src"), **env}
    full.pop("OOMDOCTOR_DEBUG", None)
    return subprocess.run([sys.executable, "-m", "oomdoctor", *argv], capture_output=True, timeout=120,
                          env=full, input=OOM_TEXT.encode())


@pytest.mark.parametrize("name", sorted(COMMANDS))
@pytest.mark.parametrize("encoding", ["ascii", "latin-1"])
def test_text_output_on_a_non_utf8_stdout_is_not_an_internal_error(name, encoding):
    res = _run(COMMANDS[name], PYTHONIOENCODING=encoding)
    assert res.returncode in (0, 1), res.stderr.decode(errors="replace")[-500:]
    assert res.stdout.strip()


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_piped_text_has_no_ansi_codes(name):
    res = _run(COMMANDS[name], TERM="xterm-256color")
    assert b"\x1b[" not in res.stdout and b"\x1b[" not in res.stderr
