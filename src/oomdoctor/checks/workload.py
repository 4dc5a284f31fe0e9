"""Workload layer: what the OOM-like events in the job's own logs say about the cause.

The events are explain's (parsers.oom_events via parsers.oom_facts): kinds, numbers and the kind
table's category hint; here they are weighed against the GPU the bundle saw."""

from __future__ import annotations

import shlex
from collections.abc import Iterator

from oomdoctor.checks._util import (
    Category,
    Confidence,
    FactSet,
    Finding,
    Layer,
    Severity,
    as_int,
    as_list,
    ev_value,
    finding,
    gpus,
    mib,
    short,
)
from oomdoctor.checks.registry import check
from oomdoctor.explain.events import LogScan
from oomdoctor.explain.facts import as_record, is_marker, record_event
from oomdoctor.explain.kinds import KINDS
from oomdoctor.knowledge import shm

L = Layer.WORKLOAD


def _torch(n: dict, details: dict, nvml_total: int | None) -> tuple[Category, Severity, Confidence, str]:
    """A caching-allocator OOM, read from the numbers the scanner extracted (oom_patterns.extract)."""
    total = n.get("total_bytes")
    if total and nvml_total and total < 0.9 * nvml_total:
        return (Category.GPU_SHARING_LIMIT, Severity.WARNING, Confidence.MEDIUM,
                f"the OOM's total capacity {mib(total)} is smaller than the card's {mib(nvml_total)}: a slice")
    other = max((as_int(p.get("bytes")) or 0 for p in as_list(details.get("other_processes")) if isinstance(p, dict)),
                default=0)
    if other and total and other >= 0.25 * total:
        return (Category.OTHER_PROCESS, Severity.WARNING, Confidence.MEDIUM,
                f"another process held {mib(other)} when PyTorch ran out")
    unalloc = n.get("reserved_unallocated_bytes")
    alloc, reserved = n.get("allocated_bytes"), n.get("reserved_bytes")
    if unalloc is None and reserved is not None and alloc is not None:
        unalloc = max(0, reserved - alloc)
    if unalloc is not None and total and unalloc >= 0.2 * total:
        return (Category.FRAGMENTATION, Severity.WARNING, Confidence.MEDIUM,
                f"{mib(unalloc)} was reserved but unallocated (fragmentation)")
    return (Category.TRUE_CAPACITY, Severity.WARNING, Confidence.LOW,
            "PyTorch's caching allocator ran out; see `oomdoctor explain` for the step that needed it")


def classify(e: dict, nvml_total: int | None, gpu_full: bool | None,
             ) -> tuple[Category | None, Severity, Confidence, str]:
    """(category, severity, confidence, why) for one event record (parsers.oom_facts.as_record)."""
    kind, spec = e["kind"], KINDS[e["kind"]]
    hint = Category(e["category"]) if e.get("category") else None
    if e["details"].get("absurd_size"):
        # a request of 64 TiB or over 100x its card (explain.patterns): a suspect size, as explain reads it
        return (Category.NOT_OOM, Severity.WARNING, Confidence.MEDIUM,
                "one allocation larger than any device, or over a hundred times the card: a size gone wrong "
                "(a shape, dtype or overflow), not a job too big")
    if kind in ("torch_oom", "mps_oom"):
        return _torch(e["numbers"], e["details"], nvml_total)
    if kind == "hami_oom":
        return (hint, Severity.ERROR, Confidence.HIGH, "HAMi's limit was reached")
    if kind == "cuda_driver_oom":
        if gpu_full:
            return (Category.OTHER_PROCESS, Severity.WARNING, Confidence.MEDIUM,
                    "a CUDA call (not PyTorch's allocator) failed and the GPU is nearly full")
        site = e["details"].get("call_site")
        where = f"while {site}" if isinstance(site, str) else "(context creation, model.to)"
        if gpu_full is None:  # a walkthrough: "the GPU was not full" was said with no reading of the GPU at all
            return (hint, Severity.WARNING, Confidence.LOW,
                    f"raised by a CUDA runtime call {where}, not by PyTorch's allocator; no reading of the GPU's "
                    "memory was taken here, so whether another process held it is not known")
        return (hint, Severity.WARNING, Confidence.MEDIUM,
                f"raised by a CUDA runtime call {where}, not by PyTorch's allocator; the GPU was not full when "
                "these facts were read (at the failure another process may have held it, and left since)")
    if kind == "driver_error":
        return (hint, Severity.WARNING, Confidence.HIGH, "the driver or CUDA runtime failed to initialise")
    if hint is Category.NOT_OOM:
        return (hint, Severity.WARNING, Confidence.MEDIUM, f"a program error, not memory capacity ({spec.what})")
    if not spec.definite:
        return (None, Severity.INFO, Confidence.LOW, "an OOM-like line that does not say which memory ran out")
    return (hint, Severity.WARNING, Confidence.MEDIUM, f"raised by {spec.what}")


