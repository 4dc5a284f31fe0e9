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
from oomdoctor.explain.facts import as_record, is_marker
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
    table in explain/kinds.py), so doctor and explain never disagree on what a line is. Sources:
    environment-facts.md 3c, 4, 6, 7 [OOMTXT][HAMIOOM][PTDL]; memory-tools-and-papers.md 4.5.
    """
    cards = gpus(facts)
    nvml_total = as_int(cards[0].get("memory_total_bytes")) if cards else None
    used = [g for g in cards if as_int(g.get("memory_used_bytes")) is not None]
    # None: no reading of the GPU's memory (no driver answered, or a bundle without one): neither full nor not
    gpu_full = any((as_int(g.get("memory_used_bytes")) or 0) >= 0.9 * (as_int(g.get("memory_total_bytes")) or 1 << 62)
                   for g in used) if used else None
    groups: dict[tuple[str, Category | None], list[tuple[dict, str, Severity, Confidence]]] = {}
    for raw in as_list(facts.value("workload.oom_events")):
        e = as_record(raw)
        if e is None or is_marker(e):
            continue
        text = str(e.get("text", ""))
        if e["kind"] == "shm_error" or shm.is_shm_error(text) or shm.FD_PATTERN.search(text):
            continue  # STO003's
        cat, sev, conf, why = classify(e, nvml_total, gpu_full)
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
