"""`diff` reports: the ranked differences between two machines, most relevant first."""

from __future__ import annotations

import json
from typing import Any

from oomdoctor.analysis.diff_notes import event_kinds
from oomdoctor.render.envelope import dumps
from oomdoctor.render.html import render_page
from oomdoctor.units import cut_words


def _short(value: Any, width: int = 34) -> str:
    """A table cell: OOM events as their summary (count, kinds, causes), anything else cut after a whole
    word (units.cut_words), never inside one where a space allows."""
    if value is None:
        return "-"
    if isinstance(value, list) and value and all(isinstance(e, dict) and "kind" in e for e in value):
        text = event_kinds(value)  # 'torch_oom -> true_capacity x2'
    else:
        text = value if isinstance(value, str) else json.dumps(value, default=str)
    return cut_words(text, width)


def to_json(result, headline: str | None) -> str:
    return dumps({**result.to_json(), "headline": headline})


def to_text(result, headline: str | None, limit: int | None = 25) -> str:
    lines = [f"A = {result.a_name}", f"B = {result.b_name}", ""]
    if headline:
        lines += ["Most relevant difference:", f"  {headline}", ""]
    diffs = result.differences if limit is None else result.differences[:limit]
    if not diffs:
        lines.append("no differences in any registered fact or finding")
    else:
        lines.append(f"{'score':>5}  {'layer':<11} {'key':<36} {'A':<34} B")
        for d in diffs:
            lines.append(f"{d.score:5.0f}  {d.layer:<11} {_short(d.key, 36):<36} {_short(d.a):<34} {_short(d.b)}".rstrip())
            if d.note:
                lines.append(f"{'':18}-> {d.note}")
    hidden = len(result.differences) - len(diffs)
    tail = f"{len(result.differences)} difference(s), {result.same} identical fact(s)"
    if hidden > 0:
        tail += f"; {hidden} lower-ranked difference(s) not shown (--all shows them)"
    lines += ["", tail]
    return "\n".join(lines) + "\n"


def to_html(result, headline: str | None) -> str:
    rows = [{"d": d, "a": _short(d.a, 80), "b": _short(d.b, 80)} for d in result.differences]
    return render_page("diff.html.j2", "oomdoctor diff", result=result, rows=rows, headline=headline)
