"""Render a max-batch payload (the JSON document's dict): text with a terminal chart, HTML, PNG.

The chart shows what the answer rests on: the measured peaks, the fitted line, the memory limit and
the budget (limit minus the margin), and the batch chosen; below it, throughput against the batch.
"""

from __future__ import annotations

from pathlib import PurePath
from typing import Any

from oomdoctor.units import format_bytes


def _dim(payload: dict[str, Any]) -> str:
    return "sequence length" if payload.get("dim") == "seq" else "batch size"


def _rate_unit(payload: dict[str, Any]) -> str:
    return "tokens/s" if payload.get("dim") == "seq" else "samples/s"


def _throughput(payload: dict[str, Any]) -> list[tuple[int, float]]:
    return sorted((t["batch"], float(t["throughput"])) for t in payload["trials"]
                  if t["outcome"] == "ok" and t.get("throughput"))


def throughput_lines(payload: dict[str, Any], width: int = 40) -> list[str]:
    """Throughput per measured batch as bars (the chart's second panel in plain text)."""
    pts = _throughput(payload)
    if not pts:
        return []
    top = max(v for _, v in pts)
    rec = payload.get("recommended_batch_size")
    out = [f"  throughput ({_rate_unit(payload)}) against {_dim(payload)}:"]
    for b, v in pts:
        mark = "  <- recommended" if b == rec else ""
        out.append(f"    {b:>7} |{'#' * max(1, round(v / top * width)):<{width}} {v:,.1f}{mark}")
    return out


def _points(payload: dict[str, Any]) -> list[tuple[int, int]]:
    return sorted((t["batch"], t["peak_reserved_bytes"]) for t in payload["trials"]
                  if t["outcome"] == "ok" and t["peak_reserved_bytes"] is not None)


def _line(payload: dict[str, Any], x: float) -> float | None:
    fit = payload.get("fit")
    return None if not fit else fit["intercept_bytes"] + fit["slope_bytes_per_sample"] * x


def _x_range(payload: dict[str, Any]) -> float:
    xs = [t["batch"] for t in payload["trials"]] + [payload.get("max_batch_size") or 1]
    return max(xs) * 1.1 + 1


def text_chart(payload: dict[str, Any], width: int = 64, height: int = 16) -> str:
    """A plain-character chart: o measured, x OOM, . fitted line, = limit, - budget, | answer."""
    limit, budget = payload["memory_limit_bytes"], payload["budget_bytes"]
    x_max = _x_range(payload)
    y_max = limit * 1.08
    grid = [[" "] * width for _ in range(height)]

    def col(x: float) -> int:
        return min(width - 1, max(0, round(x / x_max * (width - 1))))

    def row(y: float) -> int | None:
        r = height - 1 - round(y / y_max * (height - 1))
        return r if 0 <= r < height else None

    for c in range(width):
        y = _line(payload, c / (width - 1) * x_max)
        r = row(y) if y is not None else None
        if r is not None:
            grid[r][c] = "."
    for y, ch in ((budget, "-"), (limit, "=")):
        r = row(y)
        if r is not None:
            grid[r] = [ch if g in (" ", ".") else g for g in grid[r]]
    answer = payload.get("max_batch_size")
    if answer:
        c = col(answer)
        for r in range(height):
            if grid[r][c] in (" ", "."):
                grid[r][c] = "|"
    for t in payload["trials"]:
        if t["outcome"] == "ok" and t["peak_reserved_bytes"] is not None:
            r = row(t["peak_reserved_bytes"])
            if r is not None:
                grid[r][col(t["batch"])] = "o"
        else:
            grid[0][col(t["batch"])] = "x"
    label_w = 11
    lines = []
    for r in range(height):
        y = (height - 1 - r) / (height - 1) * y_max
        label = format_bytes(y) if r % 3 == 0 else ""
        lines.append(f"{label:>{label_w}} |" + "".join(grid[r]))
    lines.append(" " * label_w + " +" + "-" * width)
    lines.append(" " * label_w + f"  0{_dim(payload):^{width - 12}}{int(x_max):>9}")
    lines.append(" " * label_w + "  o measured peak  x OOM  . fit  = limit  - limit - margin  | answer")
    return "\n".join(lines)


