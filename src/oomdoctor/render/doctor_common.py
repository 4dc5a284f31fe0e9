"""Formatting shared by the doctor renderers: one short, readable string per fact value."""

from __future__ import annotations

import json
from typing import Any

from oomdoctor.units import cut_words, format_bytes

MAX_VALUE = 110


def fact_value_text(key: str, value: Any) -> str:
    """Sizes as MiB/GiB (keys ending in _bytes), lists of GPUs summarised, everything else compact JSON."""
    if value is None:
        return "unlimited" if "limit" in key else "none"
    if key.endswith("_bytes") and isinstance(value, (int, float)) and not isinstance(value, bool):
        return format_bytes(value)
    if key == "driver.gpus" and isinstance(value, list):
        parts = []
        for g in value:
            if isinstance(g, dict):
                parts.append(f"{g.get('index', '?')}: {g.get('name', '?')} {format_bytes(g.get('memory_used_bytes'))}"
                             f" / {format_bytes(g.get('memory_total_bytes'))} used")
        text = "; ".join(parts)
    elif isinstance(value, str):
        text = value
    else:
        try:
            text = json.dumps(value, sort_keys=True, default=str)
        except (TypeError, ValueError):
            text = str(value)
    return one_line(text, MAX_VALUE)


def one_line(text: str, limit: int) -> str:
    """Whitespace folded to single spaces, cut between words to `limit` characters with an ellipsis."""
    return cut_words(text, limit)
