"""Where collectors read from: a root directory, an environment, a GPU backend and a command runner.

Live: root "/", os.environ, NVML (or `nvidia-smi -q -x`), real commands with timeouts.
Bundle: root = the extracted bundle, its proc/self/environ, its commands/*.xml|json|txt, and no
commands at all. The collectors are the same code for both; only the context differs.
"""

from __future__ import annotations

import contextlib
import os
import socket
import stat
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from oomdoctor.parsers.gpu_snapshot import GpuSnapshot

PINNED_PREFIX = "/proc/self/fd/"
MAX_FILE_BYTES = 8 * 1024 * 1024  # no file we read is legitimately bigger; logs are read with their own cap


@dataclass(frozen=True)
class CommandResult:
    argv: tuple[str, ...]
    returncode: int | None
    stdout: str
    stderr: str
    error: str | None = None  # "not found", "timed out after 10 s", ...

    @property
    def ok(self) -> bool:
        return self.error is None and self.returncode == 0


class CommandRunner:
    """Runs external commands with a time limit; never raises."""

    def run(self, argv: Sequence[str], timeout: float = 10.0, env: Mapping[str, str] | None = None) -> CommandResult:
        try:
            proc = subprocess.Popen(list(argv), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    env=dict(env) if env is not None else None, stdin=subprocess.DEVNULL)
        except FileNotFoundError:
            return CommandResult(tuple(argv), None, "", "", f"{argv[0]}: not found")
        except OSError as exc:
            return CommandResult(tuple(argv), None, "", "", f"{argv[0]}: {exc.strerror or exc}")
        try:
            stdout, stderr = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            abandon(proc)
            return CommandResult(tuple(argv), None, "", "", f"{argv[0]}: timed out after {timeout:g} s")
        return CommandResult(tuple(argv), proc.returncode,
                             stdout[:MAX_FILE_BYTES].decode("utf-8", errors="replace"),
                             stderr[:65536].decode("utf-8", errors="replace"))


def abandon(proc: subprocess.Popen, grace: float = 2.0) -> None:
    """Kill a command that ran out of time, waiting for it only briefly.

    subprocess.run() waits without limit after the kill, and a process stuck in the kernel (nvidia-smi
    on a GPU that fell off the bus, Xid 79, sits in uninterruptible sleep) never dies: doctor would
    hang exactly on the machine it should diagnose. Such a process is left behind.
    """
    with contextlib.suppress(OSError):
        proc.kill()
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=grace)
    for pipe in (proc.stdout, proc.stderr):
        with contextlib.suppress(OSError):
            if pipe is not None:
                pipe.close()


class NoCommands(CommandRunner):
    """Bundle mode: nothing of the local machine may be run."""

    def run(self, argv: Sequence[str], timeout: float = 10.0, env: Mapping[str, str] | None = None) -> CommandResult:
        return CommandResult(tuple(argv), None, "", "", "not run: reading a bundle")


@dataclass
class CollectContext:
    root: Path
    env: Mapping[str, str]
    gpu: Any  # a GpuBackend (collectors.nvml); typed loosely to keep this module import-light
    runner: CommandRunner = field(default_factory=CommandRunner)
    bundle: bool = False
    self_pids: frozenset[int] = frozenset()
    meta: dict[str, Any] = field(default_factory=dict)
    # Bundle only: why the job's environment is unknown (no proc/self/environ). `oomdoctor bundle`
    # always writes it together with the marker files, so without it neither an unset variable nor
    # a missing marker proves that a layer is absent: such facts become Unavailable with this reason.
    env_missing: str | None = None
    _gpu_snapshot: GpuSnapshot | None = None

    @property
    def where(self) -> str:
        return "bundle" if self.bundle else "live"

    def path(self, rel: str) -> Path:
        return self.root / rel.lstrip("/")

    def label(self, rel: str) -> str:
        """How a source is named in evidence: '/proc/meminfo' live, 'bundle:proc/meminfo' offline."""
        return f"bundle:{rel.lstrip('/')}" if self.bundle else "/" + rel.lstrip("/")

    def _inside(self, p: Path) -> bool:
        if not self.bundle:
            return True
        try:
            p.resolve().relative_to(self.root.resolve())
            return True
        except (ValueError, OSError):
            pass
        try:  # a directory bundle's log, held open by the reader (collectors.bundle_safe._pin)
            p.parent.resolve().relative_to(self.root.resolve())
            return os.readlink(p).startswith(PINNED_PREFIX)
        except (ValueError, OSError):
            return False

    def exists(self, rel: str) -> bool:
        p = self.path(rel)
        try:
            return self._inside(p) and (p.exists() or p.is_symlink())
        except OSError:
            return False

    def read_bytes(self, rel: str, limit: int = MAX_FILE_BYTES) -> tuple[bytes | None, str]:
        """(content, "") or (None, why not). Never raises."""
        p = self.path(rel)
        if not self._inside(p):
            return None, f"{self.label(rel)} points outside the bundle"
        try:
            with open(p, "rb") as fh:
                return fh.read(limit), ""
        except FileNotFoundError:
            return None, f"{self.label(rel)} not present"
        except PermissionError:
            return None, f"{self.label(rel)}: permission denied"
        except IsADirectoryError:
            return None, f"{self.label(rel)} is a directory"
        except OSError as exc:
            return None, f"{self.label(rel)}: {exc.strerror or exc}"

    def regular_file(self, rel: str) -> Path | None:
        """The path of a regular file inside the root (for streaming readers), or None."""
        p = self.path(rel)
        try:
            return p if self._inside(p) and p.is_file() else None
        except OSError:
            return None

    def read_text(self, rel: str, limit: int = MAX_FILE_BYTES) -> tuple[str | None, str]:
        data, why = self.read_bytes(rel, limit)
        if data is None:
            return None, why
        return data.decode("utf-8", errors="replace"), ""

    def listdir(self, rel: str) -> list[str] | None:
        p = self.path(rel)
        if not self._inside(p):
            return None
        try:
            return sorted(os.listdir(p))
        except OSError:
            return None

    def socket_answers(self, rel: str, timeout: float = 0.5) -> bool | None:
        """Live only: whether a UNIX socket under the root accepts a connection (True) or refuses it (False: the
        process that made it has gone, the file stayed). None where it cannot be asked: a bundle, not a socket,
        no permission, a path too long for AF_UNIX. The connection is closed at once, nothing is sent."""
        if self.bundle:
            return None
        p = self.path(rel)
        try:
            if not stat.S_ISSOCK(p.lstat().st_mode):  # never through a link: only the socket that is there
                return None
        except OSError:
            return None
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(timeout)
        try:
            s.connect(str(p))
            return True
        except ConnectionRefusedError:
            return False
        except OSError:
            return None
        finally:
            s.close()

    def gpu_snapshot(self) -> GpuSnapshot:
        """The backend is asked once per collection; every collector shares the answer."""
        if self._gpu_snapshot is None:
            self._gpu_snapshot = self.gpu.snapshot()
        return self._gpu_snapshot
