"""The growth model of a recorded memory curve: warm-up, step changes, periodic patterns, steady growth.

Pure: it takes the recorder's records (dicts with `t`, `step`, the metric) and returns a JSON-ready dict.

Why a model and not one regression: the things that raise a training job's memory once are not leaks.
The optimizer state appears at the first step, cuDNN autotuning and lazy buffers in the first few, a
cache may be filled once (a level shift, then flat); train/eval cycles and variable shapes move the
curve up and down. A leak is growth of what survives from one step to the next, across most of the run.

1. Baselines: the low-water mark of each step (step markers), else of each cycle inferred from the
   allocation pattern (forward raises, backward and the step lower it: local minima recurring at a
   regular interval), else of time windows. Without markers the idle start (imports, library loading:
   one value for seconds) is left out first (idle_start).
2. Warm-up: the first baselines (at least 3 steps or 5% of them, at most 20%; 10% of time without steps)
   are dropped.
3. Step changes: jumps of the baseline far above its step-to-step noise, if they are few (at most 2 or
   10% of the steps), are level shifts when the new level holds: they are taken out before the trend is
   measured. Many jumps are a staircase (a leak that keeps one tensor every few steps) and stay in, and
   so do jumps into the last two baselines (never seen to settle).
4. Steady growth: a Theil-Sen slope on what is left, Kendall's tau >= 0.5, growth >= max(8 MiB, 2% of
   the level) and > 4x the residual noise, rising in most chunks of the run (coverage), and still
   growing in the second half (its slope at least half the run's), so one jump, a plateau or a warm-up
   ramp that then holds is never a leak.
5. Short runs (too few baselines): memory at the end against the start: a leak only when memory never
   fell and rose at nearly every sample and at the last, to at least twice the start and by >= 256 MiB;
   confidence "low".
"""

from __future__ import annotations

from statistics import median
from typing import Any

from oomdoctor.analysis.robust import kendall_tau, theil_sen

MiB = 1 << 20
MIN_POINTS = 8
TAU = 0.5
JUMP_NOISE = 8.0  # a jump is this many times the median step-to-step change
MAX_SHIFTS_FRACTION = 0.10
SHORT_MIN_GROWTH = 256 * MiB
SUSTAINED = 0.5  # the second half's slope, at least this fraction of the run's
IDLE_TOLERANCE = 1 * MiB


def _num(rec: dict[str, Any], key: str) -> float | None:
    v = rec.get(key)
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def baselines(records: list[dict[str, Any]], key: str = "allocated") -> tuple[list[tuple[float, float, float]], str]:
    """[(x, t, low-water)] and how steps were found: "markers", "cycles" or "time"."""
    rows = [(r["t"], v, r.get("step")) for r in records if (v := _num(r, key)) is not None]
    rows.sort(key=lambda r: r[0])
    if not rows:
        return [], "time"
    stepped = [r for r in rows if isinstance(r[2], int) and r[2] > 0]
    if len({r[2] for r in stepped}) >= 2:
        groups: dict[int, list[tuple[float, float]]] = {}
        for t, v, s in stepped:
            groups.setdefault(s, []).append((t, v))
        return [(float(s), g[0][0], min(v for _, v in g)) for s, g in sorted(groups.items())], "markers"
    ts, ys = [r[0] for r in rows], [r[1] for r in rows]
    first = idle_start(ts, ys)
    ts, ys = ts[first:], ys[first:]
    cyc = infer_cycles(ts, ys)
    if cyc is not None:
        return [(float(i + 1), ts[j], ys[j]) for i, j in enumerate(cyc)], "cycles"
    return [(t, t, v) for t, v in time_minima(ts, ys)], "time"