# What `explain` reads in a record: (its category, the answer's confidence or None for an event that is not the
# answer, the answer's first evidence, whether the job went on after it)
Reading = tuple[str | None, float | None, str, bool]


def explained(records: list[dict], facts: FactSet) -> dict[int, Reading]:
    """explain's analysis of the events in these records with the same facts (`explain --bundle` on the bundle's
    logs), by id of the record. docs/explain.md says WRK001 reads the log as explain does; its own reading of the
    numbers had said other_process where explain said fragmentation 0.98 (session 27 walkthrough). Only the text
    around the events and the memory readings, which the fact does not keep, are not weighed here."""
    if not any(not is_marker(r) for r in records):
        return {}  # nothing to read (doctor without logs): the word model is not even loaded
    from oomdoctor.explain.rank import explain_scan  # the word model loads on first use

    try:
        pairs = [(r, record_event(r)) for r in records]
        events = sorted((ev for _, ev in pairs), key=lambda ev: (ev.source, ev.line))
        ex = explain_scan(LogScan(events=events, readings={}, env={}), facts)
    except Exception:  # noqa: BLE001 - a hand-written or older fact explain cannot read: the kinds' reading stands
        return {}
    cats = {id(ev): ex.event_categories.get(i) for i, ev in enumerate(ex.events)}
    went_on = {id(ev) for ev in ex.recovered}
    out: dict[int, Reading] = {}
    for r, ev in pairs:
        if ev is ex.primary and ex.hypotheses:
            top = ex.hypotheses[0]
            out[id(r)] = (top.category, top.confidence, top.evidence[0] if top.evidence else "", False)
        else:
            out[id(r)] = (cats.get(id(ev)), None, "", id(ev) in went_on)
    return out


def _as_explain_reads(reading: Reading, own: tuple[Category | None, Severity, Confidence, str],
                      ) -> tuple[Category | None, Severity, Confidence, str]:
    """The finding for an event as explain reads it: its category, and for explain's answer its confidence and
    evidence; the kind's own reading where explain has no category for it."""
    cat, p, evidence, recovered = reading
    own_cat, sev, conf, why = own
    if recovered:
        return (None, Severity.INFO, Confidence.MEDIUM, "the job went on after it (explain reads it as recovered)")
    if cat is None:
        return own
    category = Category(cat)
    if category is own_cat:  # the kind's reading says the same, with what this machine's facts add (a GPU not read)
        return own
    if p is not None:
        conf = Confidence.HIGH if p >= 0.8 else Confidence.MEDIUM if p >= 0.5 else Confidence.LOW
        why = f"explain's answer, {cat} (confidence {p:.2f}): {evidence}" if evidence else f"explain's answer: {cat}"
    else:
        conf, why = Confidence.LOW, f"explain reads it as {cat}"
    if sev is Severity.INFO and category is not Category.NOT_OOM:
        sev = Severity.WARNING  # a failure explain names a cause for is no aside
    return (category, sev, conf, why)


