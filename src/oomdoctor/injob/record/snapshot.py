"""Summarise torch's allocator snapshot into small JSON (never pickle): what was live, and from where.

`torch.cuda.memory._snapshot()` holds every segment and block and, when history is on, a ring of
alloc/free events with Python stacks. We keep: the largest live blocks with their top user frame, live
bytes grouped by source line, segment totals (for fragmentation), the tail of the event ring, and the
live set at the highest point inside that ring (replayed backwards from the final state).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

_INTERNAL = ("/torch/", "/site-packages/", "/dist-packages/", "<frozen", "/oomdoctor/")


def user_frame(frames: list[dict[str, Any]] | None) -> str | None:
    """The first frame outside torch / libraries: the source line that asked for the memory."""
    if not frames:
        return None
    py = [f for f in frames if str(f.get("filename", "")).endswith(".py")]
    for f in py:
        name = str(f.get("filename", ""))
        if not any(s in name for s in _INTERNAL):
            return f"{name}:{f.get('line')} in {f.get('name')}"
    if py:
        f = py[0]
        return f"{f.get('filename')}:{f.get('line')} in {f.get('name')}"
    return None


def _short_stack(frames: list[dict[str, Any]] | None, n: int = 6) -> list[str]:
    """The innermost Python frame, then up to n frames of the user's own code (innermost first)."""
    py = [f for f in frames or () if str(f.get("filename", "")).endswith(".py")]
    fmt = [f"{f.get('filename')}:{f.get('line')} in {f.get('name')}" for f in py]
    user = [s for f, s in zip(py, fmt) if not any(x in str(f.get("filename", "")) for x in _INTERNAL)][:n]
    return (fmt[:1] if fmt and fmt[0] not in user else []) + user


def live_blocks(snapshot: dict[str, Any], device: int | None = None) -> list[dict[str, Any]]:
    out = []
    for seg in snapshot.get("segments", ()):
        if device is not None and seg.get("device") != device:
            continue
        for b in seg.get("blocks", ()):
            if b.get("state") == "active_allocated":
                out.append({"addr": b.get("address"), "size": int(b.get("size", 0)),
                            "requested": int(b.get("requested_size", b.get("size", 0))),
                            "frames": b.get("frames") or []})
    return out


def segment_totals(snapshot: dict[str, Any], device: int | None = None) -> dict[str, int]:
    reserved = allocated = largest_free = segments = 0
    for seg in snapshot.get("segments", ()):
        if device is not None and seg.get("device") != device:
            continue
        segments += 1
        reserved += int(seg.get("total_size", 0))
        allocated += int(seg.get("allocated_size", 0))
        for b in seg.get("blocks", ()):
            if b.get("state") == "inactive":
                largest_free = max(largest_free, int(b.get("size", 0)))
    return {"segments": segments, "reserved": reserved, "allocated": allocated,
            "largest_free_block": largest_free}


def _top(blocks: list[dict[str, Any]], n: int) -> list[dict[str, Any]]:
    top = sorted(blocks, key=lambda b: b["size"], reverse=True)[:n]
    return [{"size": b["size"], "source": user_frame(b.get("frames")) or "(no stack recorded)",
             "stack": _short_stack(b.get("frames"))} for b in top]


def by_source(blocks: list[dict[str, Any]], n: int) -> list[dict[str, Any]]:
    groups: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for b in blocks:
        g = groups[user_frame(b.get("frames")) or "(no stack recorded)"]
        g[0] += b["size"]
        g[1] += 1
    ranked = sorted(groups.items(), key=lambda kv: kv[1][0], reverse=True)[:n]
    return [{"source": src, "bytes": v[0], "blocks": v[1]} for src, v in ranked]


def by_size(blocks: list[dict[str, Any]], n: int) -> list[dict[str, Any]]:
    """Live bytes grouped by block size: without history (no stacks) the one sign of the same tensor
    kept again and again is a block size whose count keeps rising."""
    groups: dict[int, int] = defaultdict(int)
    for b in blocks:
        groups[b["size"]] += 1
    ranked = sorted(groups.items(), key=lambda kv: kv[0] * kv[1], reverse=True)[:n]
    return [{"size": size, "bytes": size * count, "blocks": count} for size, count in ranked]


def live_point(snapshot: dict[str, Any], device: int, n: int = 40) -> dict[str, Any]:
    """What is live now, grouped by source line and by block size (small: for the start of a run)."""
    blocks = live_blocks(snapshot, device)
    return {"allocated": sum(b["size"] for b in blocks), "live_blocks": len(blocks),
            "live_by_source": by_source(blocks, n), "live_by_size": by_size(blocks, n)}