def idle_start(ts: list[float], ys: list[float]) -> int:
    """Index where the job's active phase begins: the last sample of its idle start, else 0.

    Without step markers the recorder starts before the job's loop: imports, CUDA and library
    initialisation, data preparation. Memory then holds one value (to the MiB) for seconds, often for a
    third of a short run. That stretch is not the job's steady state: measured with it, a leak that
    starts after it rises in only half the run, and the zero step-to-step noise of the flat start makes
    every later change look like a jump. The idle start is the longest stretch of one value (within
    1 MiB) that begins in the first half of the run and lasts at least 10% of it and 5 samples; the
    active phase begins at its last sample (the level the loop starts from).
    """
    n = len(ys)
    if n < 2 or ts[-1] <= ts[0]:
        return 0
    duration = ts[-1] - ts[0]
    best, best_len, i = 0, 0.0, 0
    while i < n - 1:
        j = i
        while j + 1 < n and abs(ys[j + 1] - ys[i]) <= IDLE_TOLERANCE:
            j += 1
        if ts[i] - ts[0] <= 0.5 * duration and j - i + 1 >= 5 and j < n - 1:
            length = ts[j] - ts[i]
            if length >= 0.1 * duration and length > best_len:
                best, best_len = j, length
        i = j + 1
    return best


