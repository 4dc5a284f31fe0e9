"""Read doctor reports for `diff` and `fleet`: JSON files, directories of them, stdin, bundles.

Bundles go through `collectors.machine.collect_bundle` and `checks.engine.diagnose` (imported lazily
by the CLI; collectors never import checks). Parsing of concatenated/prefixed streams is pure
(`parsers.report_stream`).
"""

from __future__ import annotations

import json
import os
import stat
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from oomdoctor.errors import InputError
from oomdoctor.parsers.budget import BudgetError, loads_json
from oomdoctor.parsers.report_stream import iter_stream

MAX_REPORT_BYTES = 64 * 2**20
MAX_STREAM_BYTES = 1 * 2**30


def is_bundle(path: str) -> bool:
    return os.path.isdir(path) or path.endswith((".tar.gz", ".tgz", ".tar"))


def _decode(data: bytes, name: str) -> str:
    if b"\x00" in data[:4096]:
        raise InputError(f"{name}: binary file, not a JSON report")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InputError(f"{name}: not valid UTF-8 (byte {exc.start})") from None


def read_capped(path: str, cap: int, *, found: bool = False) -> bytes:
    """At most cap + 1 bytes of `path`. A file found in a directory walk (`found`) must be a regular
    file, not reached through a link, and is opened without blocking (a FIFO named x.json must not
    hang `fleet`); a path the user named may be a pipe (`<(kubectl ...)`)."""
    if not found:
        with open(path, "rb") as fh:
            return fh.read(cap + 1)
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise InputError("not a regular file")
        return fh.read(cap + 1)


def _loads(text: str) -> Any:
    try:
        return loads_json(text)
    except BudgetError as exc:
        raise InputError(str(exc)) from None


def read_json_report(path: str) -> Any:
    """One JSON document (a doctor report) from a file; InputError naming the file otherwise."""
    try:
        data = read_capped(path, MAX_REPORT_BYTES)
    except FileNotFoundError:
        raise InputError(f"{path}: no such file") from None
    except OSError as exc:
        raise InputError(f"{path}: cannot read: {exc.strerror or exc}") from None
    if len(data) > MAX_REPORT_BYTES:
        raise InputError(f"{path}: larger than {MAX_REPORT_BYTES // 2**20} MiB, not a doctor report")
    text = _decode(data, path)
    try:
        return _loads(text)
    except InputError as exc:
        raise InputError(f"{path}: {exc.message}") from None
    except json.JSONDecodeError as exc:
        docs = [d for _, d, err in iter_stream(text, path) if not err]
        if docs:
            return docs[-1]  # a captured log with one report in it: take the last
        raise InputError(f"{path}: not a JSON doctor report (line {exc.lineno}: {exc.msg})") from None


def collect_bundle_facts(path: str, notes: list[str] | None = None):
    try:
        from oomdoctor.collectors.machine import collect_bundle
        from oomdoctor.collectors.workload import name_bundle
    except ImportError:
        raise InputError(f"{path}: reading bundles needs oomdoctor.collectors.machine, which this build lacks; "
                         "pass `doctor --format json` reports instead") from None
    return name_bundle(collect_bundle(path, notes), path)


def iter_report_sources(paths: list[str]) -> Iterator[tuple[str, Any, str]]:
    """(source name, parsed JSON or None, error) for every report under `paths` ('-' = stdin)."""
    for path in paths:
        if path == "-":
            data = sys.stdin.buffer.read(4096)  # judged before the rest is read: `fleet - < /dev/zero`
            if b"\x00" in data and not data.lstrip().startswith(b"{"):
                raise InputError("<stdin>: binary data, not doctor JSON reports")
            data += sys.stdin.buffer.read(MAX_STREAM_BYTES - len(data))
            # `kubectl logs -l app=oomdoctor --prefix | oomdoctor fleet -` interleaves every pod's output:
            # one pod printing a stray non-UTF-8 byte must not drop the whole fleet, so decode leniently
            # and let the stream scanner skip what is not a report.
            yield from iter_stream(data.decode("utf-8", errors="replace"), "stdin")
            continue
        p = Path(path)
        if p.is_dir():
            files = _json_files(path)
            if not files:
                raise InputError(f"{path}: no *.json reports in this directory")
        elif p.exists():
            files = [path]
        else:
            raise InputError(f"{path}: no such file or directory")
        for f in files:
            stem = Path(f).name.removesuffix(".json")
            try:
                data = read_capped(f, MAX_REPORT_BYTES, found=f != path)
                if len(data) > MAX_REPORT_BYTES:
                    raise InputError(f"larger than {MAX_REPORT_BYTES // 2**20} MiB, not a doctor report")
                text = _decode(data, f)
            except OSError as exc:
                yield stem, None, f"cannot read: {exc.strerror or type(exc).__name__}"
                continue
            except InputError as exc:
                yield stem, None, exc.message
                continue
            try:
                yield stem, _loads(text), ""
            except InputError as exc:
                yield stem, None, exc.message
            except json.JSONDecodeError:
                found = False
                for item in iter_stream(text, stem):  # logs captured to a file: several reports
                    found = True
                    yield item
                if not found:
                    yield stem, None, "empty file" if not text.strip() else "no JSON report in it"


def _json_files(directory: str) -> list[str]:
    """Every *.json regular file below `directory`; links (to files or directories) are not followed."""
    found: list[str] = []
    for here, dirs, files in os.walk(directory, followlinks=False):
        dirs.sort()
        for name in sorted(files):
            full = os.path.join(here, name)
            try:
                regular = stat.S_ISREG(os.lstat(full).st_mode)
            except OSError:
                continue
            if name.endswith(".json") and regular:
                found.append(full)
    return found
