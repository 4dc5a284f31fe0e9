"""Version strings as comparable tuples. Drivers ('535.129.03'), CUDA ('12.2', '11.3.109'), kernels."""

from __future__ import annotations

import re

_NUM = re.compile(r"\d+(?:\.\d+)*")


def vtuple(text: object, parts: int | None = None) -> tuple[int, ...] | None:
    """(535, 129, 3) from '535.129.03'; None when no number is found. `parts` truncates."""
    if text is None:
        return None
    m = _NUM.search(str(text))
    if not m:
        return None
    nums = tuple(int(p) for p in m.group(0).split("."))
    return nums[:parts] if parts else nums


def cuda_mm(text: object) -> tuple[int, int] | None:
    """(major, minor) of a CUDA version: '12.2', '11.3.109', 'cu113', 12020 (driver API int)."""
    if text is None:
        return None
    if isinstance(text, int) or (isinstance(text, str) and text.isascii() and text.isdigit() and len(text) >= 4):
        n = int(text)
        return (n // 1000, (n % 1000) // 10)
    s = str(text)
    m = re.fullmatch(r"\s*cu(\d{2,3})\s*", s)
    if m:
        d = m.group(1)
        return (int(d[:-1]), int(d[-1]))
    t = vtuple(s)
    if not t:
        return None
    return (t[0], t[1] if len(t) > 1 else 0)


def fmt(v: tuple[int, ...] | None) -> str:
    return ".".join(str(p) for p in v) if v else "?"


def driver_branch(version: object) -> int | None:
    t = vtuple(version)
    return t[0] if t else None


def kernel_mm(release: object) -> tuple[int, int, int] | None:
    """(3, 10, 0) from '3.10.0-1062.9.1.el7.x86_64' or from a whole /proc/version line."""
    if release is None:
        return None
    m = re.search(r"(\d+)\.(\d+)(?:\.(\d+))?", str(release))
    if not m:
        return None
    return (int(m.group(1)), int(m.group(2)), int(m.group(3) or 0))
