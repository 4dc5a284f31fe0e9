"""Workload evidence a user adds to a bundle: logs (logs/*) and Kubernetes manifests (k8s/*.yaml)."""

from __future__ import annotations

from typing import Any

from oomdoctor.collectors.context import CollectContext
from oomdoctor.facts import Fact, Unavailable
from oomdoctor.facts.base import Entry
from oomdoctor.parsers.k8s_manifest import (
    ManifestError,
    containers_from,
    load_documents,
    sharing_resources_from,
    terminations_from,
)
from oomdoctor.parsers.oom_lines import find_oom_lines

MAX_LOG_BYTES = 64 * 1024 * 1024
MAX_MANIFEST_BYTES = 4 * 1024 * 1024


def collect_workload(ctx: CollectContext) -> list[Entry]:
    out: list[Entry] = []
    out += _logs(ctx)
    out += _manifests(ctx)
    created = ctx.meta.get("created")
    out.append(Fact("bundle.created", created, ctx.label("meta.json")) if ctx.bundle and isinstance(created, str)
               else Unavailable("bundle.created", "not a bundle" if not ctx.bundle else "no created time", "meta.json"))
    return out


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
    logs, events = [], []
    for name in names:
        data, _ = ctx.read_bytes(f"logs/{name}", limit=MAX_LOG_BYTES)
        if data is None:
            continue
        logs.append({"name": name, "bytes": len(data), "binary": b"\0" in data[:8192]})
        if b"\0" in data[:8192]:
            continue
        events += find_oom_lines(data.decode("utf-8", errors="replace").splitlines(), file=f"logs/{name}")
    return [Fact("workload.logs", logs, src), Fact("workload.oom_events", events, src)]


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
