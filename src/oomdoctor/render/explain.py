"""Render an Explanation as text (rich), JSON (docs/contracts.md §4) or self-contained HTML. Formatting only."""

from __future__ import annotations

import io

from oomdoctor.explain.rank import Explanation
from oomdoctor.render.envelope import dumps
from oomdoctor.units import cut_words, format_bytes

# rich and jinja2 are imported by the renderer that needs them: `--format json` on a 1 GB log should
# not pay ~70 ms of imports it never uses.

_NUMBER_LABELS = (
    ("requested_bytes", "requested (alloc size)"), ("total_bytes", "GPU total"), ("free_bytes", "free"),
    ("allowed_bytes", "allowed (fraction cap)"), ("process_bytes", "this process"),
    ("allocated_bytes", "allocated by PyTorch"), ("reserved_bytes", "reserved by PyTorch"),
    ("reserved_unallocated_bytes", "reserved but unallocated"), ("private_pool_bytes", "in private pools"),
)
_MAX_EVENTS_SHOWN = 20


# the same figure under another framework's name (CuPy's pool reports what it has handed out so far)
# HAMi's "Device 0 OOM used / limit": the pod's limit, not the card (a walkthrough, session 27, read "GPU total: 8.00 GiB")
_LABELS_BY_KIND = {"cupy_oom": {"allocated_bytes": "allocated by CuPy's pool so far"},
                   "hami_oom": {"total_bytes": "HAMi limit (the pod's nvidia.com/gpumem)"},
                   "mps_oom": {"allowed_bytes": "max allowed (the MPS limit)", "allocated_bytes": "MPS allocated"}}


def number_rows(numbers: dict[str, int], kind: str = "") -> list[tuple[str, str]]:
    names = _LABELS_BY_KIND.get(kind, {})
    return [(names.get(k, label), format_bytes(numbers[k])) for k, label in _NUMBER_LABELS if k in numbers]


def to_json(ex: Explanation) -> str:
    return dumps(ex.to_json())


_MAX_HYPOTHESES_SHOWN = 4
_MIN_CONFIDENCE_SHOWN = 0.05


def _shown(hyps: list) -> int:
    """How many hypotheses get their evidence printed: two at least, at most four, none under 0.05 past the
    second (a flat leaning over eight causes is noise in a terminal; JSON keeps them all)."""
    n = min(len(hyps), 2)
    while n < min(len(hyps), _MAX_HYPOTHESES_SHOWN) and hyps[n].confidence >= _MIN_CONFIDENCE_SHOWN:
        n += 1
    return n


def ranked(ex: Explanation) -> list:
    """The causes to show: `unknown` (a rule's "the message does not say which memory ran out") is no cause to rank
    beside the others, so it is shown only when nothing else was found (a walkthrough, session 28, read "2. unknown
    confidence 0.03" as a cause). JSON keeps it."""
    return [h for i, h in enumerate(ex.hypotheses) if i == 0 or h.category != "unknown"]


def _notes(con, ex: Explanation) -> None:
    from rich.markup import escape

    for n in ex.notes:
        con.print(f"[yellow]Note:[/yellow] {escape(n)}")


def none_found(ex: Explanation) -> str:
    """The answer when the logs hold no event; an empty log says so (a CI gate given a truncated file)."""
    if ex.input_empty:
        n = len(ex.scan.sources) if ex.scan is not None else 1
        return "No OOM-like event found: " + ("the log is empty" if n == 1 else f"all {n} logs are empty") + \
            " (0 lines read)."
    return "No OOM-like event found." + (" The text reads as documentation: its OOM wording is not taken as a "
                                         "failure." if ex.documentation else "")


