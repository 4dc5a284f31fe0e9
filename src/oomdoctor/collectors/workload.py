"""Workload evidence a user adds to a bundle: logs (logs/*) and Kubernetes manifests (k8s/*.yaml).

Logs are read the way `oomdoctor explain` reads them (collectors.logs.iter_blocks into the one
scanner, parsers.oom_events): constant memory, C-speed pre-filter, the same event kinds and numbers.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from oomdoctor.collectors.context import CollectContext
from oomdoctor.errors import InputError
from oomdoctor.explain.events import LogScanner
from oomdoctor.explain.facts import scan_records
from oomdoctor.explain.rank import event_readings
from oomdoctor.explain.read import iter_blocks, text_encoding
from oomdoctor.facts import Fact, FactSet, Unavailable
from oomdoctor.facts.base import Entry
from oomdoctor.parsers.k8s_manifest import (
    ManifestError,
    containers_from,
    load_documents,
    sharing_resources_from,
    terminations_from,
)
from oomdoctor.redact import redact_text

MAX_LOG_BYTES = 2 << 30  # scanned per log (~2 s at the scanner's speed); explain reads on past it
MAX_MANIFEST_BYTES = 4 * 1024 * 1024


def collect_workload(ctx: CollectContext) -> list[Entry]:
    out: list[Entry] = []
    out += _logs(ctx)
    out += _manifests(ctx)
    created = ctx.meta.get("created")
    out.append(Fact("bundle.created", created, ctx.label("meta.json")) if ctx.bundle and isinstance(created, str)
               else Unavailable("bundle.created", "not a bundle" if not ctx.bundle else "no created time", "meta.json"))
    # the path the user named the bundle by is the command's (name_bundle), not the bundle's: it reads the same anywhere
    out.append(Unavailable("bundle.path", "not a bundle" if not ctx.bundle else "only the command that opened the bundle knows its path",
                           "command line"))
    return out


def name_bundle(facts: FactSet, path: str | Path) -> FactSet:
    """A bundle's facts plus `bundle.path`, the path the user gave (`doctor --bundle PATH`, `diff A B`), so that a
    remedy can print a command to run on it. Added by the command, not collected: the same bundle has the same facts
    wherever it lies (a directory or its .tar.gz)."""
    return facts.merged([Fact("bundle.path", str(path), "command line")])


def self_gpu_usage(processes: list[dict[str, Any]] | None) -> int | None:
    if processes is None:
        return None
    return sum(p.get("used_bytes") or 0 for p in processes if p.get("self"))


def _logs(ctx: CollectContext) -> list[Entry]:
    names = ctx.listdir("logs") if ctx.bundle else None
    src = ctx.label("logs")
    if names is None:
        why = "no logs/ in the bundle" if ctx.bundle else "live: no logs given (add them to a bundle with --log)"
        return [Unavailable("workload.logs", why, src), Unavailable("workload.oom_events", why, src)]
    logs = []
    scanner = LogScanner(readings=False)  # the events, as explain finds them; not its memory readings
    for name in names:
        path = ctx.regular_file(f"logs/{name}")
        if path is None:
            continue
        entry = _scan_log(scanner, path, f"logs/{name}")
        if entry is not None:
            logs.append({"name": name, **entry})
    scan = scanner.finish()
    records = scan_records(scan, redact_text)
    read = event_readings(scan) if scan.events else {}  # each line as `explain` reads it, not only its kind's hint
    for ev, rec in zip(scan.events, records):
        rec["category"] = read.get(id(ev), rec["category"])
    return [Fact("workload.logs", logs, src), Fact("workload.oom_events", records, src)]


def _scan_log(scanner: LogScanner, path: Path, label: str) -> dict[str, Any] | None:
    """Feed one log to the scanner, up to MAX_LOG_BYTES; its {bytes, binary[, scanned_bytes]} or None."""
    try:
        size = path.stat().st_size
        with open(path, "rb") as fh:
            head = fh.read(8192)
    except OSError:
        return None
    scanner.start_source(label)
    entry: dict[str, Any] = {"bytes": size, "binary": b"\0" in head and text_encoding(head) is None}  # UTF-16 is text
    scanned = 0
    blocks = iter_blocks(str(path))
    try:
        for buf, start, end in blocks:  # spans of whole lines
            if scanned + (end - start) > MAX_LOG_BYTES:
                cut = buf.rfind(b"\n", start, start + MAX_LOG_BYTES - scanned) + 1
                if cut > start:
                    scanner.feed(buf, start, cut)
                    scanned += cut - start
                entry["scanned_bytes"] = scanned
                break
            scanner.feed(buf, start, end)
            scanned += end - start
    except InputError as exc:
        entry["error"] = str(exc)[:200]
    finally:
        blocks.close()
    return entry


def _manifests(ctx: CollectContext) -> list[Entry]:
    keys = ("k8s.containers", "k8s.terminations", "sharing.k8s_resources")
    names = [n for n in (ctx.listdir("k8s") or []) if n.endswith((".yaml", ".yml", ".json"))] if ctx.bundle else None
    src = ctx.label("k8s")
    if not names:
        why = "no k8s/*.yaml in the bundle" if ctx.bundle else "live: no manifests given (add them to a bundle with --manifest)"
        return [Unavailable(k, why, src) for k in keys]
    containers: list[dict[str, Any]] = []
    terminations: list[dict[str, Any]] = []
    problems = []
    for name in names:
        text, why = ctx.read_text(f"k8s/{name}", limit=MAX_MANIFEST_BYTES)
        if text is None:
            problems.append(f"{name}: {why}")
            continue
        try:
            docs = load_documents(text)
        except ManifestError as exc:
            problems.append(f"{name}: {exc}")
            continue
        containers += containers_from(docs, f"k8s/{name}")
        terminations += terminations_from(docs, f"k8s/{name}")
    if problems and not containers and not terminations:
        return [Unavailable(k, "; ".join(problems)[:500], src) for k in keys]
    return [Fact("k8s.containers", containers, src), Fact("k8s.terminations", terminations, src),
            Fact("sharing.k8s_resources", sharing_resources_from(containers), src)]
