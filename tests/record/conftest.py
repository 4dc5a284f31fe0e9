"""The record tests never read the machine's kernel log: `record` reads it after any failed run (and the machine
facts collected at the start read it too), so a `dmesg` that is refused, as in most containers, comes first on
PATH. A test that injects kill lines puts its own `dmesg` before this one."""

from __future__ import annotations

import os
import sys

import pytest


@pytest.fixture(autouse=True)
def _restricted_dmesg(tmp_path_factory, monkeypatch):
    bin_dir = tmp_path_factory.mktemp("restricted-dmesg")
    exe = bin_dir / "dmesg"
    exe.write_text(f"#!{sys.executable}\nimport sys\n"
                   "sys.stderr.write('dmesg: read kernel buffer failed: Operation not permitted\\n')\nsys.exit(1)\n")
    exe.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ.get('PATH', '/usr/bin:/bin')}")
