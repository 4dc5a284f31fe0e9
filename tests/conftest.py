"""Shared fixtures. Tests never touch the real machine's /proc, GPU or environment unless marked gpu.

Nor its kernel log: `doctor`, `bundle`, `explain --here`, `record` (its machine facts at the start, its look after a
failed run) and watch() at an OOM run `dmesg`, and an OOM kill, Xid or NVRM line there would change what a test sees.
So a refused `dmesg` and `journalctl`, as in most containers, come first on PATH for the whole session, set before
any test module is imported (an environment a module builds at import carries it too). A test that injects kill
lines puts its own `dmesg` before this one; one that builds a subprocess's environment takes PATH from os.environ.
"""

from __future__ import annotations

import os
import shutil
import tempfile

import pytest

_REFUSED = {
    "dmesg": "dmesg: read kernel buffer failed: Operation not permitted",
    "journalctl": "No journal files were opened due to insufficient permissions: Operation not permitted",
}
_seam: dict[str, str | None] = {}


def pytest_configure(config):
    bin_dir = tempfile.mkdtemp(prefix="oomdoctor-refused-kernel-log-")
    for name, message in _REFUSED.items():
        exe = os.path.join(bin_dir, name)
        with open(exe, "w", encoding="utf-8") as f:  # /bin/sh: starts in a millisecond, a Python script in 30
            f.write(f"#!/bin/sh\necho '{message}' >&2\nexit 1\n")
        os.chmod(exe, 0o755)
    _seam.update(dir=bin_dir, path=os.environ.get("PATH"))
    os.environ["PATH"] = f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '/usr/bin:/bin')}"


def pytest_unconfigure(config):
    if "dir" not in _seam:
        return
    path = _seam.pop("path")
    if path is None:
        os.environ.pop("PATH", None)
    else:
        os.environ["PATH"] = path
    shutil.rmtree(str(_seam.pop("dir")), ignore_errors=True)


def _has_cuda() -> bool:
    try:
        import pynvml

        pynvml.nvmlInit()
        n = pynvml.nvmlDeviceGetCount()
        pynvml.nvmlShutdown()
        return n > 0
    except Exception:
        return False


def pytest_collection_modifyitems(config, items):
    if _has_cuda():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (NVML found none)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
