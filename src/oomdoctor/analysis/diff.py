"""Compare two doctor reports (a good and a bad machine) and rank what differs by OOM relevance.

The seed case was solved by noticing that the machine without OOMs ran kernel 4.18 and the one with
them 3.10. So every registered fact is compared, lists element-wise (`driver.gpus[0].retired_pending`),
and each difference is scored by its key's registry `weight` (kernel, driver, CUDA, torch, sharing,
limits high; hostnames, timestamps low); findings present on only one side score by severity.
Differences the knowledge table can explain get a one-line explanation (analysis.diff_notes).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Optional

from oomdoctor.analysis.diff_notes import brief, explain, explain_one_side, threshold_bonus
from oomdoctor.facts import LAYERS, FactSet
from oomdoctor.facts.keys import FACT_KEYS
from oomdoctor.facts.report import DoctorReport

_SEVERITY_SCORE = {"critical": 95, "error": 85, "warning": 55, "info": 15}
# Sub-fields of per-GPU records: health and identity matter, usage less, ids hardly.
_GPU_FIELD_WEIGHT = {
    "retired_pending": 75, "remapped_pending": 75, "remapped_failure": 75, "reset_required": 75,
    "ecc_uncorrected": 70, "retired_pages": 65, "name": 60, "memory_total_bytes": 60, "compute_mode": 50,
    "memory_reserved_bytes": 40, "memory_used_bytes": 35, "persistence_mode": 30, "memory_free_bytes": 20,
    "uuid": 2, "pci_bus_id": 2, "index": 2,
}
_NOISE_RELATIVE = 0.01  # byte counts within 1% (MemTotal of identical nodes) are the same


@dataclass(frozen=True)
class Difference:
    key: str  # fact key, or `key[i].field` for list elements
    layer: str
    a: Any
    b: Any
    score: float
    note: str = ""  # why it matters, when known
    kind: str = "fact"  # fact | finding

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "key": self.key, "layer": self.layer, "a": self.a, "b": self.b,
                "score": round(self.score, 1), "explanation": self.note or None}


@dataclass
class DiffResult:
    a_name: str
    b_name: str
    differences: list[Difference] = field(default_factory=list)
    same: int = 0  # facts equal on both sides

    def to_json(self) -> dict[str, Any]:
        return {"a": self.a_name, "b": self.b_name, "identical_facts": self.same,
                "differences": [d.to_json() for d in self.differences]}


# where each input was read from (the names A and B already say it), never a difference between the machines
NOT_COMPARED = frozenset({"bundle.path"})


def _missing(fs: FactSet, key: str) -> tuple[bool, Any]:
    """(present, value or the Unavailable reason)."""
    entry = fs.get(key)
    if entry is None:
        return False, None
    if not entry.available:
        return False, f"unavailable: {entry.reason}"  # type: ignore[union-attr]
    return True, entry.value


def _equal(key: str, a: Any, b: Any) -> bool:
    if a == b:
        return True
    if key.endswith("_bytes") and isinstance(a, (int, float)) and isinstance(b, (int, float)) and a and b:
        return abs(a - b) / max(abs(a), abs(b)) < _NOISE_RELATIVE
    return False


def _compare_lists(key: str, layer: str, weight: int, a: list, b: list) -> list[Difference]:
    out: list[Difference] = []
    if all(isinstance(x, Mapping) for x in (*a, *b)) and key == "driver.gpus":
        for i in range(max(len(a), len(b))):
            ga = a[i] if i < len(a) else None
            gb = b[i] if i < len(b) else None
            if ga is None or gb is None:
                out.append(Difference(f"{key}[{i}]", layer, ga, gb, weight, "GPU present on one side only"))
                continue
            for f in sorted(set(ga) | set(gb)):
                if not _equal(f, ga.get(f), gb.get(f)):
                    w = _GPU_FIELD_WEIGHT.get(f, weight * 0.5)
                    sub = f"{key}[{i}].{f}"
                    out.append(Difference(sub, layer, ga.get(f), gb.get(f), w, explain(sub, ga.get(f), gb.get(f))))
        return out
    if all(not isinstance(x, (Mapping, list)) for x in (*a, *b)):
        only_a = [x for x in a if x not in b]
        only_b = [x for x in b if x not in a]
        if only_a or only_b:
            out.append(Difference(key, layer, only_a or [], only_b or [], weight,
                                  explain(key, a, b) or f"only in A: {only_a or '-'}; only in B: {only_b or '-'}"))
        return out
    # lists of records (Xid events, OOM kills): the count is what differs meaningfully
    counted = f"{len(a)} vs {len(b)} entries" if len(a) != len(b) else \
        f"{len(a)} entr{'ies' if len(a) != 1 else 'y'} on each side, with different contents"
    out.append(Difference(key, layer, a, b, weight, explain(key, a, b) or counted))
    return out


def diff_facts(a: FactSet, b: FactSet) -> tuple[list[Difference], int]:
    diffs: list[Difference] = []
    same = 0
    for key in sorted((set(a) | set(b)) - NOT_COMPARED):
        spec = FACT_KEYS[key]
        pa, va = _missing(a, key)
        pb, vb = _missing(b, key)
        if pa and pb:
            if _equal(key, va, vb):
                same += 1
                continue
            if isinstance(va, list) and isinstance(vb, list):
                diffs.extend(_compare_lists(key, spec.layer, spec.weight, va, vb))
                continue
            if isinstance(va, Mapping) and isinstance(vb, Mapping):
                for sub in sorted(set(va) | set(vb)):
                    if not _equal(str(sub), va.get(sub), vb.get(sub)):
                        k = f"{key}.{sub}"
                        diffs.append(Difference(k, spec.layer, va.get(sub), vb.get(sub), spec.weight,
                                                explain(k, va.get(sub), vb.get(sub)) or explain(key, va, vb)))
                continue
            diffs.append(Difference(key, spec.layer, va, vb, spec.weight + threshold_bonus(key, va, vb),
                                    explain(key, va, vb)))
        elif pa or pb:
            # known on one side only: still worth showing, at a lower score (the other side could not tell); an
            # empty reading there (no OOM kills, no terminations) says nothing against the other side, which was
            # not read: no note that would claim one
            known = va if pa else vb
            if known in ([], {}, None, ""):
                diffs.append(Difference(key, spec.layer, va, vb, spec.weight * 0.2,
                                        f"read on {'A' if pa else 'B'} only (empty there); not collected on the other side"))
                continue
            diffs.append(Difference(key, spec.layer, va, vb, spec.weight * 0.6,
                                    explain_one_side(key, known, "A" if pa else "B")))
        elif va != vb:
            continue  # unavailable on both sides, for different reasons: not a difference of the machines
        else:
            same += 1
    return diffs, same


def diff_reports(a: DoctorReport, b: DoctorReport, a_name: str = "A", b_name: str = "B") -> DiffResult:
    diffs, same = diff_facts(a.facts, b.facts)
    fa = {f.id: f for f in a.findings}
    fb = {f.id: f for f in b.findings}
    for fid in sorted(set(fa) ^ set(fb)):
        f = fa.get(fid) or fb.get(fid)
        assert f is not None
        side = "A" if fid in fa else "B"
        diffs.append(Difference(
            fid, f.layer.value, f.title if side == "A" else None, f.title if side == "B" else None,
            _SEVERITY_SCORE.get(f.severity.value, 15) + (5 if f.confidence.value == "high" else 0),
            f"{f.severity.value} finding only on {side}: {f.remedy}" if f.remedy else f"only on {side}", "finding"))
    order = {name: i for i, name in enumerate(LAYERS)}
    diffs.sort(key=lambda d: (-d.score, order.get(d.layer, 99), d.key))
    return DiffResult(a_name, b_name, diffs, same)


def top_explanation(result: DiffResult) -> Optional[str]:
    """The headline: the highest-ranked difference with an explanation, as one line."""
    for d in result.differences:
        if d.note and d.kind == "finding":  # the table's order: a finding on one side may rank first
            return f"{d.key} ({d.a if d.a is not None else d.b}): {d.note}"
        if d.note and d.kind == "fact" and not d.note.startswith(("read on ", "known on ")):
            return f"{d.key}: {brief(d.a)} (A) vs {brief(d.b)} (B): {d.note}"  # a summary, never a repr of records
    return None