def to_text(ex: Explanation, *, color: bool = False, width: int = 100) -> str:
    from rich.console import Console
    from rich.markup import escape

    buf = io.StringIO()
    con = Console(file=buf, width=width, color_system="standard" if color else None, highlight=False,
                  force_terminal=color, soft_wrap=not color, emoji=False)  # `__main__:train:88` is no emoji
    if not ex.events:
        con.print(none_found(ex))
        if ex.hypotheses:  # a leaning from the words alone (explain/rank.py _words_only), never a failure
            con.print("If the job did fail for memory, its words lean to (a word model, no failure line to read):")
            for h in ex.hypotheses[:3]:
                d = h.to_json().get("decided_by")
                con.print(f"   {escape(h.category)}  confidence {h.confidence:.2f}"
                          + (f"  [dim]decided by {escape(d['fact'])}: {escape(d['command'])}[/dim]" if d else ""))
            con.print("Paste the error message and its traceback for an answer.")
        _notes(con, ex)
        return buf.getvalue()
    if not ex.failures:
        con.print(f"[bold green]No failure:[/bold green] {len(ex.recovered)} out-of-memory event(s) that the job "
                  "caught and went on from (a batch-size search, a skipped batch, a fallback):")
        for e in ex.recovered[:_MAX_EVENTS_SHOWN]:
            src = f"{e.source}:" if e.source else "line "
            con.print(f"  {escape(src)}{e.line}  {e.kind}  [dim]{escape(cut_words(e.text, 120))}[/dim]")
        return buf.getvalue()
    top = ex.hypotheses[0]
    p = ex.primary
    where = f"{p.source + ':' if p and p.source else 'line '}{p.line}" if p else ""
    con.print(f"[bold]Answer:[/bold] [bold red]{top.category}[/bold red] "
              f"(confidence {top.confidence:.2f}) for the event at {escape(where)}")
    if p is not None:
        con.print(f"  [dim]{escape(cut_words(p.text, 300))}[/dim]")
        rows = number_rows(p.numbers, p.kind)
        if rows:
            con.print("  " + "; ".join(f"{k}: [bold]{v}[/bold]" for k, v in rows))
    hyps = ranked(ex)
    shown = _shown(hyps)
    for i, h in enumerate(hyps[:shown]):
        con.print()
        con.print(f"[bold]{i + 1}. {escape(h.category)}[/bold]  confidence {h.confidence:.2f}")
        for e in h.evidence[:4]:
            con.print(f"   - {escape(e)}")
        for f in h.fixes[:2]:
            con.print(f"   [green]fix:[/green] {escape(f)}")
    rest = hyps[shown:]
    if rest:
        con.print()
        con.print("   [dim]also ranked: " + ", ".join(f"{escape(h.category)} {h.confidence:.2f}" for h in rest)
                  + " (--format json lists their evidence)[/dim]")
    _notes(con, ex)
    decide = ex.to_decide()
    if decide:
        con.print()
        con.print("[bold]The log alone cannot settle this.[/bold] What decides:")
        for d in decide:
            con.print(f"   - {d['category']}: {escape(d['fact'])}: [bold]{escape(d['command'])}[/bold]")
        if not ex.facts_given and any(d["collected_by"] != "not collected by explain" for d in decide):
            con.print("   On the machine that ran the job, `oomdoctor explain --here LOG` reads these facts itself "
                      "(or pass --bundle from `oomdoctor bundle`).")
    con.print()
    con.print(f"[bold]Events[/bold] ({len(ex.events)}):")
    for i, e in enumerate(ex.events[:_MAX_EVENTS_SHOWN]):
        src = f"{e.source}:" if e.source else "line "
        times = f" x{e.count}" if e.count > 1 else ""
        cat = "recovered" if e in ex.recovered else ex.event_categories.get(i, "")
        con.print(f"  {escape(src)}{e.line}{times}  {e.kind} -> {cat}  [dim]{escape(cut_words(e.text, 120))}[/dim]")
    if len(ex.events) > _MAX_EVENTS_SHOWN:
        con.print(f"  ... {len(ex.events) - _MAX_EVENTS_SHOWN} more (see --format json)")
    if ex.facts_used:
        con.print(f"Machine facts used (--here / --bundle): {', '.join(ex.facts_used)}")
    return buf.getvalue()


def to_html(ex: Explanation) -> str:
    from oomdoctor.render.html import render_page

    events = []
    for i, e in enumerate(ex.events):
        events.append({"where": f"{e.source + ':' if e.source else ''}{e.line}", "kind": e.kind, "count": e.count,
                       "category": ex.event_categories.get(i, ""), "text": e.text[:2000],
                       "numbers": number_rows(e.numbers, e.kind), "primary": e is ex.primary})
    return render_page("explain.html.j2", "oomdoctor explain", hypotheses=[h.to_json() for h in ranked(ex)],
                       events=events, facts_used=ex.facts_used, notes=ex.notes, failed=bool(ex.failures),
                       failures=len(ex.failures), recovered=len(ex.recovered), none_found=none_found(ex),
                       to_decide=ex.to_decide() if ex.failures else [])
