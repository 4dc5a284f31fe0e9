"""Small inline SVG charts, so HTML reports need no JavaScript library and no network."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from html import escape

PALETTE = ("#0969da", "#cf222e", "#1a7f37", "#9a6700", "#8250df", "#57606a", "#bc4c00", "#1b7c83")

Series = tuple[str, Sequence[tuple[float, float]]]


def _ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    if hi <= lo:
        return [lo]
    step = (hi - lo) / n
    return [lo + i * step for i in range(n + 1)]


def line_chart(
    series: Sequence[Series],
    *,
    width: int = 900,
    height: int = 280,
    x_label: str = "",
    y_label: str = "",
    y_format: Callable[[float], str] = lambda v: f"{v:g}",
    x_format: Callable[[float], str] = lambda v: f"{v:g}",
    markers: Sequence[tuple[float, str]] = (),
    hlines: Sequence[tuple[float, str]] = (),
) -> str:
    """A multi-series line chart. `markers` are vertical lines (x, label); `hlines` horizontal (y, label)."""
    pts = [p for _, s in series for p in s]
    if not pts:
        return f'<svg width="{width}" height="40"><text x="10" y="24">no data</text></svg>'
    left, right, top, bottom = 78, 16, 14, 40
    xs = [p[0] for p in pts] + [m[0] for m in markers]
    ys = [p[1] for p in pts] + [h[0] for h in hlines] + [0.0]
    x0, x1 = min(xs), max(xs)
    y0, y1 = min(ys), max(ys) * 1.05 or 1.0
    if x1 == x0:
        x1 = x0 + 1

    def sx(x: float) -> float:
        return left + (x - x0) / (x1 - x0) * (width - left - right)

    def sy(y: float) -> float:
        return height - bottom - (y - y0) / ((y1 - y0) or 1) * (height - top - bottom)

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img">']
    for t in _ticks(y0, y1):
        out.append(f'<line x1="{left}" x2="{width - right}" y1="{sy(t):.1f}" y2="{sy(t):.1f}" stroke="#eaeef2"/>')
        out.append(f'<text x="{left - 6}" y="{sy(t) + 4:.1f}" text-anchor="end">{escape(y_format(t))}</text>')
    for t in _ticks(x0, x1):
        out.append(f'<text x="{sx(t):.1f}" y="{height - bottom + 16}" text-anchor="middle">{escape(x_format(t))}</text>')
    out.append(f'<text x="{(left + width - right) / 2:.0f}" y="{height - 6}" text-anchor="middle">{escape(x_label)}</text>')
    out.append(f'<text x="14" y="{top + 4}" text-anchor="start">{escape(y_label)}</text>')
    for y, label in hlines:
        out.append(f'<line x1="{left}" x2="{width - right}" y1="{sy(y):.1f}" y2="{sy(y):.1f}" stroke="#cf222e" stroke-dasharray="6 4"/>')
        out.append(f'<text x="{width - right - 4}" y="{sy(y) - 4:.1f}" text-anchor="end" fill="#cf222e">{escape(label)}</text>')
    for x, label in markers:
        out.append(f'<line x1="{sx(x):.1f}" x2="{sx(x):.1f}" y1="{top}" y2="{height - bottom}" stroke="#8250df" stroke-dasharray="3 3"/>')
        out.append(f'<text x="{sx(x) + 3:.1f}" y="{top + 10}" fill="#8250df">{escape(label)}</text>')
    legend_x, legend_y = left + 10, top
    for i, (name, s) in enumerate(series):
        if not s:
            continue
        color = PALETTE[i % len(PALETTE)]
        path = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in s)
        out.append(f'<polyline fill="none" stroke="{color}" stroke-width="1.8" points="{path}"/>')
        # Legend entries sized by their text (11 px monospace is ~6.6 px a character), wrapped to fit.
        entry = 14 + int(6.8 * len(name)) + 18
        if legend_x + entry > width - right and legend_x > left + 10:
            legend_x, legend_y = left + 10, legend_y + 14
        out.append(f'<rect x="{legend_x}" y="{legend_y}" width="10" height="10" fill="{color}"/>')
        out.append(f'<text x="{legend_x + 14}" y="{legend_y + 9}">{escape(name)}</text>')
        legend_x += entry
    out.append("</svg>")
    return "".join(out)


def bar_chart(items: Sequence[tuple[str, float]], *, width: int = 900, bar_height: int = 18,
              colors: Sequence[str] = ()) -> str:
    """Horizontal bars, one per (label, value), largest first as given."""
    if not items:
        return f'<svg width="{width}" height="30"><text x="10" y="20">no data</text></svg>'
    left, right, gap = 170, 60, 6
    top = max(v for _, v in items) or 1
    height = len(items) * (bar_height + gap) + gap
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img">']
    for i, (label, value) in enumerate(items):
        y = gap + i * (bar_height + gap)
        w = (width - left - right) * value / top
        color = colors[i] if i < len(colors) else PALETTE[0]
        out.append(f'<text x="{left - 6}" y="{y + bar_height - 5}" text-anchor="end">{escape(label)}</text>')
        out.append(f'<rect x="{left}" y="{y}" width="{w:.1f}" height="{bar_height}" fill="{color}"/>')
        out.append(f'<text x="{left + w + 4:.1f}" y="{y + bar_height - 5}">{value:g}</text>')
    out.append("</svg>")
    return "".join(out)
