"""What grew between the start of a run and its end: live memory grouped by source line or block size.

A short run has too few baselines for a trend, but what it leaves live says more than its curve: a
leak is one source line (or, without allocation history, one block size) that holds more blocks at
every look, still rising at the end. A model loaded in the first second rises once and stops; a cache
filled once is one or two blocks; neither keeps adding blocks.

Inputs are the recorder's start points (start-<label>.json: what was live 0.25 s ... 16 s after CUDA
came up) and the snapshot at the end (final-<label>.json at exit, or the OOM's). Pure.
"""

from __future__ import annotations

from typing import Any

from oomdoctor.analysis import growth
from oomdoctor.analysis.growth import LIBRARY

MiB = 1 << 20
NO_STACK = "(no stack recorded)"
MIN_GROWTH = 64 * MiB  # smallest growth of one group that can be a leak (or 10% of the first look)
START_FRACTION = 0.10
MIN_NEW_BLOCKS = 8  # a cache filled once is one or a few blocks; a leak keeps adding them
MIN_RISES = 2  # intervals (look to look) in which the group gained blocks, the last one among them
# and at least 2 of 3 of the intervals from its first rise on
GROUP_CAP = 40  # groups kept per look by the recorder (the rest are smaller than the smallest kept)


def _key(g: dict[str, Any], by: str) -> Any:
    return g.get("source") if by == "source" else g.get("size")


def _table(groups: list[dict[str, Any]], by: str) -> tuple[dict[Any, tuple[float, float]], float | None]:
    """{key: (bytes, blocks)} and, when the list was cut at GROUP_CAP, the bytes of its smallest group."""
    table = {_key(g, by): (float(g["bytes"]), float(g.get("blocks") or 0)) for g in groups}
    floor = min((v[0] for v in table.values()), default=None) if len(groups) >= GROUP_CAP else None
    return table, floor


def _mode(start_history: bool, end: dict[str, Any]) -> str:
    sources = end.get("live_by_source") or []
    named = any(g.get("source") != NO_STACK for g in sources)
    return "source" if start_history and end.get("history") and named else "size"


def assess(start: dict[str, Any] | None, end: dict[str, Any] | None, *, end_t: float | None = None,
           end_is_oom: bool = False) -> dict[str, Any] | None:
    """Groups that kept gaining live blocks from the first look to the end (None: nothing to compare)."""
    points = [p for p in (start or {}).get("points") or () if isinstance(p, dict)]
    if not points or not end:
        return None
    by = _mode(bool((start or {}).get("history")), end)
    field = "live_by_source" if by == "source" else "live_by_size"
    if by == "size" and not end.get(field):
        return None
    looks = [(p.get("t"), p.get(field) or []) for p in sorted(points, key=lambda p: p.get("t") or 0.0)]
    looks.append((end_t, end.get(field) or []))
    tables = [_table(groups, by) for _, groups in looks]
    first_total = float(points[0].get("allocated") or 0.0)
    threshold = max(MIN_GROWTH, START_FRACTION * first_total)
    grown = []
    for key, (end_bytes, end_blocks) in tables[-1][0].items():
        if by == "source" and key == NO_STACK:
            continue  # allocated before history was on: no line to blame
        seq = []
        for table, floor in tables:
            if key in table:
                seq.append(table[key])
            elif floor is not None:  # below the smallest group kept: at most that much, block count unknown
                seq.append((floor, None))
            else:
                seq.append((0.0, 0.0))
        growth = end_bytes - seq[0][0]
        first_blocks = seq[0][1]
        new_blocks = None if first_blocks is None else end_blocks - first_blocks
        rises = [b1 is not None and b0 is not None and b1 > b0 and c1 > c0
                 for (c0, b0), (c1, b1) in zip(seq, seq[1:])]
        # judged from the first interval in which it rose: a job may sit idle (CUDA, cuBLAS and autograd
        # start-up: seconds) before its loop begins, and its looks there say nothing about the loop
        started = next((i for i, r in enumerate(rises) if r), len(rises))
        span = len(rises) - started
        before_end = sum(rises[:-1])
        keeps_rising = (rises[-1] and sum(rises) >= MIN_RISES and sum(rises[started:]) * 3 >= 2 * max(span, 1)
                        and (not end_is_oom or before_end >= MIN_RISES))
        accumulating = (growth >= threshold and keeps_rising and new_blocks is not None
                        and new_blocks >= MIN_NEW_BLOCKS)
        if growth > 0:
            grown.append({"key": key, "by": by, "growth_bytes": growth, "new_blocks": new_blocks,
                          "end_bytes": end_bytes, "end_blocks": end_blocks, "rises": sum(rises),
                          "intervals": len(rises), "rising_at_end": bool(rises and rises[-1]),
                          "accumulating": accumulating})
    grown.sort(key=lambda g: -g["growth_bytes"])
    leaking = [g for g in grown if g["accumulating"]]
    span_s = (end_t - looks[0][0]) if end_t is not None and looks[0][0] is not None else None
    return {"by": by, "looks": len(looks), "first_t": looks[0][0], "span_s": span_s,
            "first_allocated": first_total, "threshold_bytes": threshold, "end_is_oom": end_is_oom,
            "accumulating": leaking[:5], "grown": grown[:8], "leak": bool(leaking),
            "leak_bytes": sum(g["growth_bytes"] for g in leaking)}