def peak_in_trace(snapshot: dict[str, Any], device: int, final_live: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Replay the event ring backwards from the final live set; return the live set at its highest point."""
    traces = snapshot.get("device_traces") or []
    if device >= len(traces) or not traces[device]:
        return None
    events = traces[device]
    free_action = "free_completed" if any(e.get("action") == "free_completed" for e in events) else "free_requested"
    total = sum(b["size"] for b in final_live)
    best_total, best_index = total, len(events)
    for i in range(len(events) - 1, -1, -1):  # totals before event i
        e = events[i]
        if e.get("action") == "alloc":
            total -= int(e.get("size", 0))
        elif e.get("action") == free_action:
            total += int(e.get("size", 0))
        if total > best_total:
            best_total, best_index = total, i
    live = {b["addr"]: dict(b) for b in final_live}
    for e in reversed(events[best_index:]):
        addr, action = e.get("addr"), e.get("action")
        if action == "alloc":
            live.pop(addr, None)
        elif action == free_action:
            live[addr] = {"addr": addr, "size": int(e.get("size", 0)), "frames": []}
    stacks = {e.get("addr"): e.get("frames") for e in events[:best_index] if e.get("action") == "alloc"}
    for addr, b in live.items():
        if not b.get("frames") and stacks.get(addr):
            b["frames"] = stacks[addr]
    t = events[best_index - 1].get("time_us") if best_index > 0 else None
    return {"allocated": best_total, "event_index": best_index, "events": len(events), "time_us": t,
            "blocks": list(live.values())}


def ring_looks(snapshot: dict[str, Any], device: int, final_live: list[dict[str, Any]], n: int = 8,
               groups: int = 40) -> dict[str, Any] | None:
    """What was live at n evenly spaced events of the history ring, replayed backwards from the end.

    With history on, these replace the sampler's start looks: a snapshot taken from the sampler thread
    while the job imports (torch.optim's first step imports torch._dynamo) turns stack symbolisation
    into a concurrent import and broke the job's own import on an H100 (ImportError, partially
    initialised torch._inductor.utils). Here everything runs at the end, in the job's own thread.
    """
    traces = snapshot.get("device_traces") or []
    if device >= len(traces) or not traces[device]:
        return None
    events = [e for e in traces[device] if isinstance(e.get("time_us"), (int, float))]
    if len(events) < 2 or events[-1]["time_us"] <= events[0]["time_us"]:
        return None
    free_action = "free_completed" if any(e.get("action") == "free_completed" for e in events) else "free_requested"
    alloc_frames: dict[Any, Any] = {}
    freed_frames: list[Any] = [None] * len(events)
    for i, e in enumerate(events):  # the stack of each freed block, from its alloc event earlier in the ring
        if e.get("action") == "alloc":
            alloc_frames[e.get("addr")] = e.get("frames") or []
        elif e.get("action") == free_action:
            freed_frames[i] = alloc_frames.get(e.get("addr"))
    t1 = events[-1]["time_us"]
    # evenly spaced in events, not in time: a job may sit idle for seconds (start-up) before its loop,
    # and looks spread over that stretch would all see the same thing
    cuts = [events[(len(events) - 1) * k // n]["time_us"] for k in range(n - 1, -1, -1)]  # descending
    live = {b["addr"]: {"size": b["size"], "frames": b.get("frames") or []} for b in final_live}
    looks: list[dict[str, Any]] = []
    i = len(events) - 1
    for cut in cuts:
        while i >= 0 and events[i]["time_us"] > cut:
            e = events[i]
            if e.get("action") == "alloc":
                live.pop(e.get("addr"), None)
            elif e.get("action") == free_action:
                live[e.get("addr")] = {"size": int(e.get("size", 0)), "frames": freed_frames[i] or []}
            i -= 1
        blocks = list(live.values())
        looks.append({"t": cut / 1e6, "allocated": sum(b["size"] for b in blocks), "live_blocks": len(blocks),
                      "live_by_source": by_source(blocks, groups), "live_by_size": by_size(blocks, groups)})
    looks.reverse()
    return {"points": looks, "end_t": t1 / 1e6, "events": len(events)}


def trace_tail(snapshot: dict[str, Any], device: int, n: int) -> list[dict[str, Any]]:
    traces = snapshot.get("device_traces") or []
    if device >= len(traces):
        return []
    out = []
    for e in traces[device][-n:]:
        out.append({"action": e.get("action"), "size": int(e.get("size", 0)), "time_us": e.get("time_us"),
                    "source": user_frame(e.get("frames"))})
    return out


def summarise(snapshot: dict[str, Any], device: int, *, top: int = 15, tail: int = 50) -> dict[str, Any]:
    blocks = live_blocks(snapshot, device)
    out: dict[str, Any] = {
        "device": device,
        "segments": segment_totals(snapshot, device),
        "live_blocks": len(blocks),
        "largest_live": _top(blocks, top),
        "live_by_source": by_source(blocks, max(top, 40)),
        "live_by_size": by_size(blocks, 40),
        "trace_tail": trace_tail(snapshot, device, tail),
    }
    looks = ring_looks(snapshot, device, blocks)
    if looks is not None:
        out["ring_looks"] = looks
    peak = peak_in_trace(snapshot, device, blocks)
    if peak is not None:
        out["trace_peak"] = {"allocated": peak["allocated"], "events": peak["events"],
                             "event_index": peak["event_index"], "time_us": peak["time_us"],
                             "largest_live": _top(peak["blocks"], top),
                             "live_by_source": by_source(peak["blocks"], top)}
    return out
