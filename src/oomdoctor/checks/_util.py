"""Helpers shared by checks: evidence from facts, tolerant readers of list/dict fact values."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable
from typing import Any

from oomdoctor.facts import Category, Confidence, Evidence, FactSet, Finding, Layer, Severity
from oomdoctor.facts.gpu import as_list, gpus, truthy  # noqa: F401 - the checks' names for them
from oomdoctor.units import cut_words, format_bytes

__all__ = ["Category", "Confidence", "Evidence", "FactSet", "Finding", "Layer", "Severity",
           "as_dict", "as_int", "as_list", "cuda_totals", "ev", "ev_value", "finding", "gpus", "mib", "short"]


def short(value: Any, limit: int = 160) -> str:
    if isinstance(value, str):
        text = value
    else:
        try:
            text = json.dumps(value, sort_keys=True, default=str)
        except (TypeError, ValueError):
            text = str(value)
    return cut_words(text, limit)


def mib(n: Any) -> str:
    return format_bytes(n) if isinstance(n, (int, float)) else "n/a"


def ev(facts: FactSet, key: str, shown: Any = None) -> Evidence:
    """Evidence for a fact: its (or a derived) value and where the FactSet says it was read."""
    value = facts.value(key) if shown is None else shown
    return Evidence(key, short(value), facts.source(key) or "unknown source")


_CITATION_KEY = re.compile(r",?\s*\[[A-Z][A-Z0-9]{2,}\]")


def public_source(source: str) -> str:
    """A knowledge table's source as users read it: the public document, without the citation keys (`[RN132]`)
    that point developers into docs/reference/environment-facts.md, a file a user of the package does not have."""
    text = _CITATION_KEY.sub("", source).replace("(, ", "(").replace(" ()", "").strip()
    return re.sub(r"\(\s*\)", "", text).strip() or "documented knowledge"


def ev_value(fact: str, value: Any, source: str) -> Evidence:
    return Evidence(fact, short(value), public_source(source))


def as_int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return int(value) if math.isfinite(value) else None
    if isinstance(value, str) and value.strip().isascii() and value.strip().lstrip("-").isdigit():
        return int(value.strip())
    return None


def as_dict(value: Any) -> dict[str, Any]:
    return dict(value) if isinstance(value, dict) else {}


def finding(check_id: str, layer: Layer, severity: Severity, confidence: Confidence, title: str, remedy: str,
            category: Category | None = None, evidence: Iterable[Evidence] = ()) -> Finding:
    return Finding(id=check_id, layer=layer, severity=severity, confidence=confidence, title=title,
                   remedy=remedy, category=category, evidence=tuple(evidence))



def cuda_totals(facts: FactSet) -> Iterable[tuple[str, dict[str, Any], object, int]]:
    """What CUDA tells this process each GPU holds: (fact key, item, GPU index, total bytes), from the probe's
    `torch.cuda.mem_get_info()` (its "gpu" field) first, then the torch child's device properties (by position).
    Under a slicing layer whose hook is in CUDA's path this is the slice (SHR011), else the card (SHR003)."""
    for key, field, index_key in (("probe.mem_get_info", "total_bytes", "gpu"), ("torch.devices", "total_memory", None)):
        for i, item in enumerate(as_list(facts.value(key))):
            if not isinstance(item, dict):
                continue
            total = as_int(item.get(field))
            gi = item.get(index_key) if index_key else i
            if total:
                yield key, item, (gi if isinstance(gi, int) else i), total