SHORT_PATTERNS = ("short_run", "short_run_growth")
# A run whose end is at most this long after the first look: the looks (0.25-16 s) cover it, so what
# it left live decides as much as its curve does. Longer runs keep the curve's verdict.
SHORT_SPAN_S = 30.0


def combine(curve: dict[str, Any] | None, live: dict[str, Any] | None,
            device_total: float | None = None) -> dict[str, Any] | None:
    """The short-run verdict from the curve and the live comparison; longer runs keep the curve's."""
    if curve is None or live is None:
        return curve
    out = {**curve, "live_growth": live}
    few_baselines = curve.get("pattern") in SHORT_PATTERNS
    covered = live["span_s"] is not None and live["span_s"] <= SHORT_SPAN_S  # the looks cover the run
    if not (few_baselines or covered):
        return out
    if live["leak"] and not curve.get("leak"):
        rate = live["leak_bytes"] / live["span_s"] if live["span_s"] else None
        out.update({"leak": True, "pattern": "short_run_growth", "decided_by": "live_growth",
                    "confidence": "medium" if live["by"] == "source" else "low",
                    "growth_bytes": max(float(out.get("growth_bytes") or 0.0), live["leak_bytes"]),
                    "rate_per_s": rate, "rate_per_step": None})
        last = float(out.get("last") or 0.0)
        out["projection"] = growth.projection(out, device_total, None, last) if rate else None
    elif live["leak"]:
        out["confidence"] = "high" if curve.get("confidence") in ("medium", "high") else "medium"
    elif few_baselines and curve.get("leak") and live["looks"] >= 3:
        # the curve rose, but no group kept adding blocks to the end: a load or a fill, done once
        out.update({"leak": False, "pattern": "short_run", "decided_by": "live_growth", "confidence": None,
                    "projection": None})
    return out


def sites(live: dict[str, Any] | None, n: int = 3) -> list[dict[str, Any]]:
    """The source lines that gained the most live memory between the first look and the end."""
    if not live or live.get("by") != "source":
        return []
    user = [g for g in live["grown"] if not any(x in str(g["key"]) for x in LIBRARY)]
    ranked = [g for g in user if g["accumulating"]] or [g for g in user if g["rising_at_end"]]
    return [{"source": g["key"], "bytes": g["end_bytes"], "growth_bytes": g["growth_bytes"],
             "blocks": g["end_blocks"]} for g in ranked[:n]]