def explain_command(facts: FactSet, files: list[str]) -> str:
    """The remedy's command, to run as printed: `explain --bundle` on the bundle doctor read (it reads the bundle's
    logs/, the ones these events are from); where the path is not in the facts, a placeholder the user replaces."""
    bundle = facts.value("bundle.path") if facts.has("bundle.path") else None
    names = ", ".join(files[:3]) + (f" and {len(files) - 3} more" if len(files) > 3 else "")
    if isinstance(bundle, str) and bundle:
        return (f"run `oomdoctor explain --bundle {shlex.quote(bundle)}` for a ranked explanation of each event "
                f"(it reads the bundle's logs/" + (f": {names}" if names else "") + ")")
    return ("run `oomdoctor explain --bundle YOUR_BUNDLE` on the bundle " + (f"that holds {names}" if names else
            "these logs are in") + " (or `oomdoctor explain YOUR_LOG` on the log itself) for a ranked explanation of "
            "each event")


@check("WRK001", L, "OOM-like errors in the job's logs")
def log_events(facts: FactSet) -> Iterator[Finding]:
    """The error's exact text says which path ran out. "CUDA out of memory. Tried to allocate …" comes
    from PyTorch's caching allocator (its "total capacity" is the *virtualised* size under MIG / HAMi /
    vcuda); "CUDA error: out of memory" comes from a CUDA runtime call outside the allocator, typically
    context creation or `model.to('cuda')` (the seed case's traceback, reproduced on an H200 only when
    another process left ~30 MiB free); "[HAMI-core ERROR …] Device N OOM" is HAMi's limit; "killed by
    signal: Killed" is the host OOM killer. Shared-memory failures are STO003. The lines are recognised by
    the scanner `oomdoctor explain` uses (the same kinds and numbers; each kind's default category is the
    table in explain/kinds.py), so doctor and explain never disagree on what a line is; and each event's cause is
    explain's analysis of the events with the same facts (`explain --bundle` on the bundle's logs), so this finding,
    the verdict and `explain` name one cause (where the kind's own reading differs, explain's evidence is quoted;
    the text around the events and per-step memory readings are not in the fact, and not weighed). Sources:
    environment-facts.md 3c, 4, 6, 7 [OOMTXT][HAMIOOM][PTDL]; memory-tools-and-papers.md 4.5.
    """
    cards = gpus(facts)
    nvml_total = as_int(cards[0].get("memory_total_bytes")) if cards else None
    used = [g for g in cards if as_int(g.get("memory_used_bytes")) is not None]
    # None: no reading of the GPU's memory (no driver answered, or a bundle without one): neither full nor not
    gpu_full = any((as_int(g.get("memory_used_bytes")) or 0) >= 0.9 * (as_int(g.get("memory_total_bytes")) or 1 << 62)
                   for g in used) if used else None
    groups: dict[tuple[str, Category | None], list[tuple[dict, str, Severity, Confidence]]] = {}
    records = [e for raw in as_list(facts.value("workload.oom_events")) if (e := as_record(raw)) is not None]
    read = explained(records, facts)
    for e in records:
        if is_marker(e):
            continue
        text = str(e.get("text", ""))
        if e["kind"] == "shm_error" or shm.is_shm_error(text) or shm.FD_PATTERN.search(text):
            continue  # STO003's
        cat, sev, conf, why = classify(e, nvml_total, gpu_full)
        if id(e) in read:
            cat, sev, conf, why = _as_explain_reads(read[id(e)], (cat, sev, conf, why))
        groups.setdefault((e["kind"], cat), []).append((e, why, sev, conf))
    for (_kind, cat), items in groups.items():
        e, why, sev, conf = items[0]
        where = f"{e.get('file') or 'log'}:{e.get('line', '?')}"
        lines = sum(x[0]["count"] for x in items)
        files = list(dict.fromkeys(str(x[0]["file"]) for x in items if isinstance(x[0].get("file"), str)))
        yield finding("WRK001", L, sev, conf,
                      f"{lines} log line(s) like '{short(e.get('text'), 90)}' ({e['kind']}): {why}",
                      explain_command(facts, files),
                      cat if cat is not Category.UNKNOWN else None,
                      [ev_value("workload.oom_events", f"{where}: {e.get('text')}", facts.source("workload.oom_events"))])
