"""Copy a hostile bundle (a .tar.gz or a directory) into a private directory, within budgets.

Bundles come from strangers (docs/security.md). Everything a bundle command reads is first copied
here, once, into a fresh temporary directory that holds only regular files and directories; every
collector then reads that copy. So no link, FIFO or device of the bundle is ever opened, and no
later read can leave the copy. (One exception: a directory bundle's logs, up to 2 GiB each by
design, are not copied but held open after the same checks and linked as /proc/self/fd/N.)

Archives are streamed through collectors/bundle_stream.py (decompressed bytes capped, headers
included; oversized extended headers and sparse maps refused before tarfile reads them). Directories are walked without following links; each file is opened with O_NOFOLLOW |
O_NONBLOCK and kept only if fstat says it is a regular file. Logs and manifests past a count are
skipped and counted, not read (20 000 tiny logs would otherwise take a minute to scan).
"""

from __future__ import annotations

import lzma
import os
import stat
import tarfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import IO

from oomdoctor.collectors.bundle_stream import CappedReader, Refused, SafeTarInfo, decompressor, shown
from oomdoctor.collectors.context import PINNED_PREFIX
from oomdoctor.errors import InputError

MAX_MEMBERS = 5_000  # a real bundle has ~40 files plus the user's logs and manifests
MAX_MEMBER_BYTES = 256 * 1024 * 1024  # `bundle --log` keeps 32 MiB of a log
MAX_TOTAL_BYTES = 1024 * 1024 * 1024  # decompressed archive stream, headers included
MAX_DEPTH = 32
MAX_PER_FOLDER = {"logs": 64, "k8s": 64}  # files read from these top folders; the rest are skipped

_KEPT_TYPES = (tarfile.REGTYPE, tarfile.AREGTYPE, tarfile.DIRTYPE)


@dataclass
class Copied:
    """What a copy kept and what it skipped (shown to the user as a count, never silently)."""

    files: int = 0
    bytes: int = 0
    skipped: dict[str, int] = field(default_factory=dict)
    pinned: list[int] = field(default_factory=list)  # open descriptors of a directory bundle's logs

    def close(self) -> None:
        while self.pinned:
            os.close(self.pinned.pop())

    def skip(self, why: str) -> None:
        self.skipped[why] = self.skipped.get(why, 0) + 1

    def notes(self) -> list[str]:
        return [f"{n} {why}" for why, n in sorted(self.skipped.items())]


def _safe_name(name: str) -> tuple[PurePosixPath | None, str]:
    """(path inside the bundle, "") or (None, why it is never extracted)."""
    p = PurePosixPath(name)
    parts = [part for part in p.parts if part not in ("", ".")]
    if "\x00" in name or p.is_absolute() or any(part == ".." for part in parts):
        return None, "entries with an absolute or escaping path"
    if len(parts) > MAX_DEPTH:
        return None, f"entries nested deeper than {MAX_DEPTH} directories"
    return PurePosixPath(*parts), ""


class _Budget:
    def __init__(self, dest: Path) -> None:
        self.dest, self.copied, self.per_folder = dest, Copied(), dict.fromkeys(MAX_PER_FOLDER, 0)
        self.entries = 0

    def count(self) -> None:
        self.entries += 1
        if self.entries > MAX_MEMBERS:
            raise Refused(f"more than {MAX_MEMBERS} entries")

    def admit(self, rel: PurePosixPath) -> bool:
        """False when the entry's folder (logs/, k8s/) already has enough files."""
        parts = rel.parts
        folder = parts[1] if len(parts) > 2 and parts[0] not in MAX_PER_FOLDER else parts[0]
        if folder in self.per_folder and len(parts) > 1:
            self.per_folder[folder] += 1
            if self.per_folder[folder] > MAX_PER_FOLDER[folder]:
                self.copied.skip(f"file(s) in {folder}/ beyond the first {MAX_PER_FOLDER[folder]}")
                return False
        return True

    def write(self, rel: PurePosixPath, src: IO[bytes] | int, size: int | None) -> None:
        if size is not None and size > MAX_MEMBER_BYTES:
            raise Refused(f"{shown(str(rel))} is larger than {MAX_MEMBER_BYTES >> 20} MiB")
        target = self.dest.joinpath(*rel.parts)
        target.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
        written = 0
        with os.fdopen(fd, "wb") as out:
            while True:
                want = 1 << 20 if size is None else min(1 << 20, size - written)
                if want <= 0:
                    break
                chunk = os.read(src, want) if isinstance(src, int) else src.read(want)
                if not chunk:
                    if size is not None:
                        raise Refused(f"truncated archive ({shown(str(rel))} is cut short)")
                    break
                written += len(chunk)
                if written > MAX_MEMBER_BYTES:
                    raise Refused(f"{shown(str(rel))} is larger than {MAX_MEMBER_BYTES >> 20} MiB")
                self.copied.bytes += len(chunk)
                if self.copied.bytes > MAX_TOTAL_BYTES:
                    raise Refused(f"more than {MAX_TOTAL_BYTES >> 20} MiB of files")
                out.write(chunk)
        self.copied.files += 1