def time_minima(ts: list[float], ys: list[float]) -> list[tuple[float, float]]:
    """The minimum of each of up to 40 equal stretches of time (samples may be denser at the start)."""
    if len(ts) < 3 * MIN_POINTS or ts[-1] <= ts[0]:
        return list(zip(ts, ys))
    k = max(MIN_POINTS, min(40, len(ts) // 3))
    width = (ts[-1] - ts[0]) / k
    bins: dict[int, tuple[float, float]] = {}
    for t, y in zip(ts, ys):
        i = min(k - 1, int((t - ts[0]) / width))
        if i not in bins or y < bins[i][1]:
            bins[i] = (ts[0] + (i + 0.5) * width, y)
    return [bins[i] for i in sorted(bins)]


def infer_cycles(ts: list[float], ys: list[float]) -> list[int] | None:
    """Indexes of the low points of recurring forward/backward cycles, or None when there are none.

    A cycle's low point is a local minimum with a swing (the highest point before the next low) of at
    least 16 MiB and 20% of the curve's range; at least 8 of them at a regular interval (coefficient of
    variation of the spacing < 0.3; random phases give about 0.5), spread over
    at least 70% of the run, with 4 samples a cycle or more (fewer cannot be told from aliasing) make a cycle. Sampled slower than the steps, no cycle shows.
    """
    n = len(ys)
    if n < 3 * MIN_POINTS:
        return None
    lo_all, hi_all = min(ys), max(ys)
    swing_min = max(16 * MiB, 0.2 * (hi_all - lo_all))
    lows = [i for i in range(1, n - 1) if ys[i] <= ys[i - 1] and ys[i] < ys[i + 1]]
    keep: list[int] = []
    for a, b in zip(lows, lows[1:] + [n - 1]):
        if max(ys[a:b + 1]) - ys[a] >= swing_min:
            keep.append(a)
    if len(keep) < MIN_POINTS:
        return None
    if (keep[-1] - keep[0]) < 4 * (len(keep) - 1):
        return None  # under 4 samples a cycle: sampled too slowly to tell steps from aliasing
    if ts[keep[-1]] - ts[keep[0]] < 0.7 * (ts[-1] - ts[0]):
        return None  # cycles seen only in part of the run (the fast-sampled start): not the run's steps
    gaps = [ts[b] - ts[a] for a, b in zip(keep, keep[1:])]
    mean = sum(gaps) / len(gaps)
    if mean <= 0:
        return None
    sd = (sum((g - mean) ** 2 for g in gaps) / len(gaps)) ** 0.5
    return keep if sd / mean < 0.3 else None


def _shifts(ys: list[float]) -> tuple[list[float], list[dict[str, Any]], float]:
    """(ys with few large jumps taken out, the jumps, step-to-step noise)."""
    diffs = [b - a for a, b in zip(ys, ys[1:])]
    if not diffs:
        return ys, [], 0.0
    noise = median(abs(d) for d in diffs)
    thr = max(JUMP_NOISE * noise, 16 * MiB)
    jumps = [i for i, d in enumerate(diffs) if abs(d) > thr]
    # consecutive jumps (a cache filled over two samples) are one shift
    clusters = [j for k, j in enumerate(jumps) if k == 0 or jumps[k - 1] != j - 1]
    js = set(jumps)
    # a shift is a jump to a new level that then holds: jumps running into the end of the run (the
    # last two baselines) were never seen to settle, and stay in the trend
    for c in list(clusters):
        end = c
        while end + 1 in js:
            end += 1
        if end + 1 >= len(ys) - 2:
            clusters.remove(c)
            js -= set(range(c, end + 1))
    jumps = sorted(js)
    if not jumps or len(clusters) > max(2, MAX_SHIFTS_FRACTION * len(ys)):
        return ys, [], noise
    out, offset = [ys[0]], 0.0
    for i, d in enumerate(diffs):
        if i in js:
            offset += d
        out.append(ys[i + 1] - offset)
    shifts = []
    for c in clusters:
        end = c
        while end + 1 in js:
            end += 1
        net = sum(diffs[c:end + 1])
        # up and straight back down (one step that kept a bucket alive) is a spike: taken out of the trend
        # like a shift, but not a new level (session 27: DDP runs reported "level shift of 0 bytes")
        if abs(net) > thr:
            shifts.append({"index": c + 1, "bytes": net})
    return out, shifts, noise


def _late_slope(xs: list[float], ys: list[float]) -> float:
    """Theil-Sen slope of the second half of the baselines: a leak still grows there, a warm-up has ended."""
    h = len(xs) // 2
    return theil_sen(xs[h:], ys[h:])[0] if len(xs) - h >= 3 else 0.0


def _coverage(ys: list[float], noise: float) -> tuple[int, int]:
    """(chunks that rose above the previous chunk, chunk pairs) over K chunks of the run."""
    k = max(2, min(5, len(ys) // 3))
    size = len(ys) / k
    meds = [median(ys[int(i * size):max(int(i * size) + 1, int((i + 1) * size))]) for i in range(k)]
    rises = sum(1 for a, b in zip(meds, meds[1:]) if b - a > noise)
    return rises, k - 1


def assess(records: list[dict[str, Any]], key: str = "allocated", *, min_growth: int = 8 * MiB,
           min_fraction: float = 0.02, device_total: float | None = None) -> dict[str, Any] | None:
    """The growth verdict of one process's metric (None without enough data)."""
    pts, steps_from = baselines(records, key)
    if len(pts) < 2:
        return None
    unit = "step" if steps_from in ("markers", "cycles") else "s"
    if steps_from == "markers":
        skip = min(max(3, round(0.05 * len(pts))), int(0.2 * len(pts))) if len(pts) > MIN_POINTS else 0
    else:
        skip = len(pts) // 10
    warm, body = pts[:skip], pts[skip:]
    base: dict[str, Any] = {"metric": key, "unit": unit, "steps_from": steps_from, "warmup_points": len(warm),
                            "warmup_bytes": (body[0][2] - warm[0][2]) if warm and body else 0.0}
    if len(body) < MIN_POINTS:
        return {**base, **_short(pts, min_growth, device_total)}
    xs, ts, ys = [p[0] for p in body], [p[1] for p in body], [p[2] for p in body]
    adj, shifts, step_noise = _shifts(ys)
    slope, intercept = theil_sen(xs, adj)
    tau = kendall_tau(xs, adj)
    span = xs[-1] - xs[0]
    growth = slope * span
    noise = median(abs(y - (intercept + slope * x)) for x, y in zip(xs, adj))
    level = median(ys)
    rises, pairs = _coverage(adj, noise)
    covered = rises >= max(1, pairs - 1) and rises * 2 > pairs
    big = growth >= max(min_growth, min_fraction * level) and growth > 4 * noise
    late = _late_slope(xs, adj)
    sustained = slope > 0 and late >= SUSTAINED * slope
    flagged = tau >= TAU and big and covered and sustained
    if flagged:
        pattern = "steady_growth"
    elif shifts:
        pattern = "step_change"
    elif max(adj) - min(adj) > max(16 * MiB, min_growth, 0.05 * level):  # a lone spike taken out: flat
        pattern = "fluctuating"  # train/eval cycles, variable shapes: up and down, no trend
    else:
        pattern = "flat"
    elapsed = ts[-1] - ts[0]
    per_s = (slope * span / elapsed) if unit == "step" and elapsed > 0 else (slope if unit == "s" else None)
    out = {**base, "pattern": pattern, "slope_bytes": slope, "growth_bytes": growth, "tau": round(tau, 3),
           "noise_bytes": noise, "points": len(body), "span": span, "leak": bool(flagged), "first": ys[0],
           "last": ys[-1], "intercept": intercept, "coverage": [rises, pairs],
           "level_shifts": [{"at": xs[s["index"]], "bytes": s["bytes"]} for s in shifts],
           "late_slope_bytes": late, "rate_per_step": slope if unit == "step" else None, "rate_per_s": per_s,
           "minima": [[x, y] for x, y in zip(xs, ys)],
           "minima_without_shifts": [[x, y] for x, y in zip(xs, adj)] if shifts else None}
    out["confidence"] = _confidence(out) if flagged else None
    out["projection"] = projection(out, device_total, xs[-1], ys[-1]) if flagged else None
    return out


def _short(pts: list[tuple[float, float, float]], min_growth: int, device_total: float | None) -> dict[str, Any]:
    """Too few baselines for a trend: judge what is live at the end against the start."""
    ys = [p[2] for p in pts]
    ts = [p[1] for p in pts]
    start, end = ys[0], ys[-1]
    steps = list(zip(ys, ys[1:]))
    # rose at (nearly) every sample and never fell: a plateau after a model load is not growth
    rising = (len(ys) >= 3 and all(b >= a - IDLE_TOLERANCE for a, b in steps)
              and sum(b - a > IDLE_TOLERANCE for a, b in steps) >= 0.75 * len(steps) and steps[-1][1] > steps[-1][0])
    growth = end - start
    flagged = rising and growth >= max(SHORT_MIN_GROWTH, min_growth) and end >= 2 * max(start, 1.0)
    elapsed = ts[-1] - ts[0]
    per_s = growth / elapsed if elapsed > 0 else None
    out = {"pattern": "short_run_growth" if flagged else "short_run", "slope_bytes": per_s or 0.0,
           "growth_bytes": growth, "tau": 1.0 if rising else 0.0, "noise_bytes": 0.0, "points": len(ys),
           "span": elapsed, "leak": bool(flagged), "first": start, "last": end, "intercept": start,
           "coverage": None, "level_shifts": [], "rate_per_step": None, "rate_per_s": per_s,
           "minima": [[t - ts[0], y] for t, y in zip(ts, ys)], "unit": "s",
           "confidence": "low" if flagged else None}
    out["projection"] = projection(out, device_total, None, end) if flagged else None
    return out


def _confidence(g: dict[str, Any]) -> str:
    rises, pairs = g["coverage"]
    if g["tau"] >= 0.8 and rises == pairs and g["points"] >= 20 and not g["level_shifts"]:
        return "high"
    if g["tau"] >= 0.65 and g["points"] >= 12:
        return "medium"
    return "low"


def projection(g: dict[str, Any], device_total: float | None, step: float | None, last: float) -> dict[str, Any] | None:
    """When the device is full at this rate: step ~N and ~M minutes from the last baseline."""
    if not device_total or device_total <= last:
        return None
    left = device_total - last
    out: dict[str, Any] = {"device_total": device_total}
    if g.get("rate_per_step") and g["rate_per_step"] > 0 and step is not None:
        out["full_at_step"] = int(step + left / g["rate_per_step"])
    if g.get("rate_per_s") and g["rate_per_s"] > 0:
        out["full_in_seconds"] = left / g["rate_per_s"]
    return out if len(out) > 1 else None


LIBRARY = ("/site-packages/", "/dist-packages/", "/torch/", "<frozen", "(no stack recorded)")


def sites(live_by_source: list[dict[str, Any]], n: int = 3) -> list[dict[str, Any]]:
    """The user's source lines that hold the most live memory at the end (history on), largest first."""
    out = [s for s in live_by_source or () if isinstance(s, dict) and isinstance(s.get("source"), str)
           and not any(x in s["source"] for x in LIBRARY) and isinstance(s.get("bytes"), (int, float))]
    return sorted(out, key=lambda s: -s["bytes"])[:n]
