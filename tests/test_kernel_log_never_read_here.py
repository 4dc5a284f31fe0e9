"""GIVEN any test WHEN the code under test runs `dmesg` (doctor, bundle, explain --here, record's machine facts at the
start and its look at the kernel log after a failed run, watch() at an OOM) THEN it gets a refused one, as in most
containers, never this machine's kernel log: an OOM kill, an Xid or an NVRM line in the real log would change what
the tests see. tests/conftest.py puts it first on PATH before any test module is imported (so an environment taken
at import time carries it too); a test that needs kill lines puts its own `dmesg` before it.

Found when `record` tests outside tests/record/ (test_security_record) read the real log: the refused `dmesg` was
only in tests/record/conftest.py."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from oomdoctor.collectors.context import CommandRunner
from oomdoctor.collectors.kernel_log import read_dmesg
from oomdoctor.collectors.machine import collect_live

ROOT = Path(__file__).parents[1]
ENV_AT_IMPORT = {**os.environ, "PYTHONPATH": str(ROOT / "src")}  # as test modules build theirs

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="dmesg and journalctl are Linux's")


@pytest.mark.parametrize("command", ["dmesg", "journalctl"])
def test_the_kernel_log_commands_on_path_are_refused(command):
    found = shutil.which(command)
    assert found is not None and not found.startswith(("/usr/", "/bin/", "/sbin/")), found
    res = subprocess.run([command, "-k"], capture_output=True, text=True, timeout=30)
    assert res.returncode != 0 and res.stdout == "" and "Operation not permitted" in res.stderr, res


def test_the_collectors_dmesg_is_denied():
    lines, why = read_dmesg(CommandRunner())
    assert lines is None and why.startswith("dmesg denied: dmesg: read kernel buffer failed"), why


def test_the_machine_facts_read_a_refused_kernel_log():
    """What `record` collects at the start (in a thread it does not wait for: env.json of a short job may be
    missing), `doctor` and `bundle` collect."""
    facts = collect_live(probe=False, import_torch=False)
    for key in ("kernel.oom_kills", "driver.xid_events", "driver.nvrm_errors"):
        entry = facts[key]
        assert not entry.available and entry.reason.startswith("dmesg denied"), entry


def test_a_failed_record_run_with_an_environment_taken_at_import_reads_a_refused_log(tmp_path):
    """A failed job: `record` reads the kernel log after it (run.json says what it found, or why it could not)."""
    run = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-m", "oomdoctor", "record", "-q", "--dir", str(run), "--",
                           sys.executable, "-c", "raise SystemExit(3)"],
                          capture_output=True, env=ENV_AT_IMPORT, timeout=120)
    assert proc.returncode == 3, proc.stderr
    meta = json.loads((run / "run.json").read_text())
    assert meta["kernel_log"].startswith("dmesg denied"), meta
    assert "kernel_oom_kills" not in meta