def _copy_tar(path: Path, budget: _Budget) -> None:
    with open(path, "rb") as fh:
        stream = CappedReader(decompressor(fh), MAX_TOTAL_BYTES)
        with tarfile.open(fileobj=stream, mode="r|", tarinfo=SafeTarInfo) as tar:  # type: ignore[arg-type]
            for member in tar:
                budget.count()
                rel, why = _safe_name(member.name)
                if rel is None:
                    budget.copied.skip(why)
                    continue
                if not rel.parts:
                    continue  # `./`
                if member.type not in _KEPT_TYPES:
                    budget.copied.skip("links, devices or other special entries")
                    continue
                if not budget.admit(rel):
                    continue
                target = budget.dest.joinpath(*rel.parts)
                if member.type == tarfile.DIRTYPE:
                    target.mkdir(parents=True, exist_ok=True)
                    continue
                if os.path.lexists(target):
                    budget.copied.skip("duplicate entries")
                    continue
                src = tar.extractfile(member)
                if src is not None:
                    budget.write(rel, src, member.size)


def _copy_dir(root: Path, budget: _Budget, rel: PurePosixPath = PurePosixPath("."), depth: int = 0) -> None:  # noqa: B008
    if depth > MAX_DEPTH:
        raise Refused(f"{shown(str(rel))}: directories nested deeper than {MAX_DEPTH}")
    try:
        with os.scandir(root / rel) as it:
            entries = sorted(it, key=lambda e: e.name)
    except OSError as exc:
        if depth == 0:
            raise
        budget.copied.skip(f"unreadable directories ({exc.strerror or 'error'})")
        return
    for entry in entries:
        sub = rel / entry.name
        try:
            st = entry.stat(follow_symlinks=False)
        except OSError:
            budget.copied.skip("unreadable entries")
            continue
        budget.count()
        if stat.S_ISDIR(st.st_mode):
            if budget.admit(sub):
                (budget.dest / sub).mkdir(parents=True, exist_ok=True)
                _copy_dir(root, budget, sub, depth + 1)
            continue
        if not stat.S_ISREG(st.st_mode):
            budget.copied.skip("links, FIFOs, sockets or devices (never followed or opened)")
            continue
        if not budget.admit(sub):
            continue
        _copy_file(root / sub, sub, budget)


def _copy_file(src: Path, rel: PurePosixPath, budget: _Budget) -> None:
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        fd = os.open(src, flags)
    except OSError as exc:
        budget.copied.skip(f"unreadable files ({exc.strerror or 'error'})")
        return
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):  # swapped for a FIFO or link since the listing
            budget.copied.skip("links, FIFOs, sockets or devices (never followed or opened)")
            return
        if st.st_nlink > 1:  # a hard link may be one of the reader's own files
            budget.copied.skip("hard-linked files")
            return
        if _is_log(rel) and _pin(fd, rel, budget):
            fd = -1  # kept open until the command ends
            return
        budget.write(rel, fd, None)
    finally:
        if fd >= 0:
            os.close(fd)


def _is_log(rel: PurePosixPath) -> bool:
    parts = rel.parts
    return len(parts) >= 2 and (parts[-2] == "logs") and len(parts) <= 3


def _pin(fd: int, rel: PurePosixPath, budget: _Budget) -> bool:
    """A directory bundle's log (up to 2 GiB by design, docs/benchmarks.md) is not copied: the copy
    gets a link to /proc/self/fd/N, the descriptor this check opened, so readers reach exactly the
    regular file checked here even if the bundle's entry is swapped for a link or a FIFO later."""
    proc = f"{PINNED_PREFIX}{fd}"
    if not os.path.exists(proc):
        return False  # no /proc: copy it like any other file
    target = budget.dest.joinpath(*rel.parts)
    target.parent.mkdir(parents=True, exist_ok=True)
    os.symlink(proc, target)
    budget.copied.pinned.append(fd)
    budget.copied.files += 1
    return True


def copy_bundle(path: Path, dest: Path) -> Copied:
    """Copy the bundle at `path` (directory or archive) into the empty directory `dest`.

    The caller closes the result (`Copied.close`) when it is done reading: a directory bundle's logs
    are held open rather than copied.

    Raises InputError (one line naming the bundle) when a rule or budget is broken.
    """
    budget = _Budget(dest)
    label = shown(str(path), 200)
    try:
        if path.is_dir():
            _copy_dir(path, budget)
        else:
            _copy_tar(path, budget)
    except Refused as exc:
        budget.copied.close()
        raise InputError(f"bundle {label}: {exc}") from None
    except (tarfile.TarError, EOFError, zlib.error, lzma.LZMAError, OSError, ValueError, RecursionError) as exc:
        budget.copied.close()
        raise InputError(f"bundle {label}: {_reason(exc)}") from None
    return budget.copied


def _reason(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror and not isinstance(exc, EOFError):
        return f"cannot read or copy an entry ({exc.strerror})"  # never the temporary path
    reason = shown(" ".join(str(exc).split()) or type(exc).__name__, 200)
    if isinstance(exc, EOFError) or "end-of-stream" in reason or "unexpected end" in reason:
        return f"truncated archive ({reason})"
    if isinstance(exc, tarfile.ReadError):
        return "not a tar or .tar.gz archive (or a damaged one)"
    return reason
