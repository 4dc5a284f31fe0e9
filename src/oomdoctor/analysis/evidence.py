"""Type-checked views of the recorder's JSON files, so a truncated, edited or foreign file can only
lose fields, never crash the report. Numbers are finite non-bool int/float; strings are str."""

from __future__ import annotations

from typing import Any


def num(v: Any) -> float | int | None:
    if isinstance(v, (int, float)) and not isinstance(v, bool) and v == v and abs(v) != float("inf"):
        return v
    return None


def text(v: Any, limit: int = 8000) -> str | None:
    return v[:limit] if isinstance(v, str) else None


def integer(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _dict(v: Any) -> dict[str, Any]:
    return v if isinstance(v, dict) else {}


def _list(v: Any) -> list[Any]:
    return v if isinstance(v, list) else []


def numbers(v: Any) -> dict[str, float | int]:
    return {k: n for k, x in _dict(v).items() if isinstance(k, str) and (n := num(x)) is not None}


def _blocks(v: Any) -> list[dict[str, Any]]:
    out = []
    for b in _list(v):
        b = _dict(b)
        size = num(b.get("size"))
        if size is not None:
            out.append({"size": size, "source": text(b.get("source"), 400) or "(no stack recorded)",
                        "stack": [s for s in _list(b.get("stack")) if isinstance(s, str)][:12]})
    return out


MAX_GROUPS = 200  # the recorder writes at most 40 per look; a file from elsewhere may hold millions


def _groups(v: Any) -> list[dict[str, Any]]:
    out = []
    for g in _list(v)[:MAX_GROUPS]:
        g = _dict(g)
        if num(g.get("bytes")) is not None:
            out.append({"source": text(g.get("source"), 400) or "(no stack recorded)", "bytes": num(g.get("bytes")),
                        "blocks": num(g.get("blocks")) or 0})
    return out


def _sizes(v: Any) -> list[dict[str, Any]]:
    out = []
    for g in _list(v)[:MAX_GROUPS]:
        g = _dict(g)
        size, nbytes, blocks = num(g.get("size")), num(g.get("bytes")), num(g.get("blocks"))
        if size is not None and nbytes is not None and blocks is not None:
            out.append({"size": size, "bytes": nbytes, "blocks": blocks})
    return out


def snapshot(v: Any) -> dict[str, Any]:
    s = _dict(v)
    peak = _dict(s.get("trace_peak"))
    out: dict[str, Any] = {"history": bool(s.get("history")) if isinstance(s.get("history"), bool) else None,
                           "segments": numbers(s.get("segments")), "largest_live": _blocks(s.get("largest_live")),
                           "live_by_source": _groups(s.get("live_by_source")),
                           "live_by_size": _sizes(s.get("live_by_size")),
                           "trace_tail": [{"action": text(e.get("action"), 40), "size": num(e.get("size")),
                                           "source": text(e.get("source"), 400)}
                                          for e in map(_dict, _list(s.get("trace_tail")))]}
    ring = _dict(s.get("ring_looks"))
    if ring and num(ring.get("end_t")) is not None:
        out["ring_looks"] = {"points": _points(ring.get("points")), "end_t": num(ring.get("end_t"))}
    if peak and num(peak.get("allocated")) is not None:
        out["trace_peak"] = {"allocated": num(peak.get("allocated")), "events": num(peak.get("events")) or 0,
                             "largest_live": _blocks(peak.get("largest_live")),
                             "live_by_source": _groups(peak.get("live_by_source"))}
    return out


def outside(v: Any) -> dict[str, Any]:
    o = _dict(v)
    out: dict[str, Any] = numbers(o)
    nv = _dict(o.get("nvml"))
    if nv:
        out["nvml"] = {"gpu_proc_used": num(nv.get("gpu_proc_used")) or 0,
                       "devices": [numbers(d) for d in _list(nv.get("devices")) if isinstance(d, dict)]}
    return out


def oom_file(e: dict[str, Any]) -> dict[str, Any] | None:
    """A cleaned oom-*.json / final-*.json, or None when it is not one."""
    kind = e.get("kind")
    if kind not in ("oom", "final"):
        return None
    out: dict[str, Any] = {"kind": kind, "file": text(e.get("file"), 200), "t": num(e.get("t")) or 0.0,
                           "label": text(e.get("label"), 200), "rank": integer(e.get("rank")),
                           "step": integer(e.get("step")), "fatal": e.get("fatal") is True,
                           "message": text(e.get("message")), "source": text(e.get("source"), 40),
                           "error": text(e.get("error"), 400), "stats": numbers(e.get("stats")),
                           "snapshot": snapshot(e.get("snapshot")), "outside": outside(e.get("outside"))}
    for k in ("requested", "device", "device_limit", "device_free_at_oom", "device_free", "device_total",
              "oom_events"):
        out[k] = num(e.get(k))
    return out


def _points(v: Any) -> list[dict[str, Any]]:
    points = []
    for p in map(_dict, _list(v)[:32]):
        if num(p.get("allocated")) is None or num(p.get("t")) is None:
            continue
        points.append({"t": num(p.get("t")), "step": integer(p.get("step")), "allocated": num(p.get("allocated")),
                       "live_blocks": num(p.get("live_blocks")) or 0,
                       "live_by_source": _groups(p.get("live_by_source")), "live_by_size": _sizes(p.get("live_by_size"))})
    return points


def start_file(e: dict[str, Any]) -> dict[str, Any] | None:
    """A cleaned start-*.json (what was live early in the run), or None when it is not one."""
    if e.get("kind") != "start":
        return None
    return {"kind": "start", "file": text(e.get("file"), 200), "label": text(e.get("label"), 200),
            "pid": integer(e.get("pid")), "history": e.get("history") is True, "points": _points(e.get("points"))}


def event(rec: dict[str, Any]) -> dict[str, Any]:
    """A cleaned timeline event (oom, exception, rank, note, end)."""
    out = {k: n for k, v in rec.items() if (n := num(v)) is not None}
    out["kind"] = rec.get("kind") if isinstance(rec.get("kind"), str) else "note"
    for k in ("message", "type", "source", "note"):
        if isinstance(rec.get(k), str):
            out[k] = rec[k][:8000]
    if integer(rec.get("rank")) is not None:
        out["rank"] = rec["rank"]
    return out
