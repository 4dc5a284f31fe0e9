"""Render an analysed recording (analysis.timeline.analyse) as HTML (self-contained), text or JSON."""

from __future__ import annotations

from typing import Any

from oomdoctor.render import envelope, html, svg
from oomdoctor.units import format_bytes

MAX_POINTS = 1200


def _thin(points: list[Any]) -> list[tuple[float, float]]:
    """At most MAX_POINTS points; each bucket keeps its min and max so spikes stay visible."""
    pts = [(float(x), float(y)) for x, y in points]
    if len(pts) <= MAX_POINTS:
        return pts
    size = len(pts) * 2 // MAX_POINTS + 1
    out = []
    for k in range(0, len(pts), size):
        chunk = pts[k:k + size]
        lo, hi = min(chunk, key=lambda p: p[1]), max(chunk, key=lambda p: p[1])
        out.extend(sorted({lo, hi}))
    return out


def _bytes_axis(v: float) -> str:
    return format_bytes(v).replace(".00 ", " ")


def _chart(series: list[tuple[str, list[Any]]], markers: list[tuple[float, str]], y_label: str,
           x_label: str = "seconds since start") -> str:
    kept = [(name, _thin(s)) for name, s in series if s]
    if not kept:
        return ""
    xs = [p[0] for _, s in kept for p in s]
    span = (max(xs) - min(xs)) if xs else 0
    digits = 0 if span >= 20 else (1 if span >= 2 else 2)
    return svg.line_chart(kept, x_label=x_label, y_label="", y_format=_bytes_axis,
                          x_format=lambda v: f"{v:.{digits}f}", markers=markers)


def charts(doc: dict[str, Any]) -> list[dict[str, str]]:
    procs = doc["processes"]
    gpu = [p for p in procs if p["uses_gpu"]]
    markers = [(o["t"], "OOM") for o in doc["ooms"][-1:]]
    out = []
    one = len(gpu) == 1
    if gpu:
        s = []
        for p in gpu:
            pre = "" if one else p["name"] + " "
            s += [(pre + "allocated", p["series"].get("allocated", [])), (pre + "reserved", p["series"].get("reserved", []))]
            if one:
                s.append(("NVML process", p["series"].get("gpu_proc_used", [])))
        if one and doc["outside"].get("gpu_devices_used"):
            s.append(("NVML device(s)", doc["outside"]["gpu_devices_used"]))
        out.append({"title": "GPU memory: allocator allocated / reserved" + (", NVML" if one else " per rank"),
                    "svg": _chart(s, markers, "bytes")})
        if not one:
            s = [(p["name"] + " NVML", p["series"].get("gpu_proc_used", [])) for p in gpu]
            if doc["outside"].get("gpu_devices_used"):
                s.append(("NVML device(s)", doc["outside"]["gpu_devices_used"]))
            out.append({"title": "GPU memory seen by NVML (context, NCCL and other libraries included)",
                        "svg": _chart(s, markers, "bytes")})
        s = []
        for p in gpu:
            res, alloc = dict(p["series"].get("reserved", [])), p["series"].get("allocated", [])
            pre = "" if one else p["name"] + " "
            s.append((pre + "reserved - allocated", [(t, res[t] - a) for t, a in alloc if t in res]))
            s.append((pre + "inactive split", p["series"].get("inactive_split", [])))
        out.append({"title": "Fragmentation: memory reserved by the cache but not in tensors",
                    "svg": _chart(s, markers, "bytes")})
    s = [(p["name"] + " RSS", p["series"].get("rss", [])) for p in procs if p["samples"] > 1][:6]
    for key, name in (("tree_rss", "job tree RSS"), ("cgroup_current", "cgroup"), ("shm_used", "/dev/shm")):
        if doc["outside"].get(key):
            s.append((name, doc["outside"][key]))
    out.append({"title": "Host memory", "svg": _chart(s, markers, "bytes")})
    for p in procs:
        leak = p.get("leak")
        if leak and leak.get("minima"):
            xs = [m[0] for m in leak["minima"]]
            trend = [(x, leak["intercept"] + leak["slope_bytes"] * x) for x in (xs[0], xs[-1])]
            out.append({"title": f"{p['name']}: allocated at step boundaries (window minima) and robust trend",
                        "svg": _chart([("minimum", leak["minima"]), ("trend", trend)], [], "bytes",
                                      x_label=leak["unit"])})
    return [c for c in out if c["svg"]]


def render_html(doc: dict[str, Any]) -> str:
    return html.render_page("record.html.j2", title=f"oomdoctor report: {doc['run_dir']}", doc=doc,
                            charts=charts(doc), fb=format_bytes, ended=doc.get("ended"))


def render_json(doc: dict[str, Any]) -> str:
    slim = {k: v for k, v in doc.items() if k != "processes"}
    slim["processes"] = [{k: v for k, v in p.items() if k != "series"} for p in doc["processes"]]
    return envelope.dumps({"kind": "record-report", **slim})


