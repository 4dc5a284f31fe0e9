"""Put a generated markdown block between two marker comments of a docs page (appended if absent)."""

from __future__ import annotations

from pathlib import Path


def replace_block(page: Path, name: str, block: str) -> None:
    begin, end = f"<!-- {name}:begin (generated) -->", f"<!-- {name}:end -->"
    text = page.read_text() if page.exists() else ""
    new = f"{begin}\n{block.rstrip()}\n{end}"
    if begin in text and end in text:
        head, rest = text.split(begin, 1)
        text = head + new + rest.split(end, 1)[1]
    else:
        text = text.rstrip() + "\n\n" + new + "\n"
    page.write_text(text)


def gib(n: float | None) -> str:
    return "" if n is None else f"{n / (1 << 30):.2f} GiB"


def mib(n: float | None) -> str:
    return "" if n is None else f"{n / (1 << 20):,.1f} MiB"
