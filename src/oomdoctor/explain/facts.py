"""The `workload.oom_events` fact: explain's scanner events as plain records for doctor's checks.

doctor and explain recognise OOM-like lines with one mechanism (oom_events.LogScanner over
oom_patterns): the same kinds, the same extracted numbers. A record is
`{file, line, kind, category, count, text, numbers, details}`; `category` is the kind table's hint
(oom_kinds.category_hint), what the wording alone points to. Pure.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from oomdoctor.explain import patterns as P
from oomdoctor.explain.events import LogScan, LogScanner, OomEvent
from oomdoctor.explain.kinds import KINDS, MARKERS, category_hint

MAX_TEXT = 2000  # the full message of a 2.x OOM is ~600 characters; a fact is not a log
_DETAILS = ("gpu", "other_processes", "format", "backend", "status", "xid", "pid", "cgroup", "limit_bytes",
            "would_use_bytes", "shmem_rss_bytes", "call_site", "in_dataloader_worker", "absurd_size")


def event_record(ev: OomEvent, redact: Callable[[str], str] = str) -> dict[str, Any]:
    return {"file": ev.source, "line": ev.line, "kind": ev.kind,
            "category": category_hint(ev.kind, ev.details, ev.text), "count": ev.count,
            "text": redact(ev.text[:MAX_TEXT]), "numbers": dict(ev.numbers),
            "details": {k: ev.details[k] for k in _DETAILS if k in ev.details}}


def scan_records(scan: LogScan, redact: Callable[[str], str] = str) -> list[dict[str, Any]]:
    """Every event the scan kept, markers included (they say which sharing layer is there)."""
    return [event_record(e, redact) for e in scan.events]


def records_from_lines(lines: Iterable[str], file: str = "") -> list[dict[str, Any]]:
    """The records for some text, as the bundle collector would make them (tests, small inputs)."""
    scanner = LogScanner()
    scanner.start_source(file)
    scanner.feed_lines(lines)
    return scan_records(scanner.finish())


def as_record(e: Any) -> dict[str, Any] | None:
    """A fact entry with a known kind, numbers and category: entries written by hand or by an older
    oomdoctor (other kind names, text only) are read again with the same patterns. None if no event."""
    if not isinstance(e, dict):
        return None
    text = str(e.get("text") or "")
    kind = e.get("kind")
    numbers, details = e.get("numbers"), e.get("details")
    if kind not in KINDS or not isinstance(numbers, dict) or not isinstance(details, dict):
        kind = kind if kind in KINDS else P.classify_line(text)
        if kind is None:
            return None
        numbers, details = P.extract(kind, text)
    numbers = {k: v for k, v in numbers.items() if isinstance(v, int) and not isinstance(v, bool)}
    count = e.get("count")
    return {**e, "kind": kind, "numbers": numbers, "details": details,
            "count": count if isinstance(count, int) and not isinstance(count, bool) and count > 0 else 1,
            "category": category_hint(kind, details, text)}


def record_event(record: dict[str, Any]) -> OomEvent:
    """An event again from its record (as_record's), for explain's analysis of a fact (doctor's WRK001)."""
    line = record.get("line")
    return OomEvent(kind=record["kind"], line=line if isinstance(line, int) and not isinstance(line, bool) else 0,
                    text=str(record.get("text") or ""), numbers=dict(record["numbers"]), details=dict(record["details"]),
                    source=str(record.get("file") or ""), count=record["count"])


def is_marker(record: dict[str, Any]) -> bool:
    return record.get("kind") in MARKERS
