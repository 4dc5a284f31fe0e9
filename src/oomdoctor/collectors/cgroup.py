"""The job's cgroup: version, memory limit/usage/peak, OOM counters, CPU quota (v1 and v2).

Inside a container with a private cgroup namespace the job's files are at the top of
/sys/fs/cgroup; on a host (or with the host namespace) they are under the path from
/proc/self/cgroup. We try the path first, then the top. A missing limit file at the root cgroup
means "no limit"; elsewhere it is unknown (environment-facts §5b: missing memory.events is not
"no OOM").
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from oomdoctor.collectors.context import CollectContext
from oomdoctor.facts import Fact, Unavailable
from oomdoctor.facts.base import Entry
from oomdoctor.parsers.cgroup import (
    Unparsable,
    parse_cfs_quota,
    parse_counter,
    parse_cpu_max,
    parse_flat_keyed,
    parse_limit,
)
from oomdoctor.parsers.procfs import cgroup_path_for, cgroup_version, parse_mounts, parse_proc_cgroup

_BASE = "sys/fs/cgroup"


def collect_cgroup(ctx: CollectContext) -> list[Entry]:
    mounts_text, why = ctx.read_text("proc/mounts")
    version = cgroup_version(parse_mounts(mounts_text)) if mounts_text is not None else None
    if version is None and ctx.exists(f"{_BASE}/cgroup.controllers"):
        version = 2
    cg_text, cg_why = ctx.read_text("proc/self/cgroup")
    entries = parse_proc_cgroup(cg_text) if cg_text is not None else []
    out: list[Entry] = []
    if version is None:
        return [Unavailable(k, why or "no cgroup mount in /proc/mounts", ctx.label("proc/mounts"))
                for k in ("cgroup.version", "cgroup.path", "cgroup.memory_limit_bytes", "cgroup.memory_high_bytes",
                          "cgroup.memory_usage_bytes", "cgroup.memory_peak_bytes", "cgroup.oom_events",
                          "cgroup.oom_kill", "cgroup.cpu_limit_cores")]
    out.append(Fact("cgroup.version", version, ctx.label("proc/mounts")))
    path = cgroup_path_for(entries, None if version == 2 else "memory")
    if path is None and version == 1:
        path = cgroup_path_for(entries, None)
    out.append(Fact("cgroup.path", path, ctx.label("proc/self/cgroup")) if path is not None
               else Unavailable("cgroup.path", cg_why or "no matching line", ctx.label("proc/self/cgroup")))
    if version == 2:
        out += _v2(ctx, path or "/")
    else:
        out += _v1(ctx, path or "/", cgroup_path_for(entries, "cpu") or "/")
    return out


def _candidates(ctx: CollectContext, sub: str, path: str, name: str) -> list[str]:
    base = f"{_BASE}/{sub}".rstrip("/")
    rels = []
    if path not in ("", "/"):
        rels.append(f"{base}/{path.strip('/')}/{name}")
    rels.append(f"{base}/{name}")
    return rels


def _read_first(ctx: CollectContext, rels: list[str]) -> tuple[str | None, str, str]:
    why = ""
    for rel in rels:
        text, why = ctx.read_text(rel, limit=1 << 20)
        if text is not None:
            return text, ctx.label(rel), ""
    return None, ctx.label(rels[-1]), why


def _one(ctx: CollectContext, key: str, rels: list[str], parse: Callable[[str], Any], root: bool,
         absent_means: Any = "unknown") -> Entry:
    text, src, why = _read_first(ctx, rels)
    if text is None:
        if root and absent_means != "unknown":
            return Fact(key, absent_means, f"{src} (root cgroup: no limit file)")
        return Unavailable(key, why, src)
    try:
        return Fact(key, parse(text), src)
    except Unparsable as exc:
        return Unavailable(key, f"unparsable: {exc}", src)


def _v2(ctx: CollectContext, path: str) -> list[Entry]:
    # The host's root cgroup has no memory.max/memory.current at all: no limit. A container's
    # namespace root has them; there a missing file is unknown, not "unlimited".
    # A bundle without sys/fs/cgroup at all recorded no cgroup files: that is unknown, not a root cgroup.
    root = (path == "/" and not ctx.exists(f"{_BASE}/memory.max") and not ctx.exists(f"{_BASE}/memory.current")
            and (not ctx.bundle or ctx.exists(_BASE)))
    out = [
        _parent_limit(ctx, path, _one(ctx, "cgroup.memory_limit_bytes", _candidates(ctx, "", path, "memory.max"),
                                      parse_limit, root, None)),
        _one(ctx, "cgroup.memory_high_bytes", _candidates(ctx, "", path, "memory.high"), parse_limit, root, None),
        _one(ctx, "cgroup.memory_usage_bytes", _candidates(ctx, "", path, "memory.current"), parse_counter, False),
        _one(ctx, "cgroup.memory_peak_bytes", _candidates(ctx, "", path, "memory.peak"), parse_counter, False),
        _one(ctx, "cgroup.cpu_limit_cores", _candidates(ctx, "", path, "cpu.max"), parse_cpu_max, root, None),
    ]
    text, src, why = _read_first(ctx, _candidates(ctx, "", path, "memory.events"))
    events = parse_flat_keyed(text) if text is not None else {}
    for key, field in (("cgroup.oom_events", "oom"), ("cgroup.oom_kill", "oom_kill")):
        if field in events:
            out.append(Fact(key, events[field], src))
        else:
            out.append(Unavailable(key, why or f"no {field} line in memory.events", src))
    return out


def _parent_limit(ctx: CollectContext, path: str, own: Entry) -> Entry:
    """The tightest memory.max on the way up when the job's own cgroup has none: a Slurm job's or a pod's limit
    on a parent binds the job as much (the recorder reads the same chain: injob/record/probes.py). Only where the
    job's cgroup was found under its path; a container's namespace top has no parents to read."""
    if not isinstance(own, Fact) or own.value is not None or path in ("", "/"):
        return own
    parts = [p for p in path.strip("/").split("/") if p and p not in (".", "..")]
    if not ctx.exists(f"{_BASE}/{'/'.join(parts)}/memory.max"):
        return own
    best: tuple[int, str] | None = None
    for n in range(len(parts) - 1, 0, -1):
        rel = f"{_BASE}/{'/'.join(parts[:n])}/memory.max"
        text, _ = ctx.read_text(rel, limit=4096)
        if text is None:
            continue
        try:
            limit = parse_limit(text)
        except Unparsable:
            continue
        if limit is not None and (best is None or limit < best[0]):
            best = (limit, rel)
    if best is None:
        return own
    return Fact("cgroup.memory_limit_bytes", best[0], f"{ctx.label(best[1])} (a parent cgroup's limit)")


def _v1(ctx: CollectContext, path: str, cpu_path: str) -> list[Entry]:
    root = False  # v1 has limit files at every level, the root included
    out = [
        _one(ctx, "cgroup.memory_limit_bytes", _candidates(ctx, "memory", path, "memory.limit_in_bytes"),
             parse_limit, root, None),
        Unavailable("cgroup.memory_high_bytes", "cgroup v1 has no memory.high", ""),
        _one(ctx, "cgroup.memory_usage_bytes", _candidates(ctx, "memory", path, "memory.usage_in_bytes"),
             parse_counter, False),
        _one(ctx, "cgroup.memory_peak_bytes", _candidates(ctx, "memory", path, "memory.max_usage_in_bytes"),
             parse_counter, False),
        Unavailable("cgroup.oom_events", "cgroup v1 counts only kills (memory.oom_control)", ""),
    ]
    text, src, why = _read_first(ctx, _candidates(ctx, "memory", path, "memory.oom_control"))
    control = parse_flat_keyed(text) if text is not None else {}
    out.append(Fact("cgroup.oom_kill", control["oom_kill"], src) if "oom_kill" in control
               else Unavailable("cgroup.oom_kill", why or "no oom_kill line (kernel < 4.13)", src))
    for sub in ("cpu,cpuacct", "cpu"):
        q, qsrc, _ = _read_first(ctx, _candidates(ctx, sub, cpu_path, "cpu.cfs_quota_us"))
        p, _, _ = _read_first(ctx, _candidates(ctx, sub, cpu_path, "cpu.cfs_period_us"))
        if q is not None and p is not None:
            try:
                out.append(Fact("cgroup.cpu_limit_cores", parse_cfs_quota(q, p), qsrc))
            except Unparsable as exc:
                out.append(Unavailable("cgroup.cpu_limit_cores", f"unparsable: {exc}", qsrc))
            break
    else:
        out.append(Unavailable("cgroup.cpu_limit_cores", "no cpu.cfs_quota_us", ctx.label(f"{_BASE}/cpu")))
    return out
