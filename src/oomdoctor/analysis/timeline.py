"""A recorded run, analysed: per-process series, leaks across steps, fragmentation, peaks, the OOM.

Pure: it reads RunFiles (collectors.rundir) and returns plain JSON-ready dicts; the verdict is in
analysis.postmortem. A process is a timeline file (rank<N> or pid<N>); ranks are merged on wall time.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from oomdoctor.analysis import evidence, growth, kill, live_growth, postmortem
from oomdoctor.facts.recording import RunFiles

MiB = 1 << 20
SERIES_FIELDS = ("allocated", "reserved", "active", "inactive_split", "gpu_proc_used", "rss", "cgroup_current",
                 "shm_used")


@dataclass
class Process:
    label: str
    header: dict[str, Any] = field(default_factory=dict)
    samples: list[dict[str, Any]] = field(default_factory=list)  # kind sample + step, by time
    steps: list[dict[str, Any]] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)  # oom, exception, rank, note, end
    bad_lines: int = 0

    @property
    def rank(self) -> int | None:
        for e in reversed(self.events):
            if e.get("kind") == "rank" and evidence.integer(e.get("rank")) is not None:
                return e["rank"]
        return evidence.integer(self.header.get("rank"))

    @property
    def name(self) -> str:
        return f"rank {self.rank}" if self.rank is not None else self.label


def parse_jsonl(text: str) -> tuple[list[dict[str, Any]], int]:
    records, bad = [], 0
    for line in text.splitlines():
        line = line.strip()
        if not line:
            continue
        try:
            rec = json.loads(line)
        except ValueError:
            bad += 1  # a line cut by a kill is expected at the end of a dead process's file
            continue
        if isinstance(rec, dict) and _is_num(rec.get("t")):
            records.append(rec)
        else:
            bad += 1
    return records, bad


def _clean(rec: dict[str, Any]) -> dict[str, Any]:
    """Keep only well-typed fields of a sample/step record (a file may come from anywhere)."""
    out: dict[str, Any] = {}
    for k, v in rec.items():
        if k == "kind" or (k == "label" and isinstance(v, str)):
            out[k] = v
        elif k == "gpu_devices":
            if isinstance(v, list):
                devs = [{dk: dv for dk, dv in d.items() if _is_num(dv)} for d in v if isinstance(d, dict)]
                out[k] = devs
        elif _is_num(v):
            out[k] = v
    if not isinstance(out.get("step"), int):
        out.pop("step", None)
    return out


def _is_num(v: Any) -> bool:
    return evidence.num(v) is not None


def load_process(label: str, text: str) -> Process:
    records, bad = parse_jsonl(text)
    p = Process(label=label, bad_lines=bad)
    for rec in records:
        kind = rec.get("kind")
        if kind == "header":
            p.header = {k: v for k, v in rec.items() if k in ("pid", "rank", "label", "argv", "t")}
            if evidence.integer(p.header.get("pid")) is None:
                p.header.pop("pid", None)
            if not isinstance(p.header.get("argv"), list):
                p.header.pop("argv", None)
        elif kind in ("sample", "step"):
            rec = _clean(rec)
            rec.pop("rss_anon", None)  # derived here only, never taken from the file (a stranger's run dir)
            rss, file_backed = _num(rec, "rss"), _num(rec, "rss_file")
            if rss is not None and file_backed is not None and 0 <= file_backed <= rss:
                rec["rss_anon"] = rss - file_backed  # what a host leak grows; file pages are reclaimable
            p.samples.append(rec)
            if kind == "step":
                p.steps.append(rec)
        else:
            p.events.append(evidence.event(rec))
    p.samples.sort(key=lambda r: r["t"])
    return p


def _num(rec: dict[str, Any], key: str) -> float | None:
    v = rec.get(key)
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def series(p: Process, key: str, t0: float) -> list[tuple[float, float]]:
    return [(r["t"] - t0, v) for r in p.samples if (v := _num(r, key)) is not None]


def detect_leak(p: Process, key: str = "allocated", *, min_growth: int = 8 * MiB,
                min_fraction: float = 0.02, device_total: float | None = None) -> dict[str, Any] | None:
    """Steady growth of `key` across steps (or inferred cycles, or time): analysis.growth's model.

    Warm-up (optimizer state at the first step, autotuning), level shifts (a cache filled once) and
    up-and-down patterns (train/eval, variable shapes) are told apart from growth across the run.
    """
    return growth.assess(p.samples, key, min_growth=min_growth, min_fraction=min_fraction,
                         device_total=device_total)


def fragmentation(p: Process) -> dict[str, Any] | None:
    """Reserved-but-unallocated bytes at the highest reservation, and the worst inactive split."""
    rows = [r for r in p.samples if _num(r, "reserved") is not None and _num(r, "allocated") is not None]
    if not rows:
        return None
    top = max(rows, key=lambda r: r["reserved"])
    worst = max(rows, key=lambda r: r.get("inactive_split", 0) or 0)
    return {"at_peak_reserved": {"reserved": top["reserved"], "allocated": top["allocated"],
                                 "free_in_cache": top["reserved"] - top["allocated"], "t": top["t"]},
            "max_inactive_split": worst.get("inactive_split", 0), "alloc_retries": max(
                (r.get("alloc_retries", 0) or 0) for r in rows)}


def peaks(p: Process) -> dict[str, float]:
    out = {}
    for key in ("peak_allocated", "peak_reserved", "allocated", "reserved", "gpu_proc_used", "rss"):
        vals = [v for r in p.samples if (v := _num(r, key)) is not None]
        if vals:
            out[key] = max(vals)
    return out


def analyse(run: RunFiles) -> dict[str, Any]:
    procs = [load_process(label, text) for label, text in sorted(run.timelines.items())]
    outside = load_process("outside", run.outside) if run.outside else None
    starts = [p.samples[0]["t"] for p in procs if p.samples] + ([outside.samples[0]["t"]] if outside and outside.samples else [])
    t0 = (run.meta or {}).get("start") or (min(starts) if starts else 0.0)
    proc_out = []
    for p in procs:
        gpu = any(_num(r, "allocated") is not None for r in p.samples)
        totals = [d.get("total") for r in p.samples for d in (r.get("gpu_devices") or ()) if d.get("total")]
        leak = detect_leak(p, "allocated", device_total=max(totals) if totals else None) if gpu else None
        # RSS less its file pages where most readings carry them; RSS alone in older records (and odd ones)
        with_rss = [r for r in p.samples if "rss" in r]
        host_key = "rss_anon" if with_rss and 2 * sum("rss_anon" in r for r in with_rss) > len(with_rss) else "rss"
        host_leak = detect_leak(p, host_key, min_growth=64 * MiB, min_fraction=0.05)
        if host_leak is not None:
            host_leak["measure"] = host_key
        proc_out.append({"device_total": max(totals) if totals else None, "label": p.label, "name": p.name, "rank": p.rank, "pid": p.header.get("pid"),
                         "argv": p.header.get("argv"), "uses_gpu": gpu, "steps": len(p.steps),
                         "last_step": p.steps[-1].get("step") if p.steps else None,
                         "samples": len(p.samples), "bad_lines": p.bad_lines, "peaks": peaks(p),
                         "leak": leak, "host_leak": host_leak, "fragmentation": fragmentation(p),
                         "events": [e for e in p.events if e.get("kind") in ("oom", "exception")][:50],
                         "series": {k: s for k in SERIES_FIELDS if (s := series(p, k, t0))}})
    out_series: dict[str, Any] = {}
    if outside is not None:
        for key in ("tree_rss", "gpu_proc_used", "cgroup_current", "shm_used"):
            s = series(outside, key, t0)
            if s:
                out_series[key] = s
        dev = [(r["t"] - t0, float(sum(d.get("used", 0) for d in r.get("gpu_devices") or ())))
               for r in outside.samples if r.get("gpu_devices")]
        if dev:
            out_series["gpu_devices_used"] = dev
    files = sorted((c for e in run.evidence if (c := evidence.oom_file(e)) is not None), key=lambda e: e["t"])
    # the observer fires for every failed attempt, also those the job survives (cuDNN retrying with a
    # smaller workspace); the fatal OOM is the one whose exception reached the recorder, if any
    ooms = [e for e in files if e["kind"] == "oom"]
    ooms.sort(key=lambda e: (e["fatal"], e["t"]))
    finals = [e for e in files if e["kind"] == "final"]
    starts = [c for e in run.evidence if (c := evidence.start_file(e)) is not None]
    for p in proc_out:
        ends = [e for e in finals + ooms if e.get("label") == p["label"]]
        start = next((s for s in starts if s["label"] == p["label"] or (s["pid"] is not None and s["pid"] == p["pid"])), None)
        if p["leak"] is not None and ends:  # a short run is judged on what it left live against its start
            end = ends[-1]
            end_t, ring = end["t"] or None, end["snapshot"].get("ring_looks")
            if start is None and ring and ring["points"]:  # history on: the looks replayed from the ring
                start = {"history": True, "points": ring["points"]}
                end_t = ring["end_t"]
            live = live_growth.assess(start, end["snapshot"], end_t=end_t, end_is_oom=end["kind"] == "oom")
            p["leak"] = live_growth.combine(p["leak"], live, p["device_total"])
        if p["leak"] and p["leak"].get("leak"):  # name the allocation sites (history on)
            grown = live_growth.sites(p["leak"].get("live_growth"))
            p["leak"]["sites"] = grown or growth.sites((ends[-1]["snapshot"].get("live_by_source") or []) if ends else [])
    meta = run.meta or {}
    killed = None
    if kill.is_sigkill(meta) or kill.cut_short(meta) or kill.failed_status(meta) is not None:
        # what the outside sampler and the processes read of the cgroup and the machine
        readings = {"outside": outside.samples if outside else [], **{p.label: p.samples for p in procs}}
        killed = kill.evidence(meta, readings)
    verdict = postmortem.verdict(proc_out, ooms, meta, out_series, killed)
    return {"run_dir": run.path, "meta": run.meta or {}, "t0": t0, "ended": kill.exit_wording(meta),
            "processes": proc_out,
            "outside": out_series, "ooms": [_oom_view(e, t0) for e in ooms],
            "finals": [_oom_view(e, t0) for e in finals], "verdict": verdict,
            "problems": list(run.problems) + [f"{p['label']}: {p['bad_lines']} unreadable line(s)"
                                              for p in proc_out if p["bad_lines"]],
            "recorder_errors": {k: v.splitlines()[:20] for k, v in run.errors.items()},
            "env": bool(run.env)}


_LIBRARY = ("/site-packages/", "/dist-packages/", "/torch/", "<frozen")


def _with_user_stack(blocks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Add the frames of the user's own code (outermost library frames dropped) to each block."""
    out = []
    for b in blocks:
        stack = b.get("stack") or []
        out.append({**b, "user_stack": [f for f in stack if not any(s in f for s in _LIBRARY)]})
    return out


def _oom_view(e: dict[str, Any], t0: float) -> dict[str, Any]:
    snap = e["snapshot"]
    return {"file": e.get("file"), "label": e.get("label"), "rank": e.get("rank"), "t": (e["t"] or t0) - t0,
            "step": e.get("step"), "source": e.get("source"), "requested": e.get("requested"),
            "fatal": bool(e.get("fatal")), "oom_events": e.get("oom_events"),
            "device": e.get("device"), "device_limit": e.get("device_limit"),
            "device_free": e.get("device_free_at_oom", e.get("device_free")), "device_total": e.get("device_total"),
            "message": e.get("message"), "stats": e.get("stats") or {}, "segments": snap.get("segments") or {},
            "history": snap.get("history"), "largest_live": _with_user_stack(snap.get("largest_live") or []),
            "live_by_source": snap.get("live_by_source") or [], "trace_peak": snap.get("trace_peak"),
            "trace_tail": (snap.get("trace_tail") or [])[-20:], "outside": e.get("outside") or {},
            "error": e.get("error")}