def _live_lines(live: dict[str, Any] | None) -> list[str]:
    """What grew between the first look (0.25 s after CUDA came up) and the end, by source or block size."""
    if not live or not live.get("grown"):
        return []
    by = "source line" if live["by"] == "source" else "block size (no allocation history: --history 20000 names lines)"
    out = [f"  live at the end against the first look, by {by} ({live['looks']} looks"
           + (f", {live['span_s']:.1f} s" if live.get("span_s") is not None else "") + "):"]
    for g in live["grown"][:5]:
        what = g["key"] if g["by"] == "source" else f"{format_bytes(g['key'])} blocks"
        blocks = "?" if g["new_blocks"] is None else f"{g['new_blocks']:+.0f}"
        flag = "  <- keeps adding blocks" if g["accumulating"] else ""
        out.append(f"    +{format_bytes(g['growth_bytes'])} ({blocks} blocks, more at {g['rises']} of "
                   f"{g['intervals']} looks) {what}{flag}")
    return out


def ended_unknown(meta: dict[str, Any]) -> str:
    """No exit wording: run.json begun but never finished is a recording cut short; no run.json at all is an
    in-process recording by an older oomdoctor.watch or callback (before they wrote one), whose end is the end of
    the watched block."""
    if not meta:
        return ("not recorded (no run.json: an in-process recording by an older oomdoctor.watch or callback, "
                "which ends with its block)")
    return "exit status not recorded (the recording was cut short)"


def render_text(doc: dict[str, Any]) -> str:
    v = doc["verdict"]
    lines = [f"oomdoctor report {doc['run_dir']}"]
    meta = doc["meta"]
    if meta.get("argv"):
        lines.append(f"command: {' '.join(meta['argv'])}")
    lines.append(f"ended: {doc.get('ended') or ended_unknown(meta)}")
    lines.append("")
    lines.append(f"verdict: {v['summary']}" + (f"  [{v['category']}]" if v.get("category") else ""))
    lines += [f"  - {e}" for e in v["evidence"]]
    if v["fixes"]:
        lines.append("fix:")
        lines += [f"  * {f}" for f in v["fixes"]]
    lines.append("")
    for p in doc["processes"]:
        pk = p["peaks"]
        lines.append(f"{p['name']}: {p['steps']} steps, {p['samples']} samples; peak allocated "
                     f"{format_bytes(pk.get('peak_allocated', pk.get('allocated')))}, peak reserved "
                     f"{format_bytes(pk.get('peak_reserved', pk.get('reserved')))}, peak RSS {format_bytes(pk.get('rss'))}")
        leak = p.get("leak")
        if leak:
            state = "LEAK" if leak["leak"] else "no steady growth"
            pattern = (leak.get("pattern") or "").replace("_", " ")
            source = {"markers": "step markers", "cycles": "steps inferred from the allocation cycles",
                      "time": "time windows"}.get(leak.get("steps_from") or "", "")
            lines.append(f"  growth model: {state}; {pattern} ({format_bytes(leak['slope_bytes'])}/{leak['unit']}, "
                         f"tau {leak['tau']}, {leak['points']} points after {leak.get('warmup_points', 0)} of "
                         f"warm-up; {source})")
            for sh in leak.get("level_shifts") or ():
                lines.append(f"  level shift of {format_bytes(sh['bytes'])} at {leak['unit']} {sh['at']:g} "
                             "(a one-off, e.g. a cache filled once: not growth)")
            lines += _live_lines(leak.get("live_growth"))
    for o in doc["ooms"][-1:] + doc["finals"]:
        what = "OOM" if o in doc["ooms"] else "end of run"
        tp = o.get("trace_peak")
        if not (o["largest_live"] or o["live_by_source"] or (tp and tp.get("live_by_source"))):
            continue  # nothing to list: no empty heading (the verdict already names the OOM)
        lines.append("")
        lines.append(f"{what} ({o.get('label')}, step {o.get('step')})" + (
            ": largest live allocations" if o["largest_live"] else ":"))
        for b in o["largest_live"][:5]:
            lines.append(f"  {format_bytes(b['size']):>12}  {b['source']}")
        if o["live_by_source"]:
            lines.append("  live memory by source line:")
            for g in o["live_by_source"][:6]:
                lines.append(f"  {format_bytes(g['bytes']):>12}  {g['blocks']:>5} blocks  {g['source']}")
        if tp and tp.get("live_by_source"):
            lines.append(f"  at the peak of the recorded window ({format_bytes(tp['allocated'])}), by source line:")
            for g in tp["live_by_source"][:8]:
                lines.append(f"  {format_bytes(g['bytes']):>12}  {g['blocks']:>5} blocks  {g['source']}")
    for f in doc.get("environment_findings", []):
        lines.append(f"environment: [{f.get('severity')}] {f.get('id')} {f.get('title')}")
    for prob in doc["problems"]:
        lines.append(f"note: {prob}")
    return "\n".join(lines) + "\n"
