"""Render a max-batch payload (the JSON document's dict): text with a terminal chart, HTML, PNG.

The chart shows what the answer rests on: the measured peaks, the fitted line, the memory limit and
the budget (limit minus the margin), and the batch chosen.
"""

from __future__ import annotations

from pathlib import PurePath
from typing import Any

from oomdoctor.units import format_bytes


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
    lines.append(" " * label_w + f"  0{'batch size':^{width - 12}}{int(x_max):>9}")
    lines.append(" " * label_w + "  o measured peak  x OOM  . fit  = limit  - limit - margin  | answer")
    return "\n".join(lines)


def text(payload: dict[str, Any]) -> str:
    out = []
    b = payload["max_batch_size"]
    lim, bud = payload["memory_limit_bytes"], payload["budget_bytes"]
    head = f"max batch size: {b}" if b is not None else "max batch size: none fits"
    out.append(f"{head}   ({payload['workload']}, {payload.get('gpu') or 'GPU'}, "
               f"limit {format_bytes(lim)}, margin {payload['margin']:.0%} -> budget {format_bytes(bud)})")
    if b is not None:
        how = {"ran": "ran three full steps", "between": "lies between two batches that ran (memory is monotone)"}
        peak = payload.get("predicted_peak_bytes")
        out.append(f"  batch {b} {how.get(payload['verified'], payload['verified'])}; peak reserved "
                   f"{format_bytes(peak)}" + (" (fitted)" if payload["verified"] == "between" else " (measured)"))
        if payload["stopped_by"] == "max":
            out.append("  stopped at --max: more may fit")
    if payload.get("fit"):
        out.append(f"  fit: {payload['fit']['formula']}  [{payload['fit']['source']}]")
    out.append(f"  {len(payload['trials'])} trials in {payload['wall_seconds']:.1f} s:")
    for i, t in enumerate(payload["trials"], 1):
        peak = format_bytes(t["peak_reserved_bytes"]) if t["peak_reserved_bytes"] is not None else t["outcome"].upper()
        pred = f", predicted {format_bytes(t['predicted_bytes'])}" if t.get("predicted_bytes") else ""
        out.append(f"    {i}. batch {t['batch']:>6}  {t['purpose']:<9} {peak:>12}{pred}  ({t['seconds']:.1f} s)")
    for note in payload.get("notes", []):
        out.append(f"  note: {note}")
    out.append("")
    out.append(text_chart(payload))
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
        [("measured peak reserved", pts), ("fit", fit_pts)], x_label="batch size", y_label="memory",
        y_format=lambda v: format_bytes(v), markers=markers,
        hlines=[(float(payload["memory_limit_bytes"]), "limit"),
                (float(payload["budget_bytes"]), f"limit - {payload['margin']:.0%} margin")])
    return render_page("max_batch.html.j2", title=f"oomdoctor max-batch: {payload['workload']}",
                       p=payload, chart=chart, report=text(payload))


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
    ax.set_xlabel("batch size")
    ax.set_ylabel("GiB")
    ax.set_ylim(0, payload["memory_limit_bytes"] / gib * 1.1)
    ax.set_title(f"max-batch: {PurePath(payload['workload']).name} ({payload.get('gpu') or 'GPU'})")
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return buf.getvalue()
