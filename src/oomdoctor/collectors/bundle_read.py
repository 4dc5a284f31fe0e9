"""Open a bundle (directory or .tar.gz) safely, once per command.

A bundle comes from someone else's machine, so it is untrusted: `bundle_safe.copy_bundle` copies
what may be read (regular files and directories, within budgets) into a private temporary
directory, and every collector reads that copy. Directory bundles are copied too, so a symlink or
a FIFO in one is never followed or opened. A corrupt or hostile bundle is an InputError naming it
(exit 2, one line).
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from oomdoctor.collectors.bundle_safe import copy_bundle, shown
from oomdoctor.errors import InputError
from oomdoctor.parsers.budget import loads_json

MAX_META_BYTES = 1 << 20


def _bundle_root(directory: Path) -> Path:
    """The directory holding meta.json: the root itself, or its single top-level folder."""
    if (directory / "meta.json").exists():
        return directory
    try:
        entries = [e for e in directory.iterdir() if not e.name.startswith(".")]
    except OSError:
        return directory
    if len(entries) == 1 and entries[0].is_dir() and (entries[0] / "meta.json").exists():
        return entries[0]
    return directory


# What `oomdoctor bundle` writes at the top (docs/contracts.md §5). Every file is optional, but a directory
# with none of them is not a bundle: a mistyped path must not be diagnosed as a healthy machine.
_BUNDLE_ENTRIES = ("meta.json", "proc", "sys", "etc", "dev", "commands", "logs", "k8s", ".dockerenv", "run", "usr")


def _check_is_bundle(root: Path, path: str | Path) -> Path:
    try:
        found = any((root / name).exists() for name in _BUNDLE_ENTRIES)
    except OSError:
        found = False
    if not found:
        raise InputError(f"bundle {path}: not an oomdoctor bundle (no meta.json, proc/, sys/ or commands/ in it); "
                         "make one with `oomdoctor bundle -o node.tar.gz`")
    return root


@dataclass
class OpenedBundle:
    root: Path
    notes: list[str] = field(default_factory=list)  # what the copy skipped, as counts


@contextlib.contextmanager
def read_bundle(path: str | Path) -> Iterator[OpenedBundle]:
    """The bundle copied into a private temporary directory (removed afterwards), and what was skipped."""
    p = Path(path)
    label = shown(str(path), 200)
    try:
        st = os.stat(p)  # follows a link given on the command line: the user named it
    except FileNotFoundError:
        raise InputError(f"bundle {label}: " + ("dangling symbolic link" if os.path.lexists(p)
                                                 else "no such file or directory")) from None
    except OSError as exc:
        raise InputError(f"bundle {label}: {exc.strerror or exc}") from None
    if stat.S_ISDIR(st.st_mode):
        try:
            next(iter(p.iterdir()), None)
        except OSError as exc:
            raise InputError(f"bundle {label}: cannot read directory ({exc.strerror or exc})") from None
    elif not stat.S_ISREG(st.st_mode):
        raise InputError(f"bundle {label}: not a regular file or directory")
    else:
        try:
            with open(p, "rb"):
                pass
        except OSError as exc:
            raise InputError(f"bundle {label}: {exc.strerror or exc}") from None
    with tempfile.TemporaryDirectory(prefix="oomdoctor-bundle-") as tmp:
        os.chmod(tmp, 0o700)
        copied = copy_bundle(p, Path(tmp))
        try:
            yield OpenedBundle(_check_is_bundle(_bundle_root(Path(tmp)), label), copied.notes())
        finally:
            copied.close()


@contextlib.contextmanager
def open_bundle(path: str | Path) -> Iterator[Path]:
    """Yield the root directory of the bundle's private copy; the copy is removed afterwards."""
    with read_bundle(path) as opened:
        yield opened.root


def read_meta(root: Path) -> dict[str, Any]:
    """meta.json, or {} when it is missing or not JSON (every bundle file is optional)."""
    try:
        with open(root / "meta.json", "rb") as fh:
            data = loads_json(fh.read(MAX_META_BYTES).decode("utf-8", errors="replace"))
    except (OSError, ValueError, RecursionError):
        return {}
    return data if isinstance(data, dict) else {}