def text(payload: dict[str, Any]) -> str:
    out = []
    b = payload["max_batch_size"]
    dim = _dim(payload)
    lim, bud = payload["memory_limit_bytes"], payload["budget_bytes"]
    head = f"max {dim}: {b}" if b is not None else f"max {dim}: none fits"
    at = f", at batch {payload['fixed_batch']}" if payload.get("fixed_batch") else ""
    out.append(f"{head}   ({payload['workload']}{at}, {payload.get('gpu') or 'GPU'}, "
               f"limit {format_bytes(lim)}, margin {payload['margin']:.0%} -> budget {format_bytes(bud)})")
    if b is not None:
        how = {"ran": "ran three full steps", "between": "lies between two batches that ran (memory is monotone)"}
        peak = payload.get("predicted_peak_bytes")
        out.append(f"  {b} {how.get(payload['verified'], payload['verified'])}; peak reserved "
                   f"{format_bytes(peak)}" + (" (fitted)" if payload["verified"] == "between" else " (measured)"))
        if payload["stopped_by"] == "max":
            out.append("  stopped at --max: more may fit")
    rec = payload.get("recommended_batch_size")
    if rec is not None:
        out.append(f"  recommended: {rec} (the smallest within 2% of the best throughput measured, "
                   f"{payload['best_throughput']:,.1f} {_rate_unit(payload)} at {payload['best_throughput_batch']})")
    pressure = payload.get("pressure")
    if pressure and pressure.get("under_pressure"):
        out.append(f"  the largest runs under allocator pressure: {pressure['alloc_retries']} allocation retries "
                   f"(cache flushed to retry cudaMalloc), {pressure['survived_ooms']} failed allocations survived "
                   "(cuDNN falls back to smaller workspaces); it may be slower and fragile over a long run")
    elif pressure:
        out.append("  the largest runs without allocator pressure (no allocation retries, no survived OOMs)")
    if payload.get("fit"):
        out.append(f"  fit: {payload['fit']['formula']}  [{payload['fit']['source']}]")
    out.append(f"  {len(payload['trials'])} trials in {payload['wall_seconds']:.1f} s:")
    for i, t in enumerate(payload["trials"], 1):
        peak = format_bytes(t["peak_reserved_bytes"]) if t["peak_reserved_bytes"] is not None else t["outcome"].upper()
        pred = f", predicted {format_bytes(t['predicted_bytes'])}" if t.get("predicted_bytes") else ""
        rate = f", {t['throughput']:,.1f}/s" if t.get("throughput") else ""
        retry = f", {t['alloc_retries']} retries" if t.get("alloc_retries") else ""
        out.append(f"    {i}. {t['batch']:>6}  {t['purpose']:<20} {peak:>12}{pred}{rate}{retry}  ({t['seconds']:.1f} s)")
    for note in payload.get("notes", []):
        out.append(f"  note: {note}")
    out.append("")
    out.append(text_chart(payload))
    tp = throughput_lines(payload)
    if tp:
        out.append("")
        out.extend(tp)
    return "\n".join(out) + "\n"


def _chart_series(payload: dict[str, Any]) -> tuple[list, list]:
    pts = [(float(x), float(y)) for x, y in _points(payload)]
    x_max = _x_range(payload)
    fit_pts = []
    if payload.get("fit"):
        fit_pts = [(x, _line(payload, x)) for x in (0.0, x_max)]
    return pts, fit_pts


def html(payload: dict[str, Any]) -> str:
    from oomdoctor.render.html import render_page
    from oomdoctor.render.svg import line_chart

    pts, fit_pts = _chart_series(payload)
    markers = [(float(payload["max_batch_size"]), f"answer {payload['max_batch_size']}")] if payload["max_batch_size"] else []
    chart = line_chart(
        [("measured peak reserved", pts), ("fit", fit_pts)], x_label=_dim(payload), y_label="memory",
        y_format=lambda v: format_bytes(v), markers=markers,
        hlines=[(float(payload["memory_limit_bytes"]), "limit"),
                (float(payload["budget_bytes"]), f"limit - {payload['margin']:.0%} margin")])
    tp = _throughput(payload)
    tchart = line_chart([(f"throughput ({_rate_unit(payload)})", [(float(b), v) for b, v in tp])],
                        x_label=_dim(payload), y_label=_rate_unit(payload), markers=markers) if tp else ""
    return render_page("max_batch.html.j2", title=f"oomdoctor max-batch: {payload['workload']}",
                       p=payload, chart=chart + tchart, report=text(payload))


def png(payload: dict[str, Any]) -> bytes:
    """The chart as PNG bytes, drawn with matplotlib (the `plot` extra). ImportError if it is absent."""
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pts, fit_pts = _chart_series(payload)
    gib = 1024**3
    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=120)
    if fit_pts:
        ax.plot([x for x, _ in fit_pts], [y / gib for _, y in fit_pts], "--", color="#57606a",
                label=payload["fit"]["formula"])
    ax.plot([x for x, _ in pts], [y / gib for _, y in pts], "o", color="#0969da", label="measured peak reserved")
    ooms = [t["batch"] for t in payload["trials"] if t["outcome"] != "ok"]
    if ooms:
        ax.plot(ooms, [payload["memory_limit_bytes"] / gib] * len(ooms), "x", color="#cf222e", ms=10, label="OOM")
    ax.axhline(payload["memory_limit_bytes"] / gib, color="#cf222e", label="limit")
    ax.axhline(payload["budget_bytes"] / gib, color="#9a6700", ls=":", label=f"limit - {payload['margin']:.0%} margin")
    if payload["max_batch_size"]:
        ax.axvline(payload["max_batch_size"], color="#8250df", ls="-.", label=f"answer {payload['max_batch_size']}")
    ax.set_xlabel(_dim(payload))
    ax.set_ylabel("GiB")
    ax.set_ylim(0, payload["memory_limit_bytes"] / gib * 1.1)
    ax.set_title(f"max-batch: {PurePath(payload['workload']).name} ({payload.get('gpu') or 'GPU'})")
    handles, labels = ax.get_legend_handles_labels()
    tp = _throughput(payload)
    if tp:
        ax2 = ax.twinx()
        (h,) = ax2.plot([b for b, _ in tp], [v for _, v in tp], "s-", color="#1a7f37", ms=4,
                        label=f"throughput ({_rate_unit(payload)})")
        ax2.set_ylabel(_rate_unit(payload))
        ax2.set_ylim(0, max(v for _, v in tp) * 1.15)
        handles, labels = handles + [h], labels + [h.get_label()]
    ax.legend(handles, labels, fontsize=7, loc="lower right")
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return buf.getvalue()
