"""Open a bundle (directory or .tar.gz) safely.

A bundle comes from someone else's machine, so the archive is untrusted: only regular files and
directories are extracted, by us, one by one (no `extractall`), with no absolute paths, no `..`,
no links or devices, and limits on member count and sizes. A corrupt or truncated archive is an
InputError naming it (exit 2, one line).
"""

from __future__ import annotations

import contextlib
import json
import os
import tarfile
import tempfile
import zlib
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import Any

from oomdoctor.errors import InputError

MAX_MEMBERS = 20_000
MAX_MEMBER_BYTES = 256 * 1024 * 1024
MAX_TOTAL_BYTES = 1024 * 1024 * 1024


def _safe_name(name: str) -> PurePosixPath | None:
    p = PurePosixPath(name)
    parts = [part for part in p.parts if part not in ("", ".")]
    if p.is_absolute() or not parts or any(part == ".." for part in parts):
        return None
    return PurePosixPath(*parts)


def extract_tar(path: Path, dest: Path) -> None:
    total = 0
    try:
        with tarfile.open(path, "r:*") as tar:
            for count, member in enumerate(tar, 1):
                if count > MAX_MEMBERS:
                    raise InputError(f"bundle {path}: more than {MAX_MEMBERS} entries")
                rel = _safe_name(member.name)
                if rel is None or not (member.isfile() or member.isdir()):
                    continue  # links, devices, absolute or escaping paths: never extracted
                target = dest / rel
                if member.isdir():
                    target.mkdir(parents=True, exist_ok=True)
                    continue
                if member.size > MAX_MEMBER_BYTES:
                    raise InputError(f"bundle {path}: {member.name} is larger than {MAX_MEMBER_BYTES >> 20} MiB")
                total += member.size
                if total > MAX_TOTAL_BYTES:
                    raise InputError(f"bundle {path}: more than {MAX_TOTAL_BYTES >> 20} MiB unpacked")
                src = tar.extractfile(member)
                if src is None:
                    continue
                target.parent.mkdir(parents=True, exist_ok=True)
                with src, open(target, "wb") as out:
                    remaining = member.size
                    while remaining > 0:
                        chunk = src.read(min(remaining, 1 << 20))
                        if not chunk:
                            raise InputError(f"bundle {path}: truncated archive ({member.name} is cut short)")
                        out.write(chunk)
                        remaining -= len(chunk)
    except InputError:
        raise
    except (tarfile.TarError, EOFError, zlib.error, OSError, ValueError) as exc:
        reason = " ".join(str(exc).split()) or type(exc).__name__  # one line: tarfile lists every method tried
        if isinstance(exc, EOFError) or "end-of-stream" in reason or "unexpected end" in reason:
            reason = f"truncated archive ({reason[:200]})"
        elif isinstance(exc, tarfile.ReadError):
            reason = "not a tar or .tar.gz archive (or a damaged one)"
        raise InputError(f"bundle {path}: {reason}") from None


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


@contextlib.contextmanager
def open_bundle(path: str | Path) -> Iterator[Path]:
    """Yield the bundle's root directory; a temporary extraction is removed afterwards."""
    p = Path(path)
    try:
        is_dir = p.is_dir()
        is_file = p.is_file()
    except OSError as exc:
        raise InputError(f"bundle {path}: {exc.strerror or exc}") from None
    if is_dir:
        try:
            next(iter(p.iterdir()), None)
        except OSError as exc:
            raise InputError(f"bundle {path}: cannot read directory ({exc.strerror or exc})") from None
        yield _check_is_bundle(_bundle_root(p), path)
        return
    if not is_file:
        exists = os.path.lexists(p)
        raise InputError(f"bundle {path}: " + ("not a regular file or directory" if exists and p.exists()
                                               else "dangling symbolic link" if exists
                                               else "no such file or directory"))
    try:
        with open(p, "rb"):
            pass
    except OSError as exc:
        raise InputError(f"bundle {path}: {exc.strerror or exc}") from None
    with tempfile.TemporaryDirectory(prefix="oomdoctor-bundle-") as tmp:
        extract_tar(p, Path(tmp))
        yield _check_is_bundle(_bundle_root(Path(tmp)), path)


def read_meta(root: Path) -> dict[str, Any]:
    """meta.json, or {} when it is missing or not JSON (every bundle file is optional)."""
    try:
        data = json.loads((root / "meta.json").read_bytes()[:1 << 20].decode("utf-8", errors="replace"))
    except (OSError, ValueError, RecursionError):
        return {}
    return data if isinstance(data, dict) else {}
