"""Parsers for cgroup v1 and v2 interface files (memory.max, memory.events, oom_control, cpu.max).

Sizes are bytes; "unlimited" is None. v1 spells unlimited as a page-rounded LONG_MAX
(9223372036854771712); anything at or above 2**62 is treated as unlimited.
"""

from __future__ import annotations

_V1_UNLIMITED = 1 << 62


class Unparsable(ValueError):
    """The file did not hold what its name promises."""


def _ascii_digits(text: str) -> bool:
    """str.isdigit() also accepts digits such as '¹' that int() rejects."""
    return text.isascii() and text.isdigit()


def parse_limit(text: str) -> int | None:
    """`memory.max`/`memory.high` ('max' or bytes) and v1 `memory.limit_in_bytes`. None = unlimited."""
    value = text.strip().split("\n", 1)[0].strip()
    if value == "max":
        return None
    if not _ascii_digits(value) or len(value) > 20:
        raise Unparsable(f"not a byte count: {value[:40]!r}")
    n = int(value)
    return None if n >= _V1_UNLIMITED else n


def parse_counter(text: str) -> int:
    """A single non-negative integer (memory.current, memory.usage_in_bytes, memory.peak)."""
    value = text.strip().split("\n", 1)[0].strip()
    if not _ascii_digits(value) or len(value) > 20:
        raise Unparsable(f"not a counter: {value[:40]!r}")
    return int(value)


def parse_flat_keyed(text: str) -> dict[str, int]:
    """`key value` lines: memory.events, memory.stat, v1 memory.oom_control."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and _ascii_digits(parts[1]) and len(parts[1]) <= 20:
            out[parts[0]] = int(parts[1])
    return out


def parse_cpu_max(text: str) -> float | None:
    """v2 `cpu.max` ('max 100000' or '200000 100000') as cores; None = unlimited."""
    parts = text.split()
    if not parts:
        raise Unparsable("empty cpu.max")
    if parts[0] == "max":
        return None
    period = parts[1] if len(parts) > 1 else "100000"
    if not _ascii_digits(parts[0]) or not _ascii_digits(period) or int(period) == 0:
        raise Unparsable(f"not a quota/period: {text.strip()[:40]!r}")
    return round(int(parts[0]) / int(period), 3)


def parse_cfs_quota(quota_text: str, period_text: str) -> float | None:
    """v1 `cpu.cfs_quota_us` / `cpu.cfs_period_us` as cores; quota -1 = unlimited."""
    quota = quota_text.strip()
    period = period_text.strip()
    if quota == "-1":
        return None
    if not _ascii_digits(quota.lstrip("-")) or not _ascii_digits(period) or int(period) == 0:
        raise Unparsable(f"not a quota/period: {quota[:20]!r}/{period[:20]!r}")
    return round(int(quota) / int(period), 3)
