"""Robust trend statistics: Theil-Sen slope and Kendall's tau, so one spike never makes a leak."""

from __future__ import annotations

from collections.abc import Sequence
from statistics import median


def theil_sen(xs: Sequence[float], ys: Sequence[float], max_pairs: int = 200_000) -> tuple[float, float]:
    """(slope, intercept): the median of pairwise slopes; intercept = median(y - slope*x)."""
    n = len(xs)
    if n < 2:
        return 0.0, (ys[0] if ys else 0.0)
    stride = 1
    while (n // stride) ** 2 / 2 > max_pairs:
        stride += 1
    idx = range(0, n, stride)
    slopes = [(ys[j] - ys[i]) / (xs[j] - xs[i]) for i in idx for j in idx if j > i and xs[j] != xs[i]]
    slope = median(slopes) if slopes else 0.0
    return slope, median(y - slope * x for x, y in zip(xs, ys))


def kendall_tau(xs: Sequence[float], ys: Sequence[float]) -> float:
    """Kendall's tau-a: (concordant - discordant) / all pairs; ties count as neither (a plateau scores 0)."""
    n = len(xs)
    if n < 2:
        return 0.0
    s = 0
    for i in range(n):
        for j in range(i + 1, n):
            dx, dy = xs[j] - xs[i], ys[j] - ys[i]
            if dx and dy:
                s += 1 if (dx > 0) == (dy > 0) else -1
    return s / (n * (n - 1) / 2)


def window_minima(points: Sequence[tuple[float, float]], windows: int) -> list[tuple[float, float]]:
    """Split points (sorted by x) into `windows` runs and keep each run's minimum, at the run's middle x.

    Step-boundary minima remove the saw-tooth of each step's activations; what is left is what
    survives from step to step.
    """
    if not points:
        return []
    size = max(1, len(points) // max(1, windows))
    out = []
    for k in range(0, len(points), size):
        chunk = points[k:k + size]
        if len(chunk) < max(1, size // 2) and out:
            break
        out.append((chunk[len(chunk) // 2][0], min(p[1] for p in chunk)))
    return out
