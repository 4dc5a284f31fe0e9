"""Read a run directory written by `oomdoctor record` / `oomdoctor.watch` (pure reading, no analysis)."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

from oomdoctor.errors import InputError
from oomdoctor.facts import recording
from oomdoctor.facts.recording import RunFiles
from oomdoctor.parsers.budget import loads_json

MAX_FILE_BYTES = 1 << 30  # a timeline larger than this is read up to here (the writer decimates long runs)


def _text(path: Path, problems: list[str]) -> str | None:
    # A run directory may come from someone else: no links, FIFOs or devices (O_NOFOLLOW, O_NONBLOCK).
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except OSError as exc:
        problems.append(f"{path.name}: unreadable ({exc.strerror or exc})")
        return None
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            problems.append(f"{path.name}: not a regular file, skipped")
            return None
        try:
            data = f.read(MAX_FILE_BYTES)
        except OSError as exc:
            problems.append(f"{path.name}: unreadable ({exc.strerror or exc})")
            return None
    if b"\x00" in data[:4096]:
        problems.append(f"{path.name}: binary data, skipped")
        return None
    return data.decode("utf-8", errors="replace")


def _json(path: Path, problems: list[str]) -> dict[str, Any] | None:
    text = _text(path, problems)
    if text is None:
        return None
    try:
        doc = loads_json(text)
    except ValueError as exc:  # BudgetError (too deep) is a ValueError too
        problems.append(f"{path.name}: not valid JSON ({exc})")
        return None
    if not isinstance(doc, dict):
        problems.append(f"{path.name}: not a JSON object")
        return None
    return doc


def load(path: str | os.PathLike[str]) -> RunFiles:
    root = Path(path)
    if not root.exists():
        raise InputError(f"{path}: no such run directory")
    if not root.is_dir():
        raise InputError(f"{path}: not a directory (expected a run directory from `oomdoctor record`)")
    problems: list[str] = []
    timelines: dict[str, str] = {}
    evidence: list[dict[str, Any]] = []
    errors: dict[str, str] = {}
    try:
        entries = sorted(root.iterdir())
    except OSError as exc:
        raise InputError(f"{path}: unreadable ({exc.strerror or exc})") from exc
    for p in entries:
        name = p.name
        if name.startswith(recording.TIMELINE_PREFIX) and name.endswith(".jsonl"):
            text = _text(p, problems)
            if text is not None:
                timelines[name[len(recording.TIMELINE_PREFIX):-len(".jsonl")]] = text
        elif name.startswith((recording.OOM_PREFIX, recording.FINAL_PREFIX, recording.START_PREFIX)) and name.endswith(".json"):
            doc = _json(p, problems)
            if doc is not None:
                evidence.append({**doc, "file": name})
        elif name.startswith("errors-") and name.endswith(".log"):
            errors[name] = _text(p, problems) or ""
    meta = _json(root / recording.RUN_META, problems) if (root / recording.RUN_META).exists() else None
    outside = _text(root / recording.OUTSIDE, problems) if (root / recording.OUTSIDE).exists() else None
    env = _json(root / recording.ENV, problems) if (root / recording.ENV).exists() else None
    if not timelines and meta is None and outside is None:
        raise InputError(f"{path}: not an oomdoctor run directory (no run.json, no timeline-*.jsonl)")
    return RunFiles(path=str(root), meta=meta, timelines=timelines, outside=outside, evidence=tuple(evidence),
                    env=env, errors=errors, problems=tuple(problems))
