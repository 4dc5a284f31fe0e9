"""Sizes as people write them (`8GiB`, `8192MiB`, `8GB`, `123456`) and as PyTorch prints them; text cut to a width."""

from __future__ import annotations

import re
from decimal import Decimal

from oomdoctor.errors import UsageError

_UNITS = {
    "": 1, "b": 1, "bytes": 1, "byte": 1,
    "k": 1000, "kb": 1000, "kib": 1024,
    "m": 1000**2, "mb": 1000**2, "mib": 1024**2,
    "g": 1000**3, "gb": 1000**3, "gib": 1024**3,
    "t": 1000**4, "tb": 1000**4, "tib": 1024**4,
}
_SIZE_RE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([a-zA-Z]*)\s*$")


def parse_size(text: str) -> int:
    """Bytes from '8GiB', '8192MiB', '8GB', '1.5 GiB' or plain '123'. Raises UsageError."""
    m = _SIZE_RE.match(str(text))
    if not m or m.group(2).lower() not in _UNITS:
        raise UsageError(f"invalid size {str(text)[:60]!r}: use e.g. 8GiB, 8192MiB, 8GB or plain bytes")
    # Decimal, not float: exact for any byte count (float rounds above 2**53 and overflows to inf).
    value = int(Decimal(m.group(1)) * _UNITS[m.group(2).lower()])
    if value >= 1 << 63:
        raise UsageError(f"invalid size {str(text)[:60]!r}: larger than any memory (at most 8 EiB)")
    return value


def torch_size_to_bytes(number: str, unit: str) -> int:
    """Bytes from PyTorch's `format_size` output ('1.95', 'GiB'). PyTorch uses binary units."""
    factor = {"bytes": 1, "byte": 1, "b": 1, "kib": 1024, "kb": 1024, "mib": 1024**2, "mb": 1024**2,
              "gib": 1024**3, "gb": 1024**3, "tib": 1024**4, "tb": 1024**4}[unit.lower()]
    return int(round(float(number.replace(",", "")) * factor))


def format_bytes(n: int | float | None) -> str:
    """Human size with binary units, 2 decimals above KiB: '1.95 GiB', '512 bytes'."""
    if n is None:
        return "n/a"
    n = float(n)
    sign = "-" if n < 0 else ""
    n = abs(n)
    if n < 1024:
        return f"{sign}{int(n)} bytes"
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        n /= 1024
        if n < 1024 or unit == "TiB":
            return f"{sign}{n:.2f} {unit}"
    raise AssertionError("unreachable")


def parse_limit(text: object) -> int | None:
    """HAMi / MPS style sizes: '4096m', '1G', '512M', '3000' (MiB when no unit, as HAMi documents).
    An int is already bytes (what the collectors store)."""
    if isinstance(text, int) and not isinstance(text, bool):
        return text
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kKmMgGtT]?)[iI]?[bB]?\s*", str(text))
    if not m:
        return None
    mult = {"": 1024**2, "k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4}[m.group(2).lower()]
    return int(float(m.group(1)) * mult)


def parse_device_limits(text: object) -> dict[str, int]:
    """Per-device sizes as MPS writes them (CUDA_MPS_PINNED_DEVICE_MEM_LIMIT='0=1G,1=512M'): device -> bytes;
    a bare size ('8G') applies to every device (key '*'). Parts that are not a size are left out."""
    out: dict[str, int] = {}
    for part in str(text or "").split(","):
        dev, eq, size = part.partition("=")
        b = parse_limit(size if eq else dev)
        if b is not None and (not eq or dev.strip()):
            out[dev.strip() if eq else "*"] = b
    return out


def cut_words(text: str, limit: int) -> str:
    """Whitespace folded to single spaces and, past `limit` characters, cut after the last whole word
    that fits, marked " …" (a cut inside a word read as a typo: "driver librarie…", session 26). A
    single word longer than the room left is cut where it must be."""
    text = " ".join(str(text).split())
    if len(text) <= limit:
        return text
    head = text[: limit - 1]
    space = head.rfind(" ")
    if space >= limit // 2:
        return head[:space].rstrip(" ,;:") + " …"
    return head.rstrip() + "…"
