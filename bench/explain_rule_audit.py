"""Which hand-written rules claim more than the data bears out: each rule's precision, on dev and on silver.

A rule is a `Board.add(category, weight, ...)` call site in explain/rules.py or rules_by_kind.py. For every text
this records which sites fired (positive weight) and prints, per (site, category): how often it fired, how often
the label was that category, and how often that category was explain's answer while the label was another.
Dev is read with the stored prior (the rules are in sample there: written from it); the silver items
(tests/corpus/silver.jsonl, which train the prior but which rules were, up to session 19, not written from) with
the rules alone, since the stored prior has learnt them. A site whose category is the label in under 40% of the
texts it fires in, on both, over-claims: session 20 lowered one such default (a bare "out of memory" read as
true_capacity 0.8 -> 0.4) after a rule written down first (docs/explain-design.md, "Rule precision").

Site names are file:line at the commit run: compare two runs only at the same commit. The test split is never
read. Usage: PYTHONPATH=src python bench/explain_rule_audit.py [--min-fires 10] [--below 0.4] [--all]
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import explain_corpus as C  # noqa: E402

from oomdoctor.explain import rank, rules  # noqa: E402

_ORIGINAL_ADD = rules.Board.add


def audit(items: list[dict], prior) -> dict[tuple[str, str], list[int]]:
    """(site, category) -> [fired, label was the category, explain answered it wrongly]."""
    fired: list[tuple[str, str]] = []

    def add(self, cat, weight, evidence, fix=None):
        if weight > 0:
            f = sys._getframe(1)
            fired.append((f"{Path(f.f_code.co_filename).name}:{f.f_lineno}", cat))
        return _ORIGINAL_ADD(self, cat, weight, evidence, fix)

    out: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0, 0])
    rules.Board.add = add
    try:
        for x in items:
            fired.clear()
            ex = rank.explain_text(x["text"].splitlines(), prior=prior)
            top = ex.hypotheses[0].category if ex.hypotheses else None
            for site, cat in set(fired):
                if site.startswith("rank.py:") or cat == "unknown":  # rank's merging of boards; no label is unknown
                    continue
                s = out[(site, cat)]
                s[0] += 1
                s[1] += x["category"] == cat
                s[2] += top == cat and x["category"] != cat
        return out
    finally:
        rules.Board.add = _ORIGINAL_ADD


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--min-fires", type=int, default=10, help="on each of dev and silver")
    ap.add_argument("--below", type=float, default=0.4, help="precision under which a site over-claims")
    ap.add_argument("--all", action="store_true", help="every site, not only the over-claiming ones")
    a = ap.parse_args(argv)
    dev = audit(C.load_reports("dev"), rank._DEFAULT)
    silver = audit(C.load_silver(), None)
    print(f"{'site':<24} {'category':<18} | {'dev fired':>9} {'label':>5} {'wrong':>5} | {'silver fired':>12} "
          f"{'label':>5} {'wrong':>5}")
    for key in sorted(set(dev) | set(silver), key=lambda k: -(dev.get(k, [0] * 3)[2] + silver.get(k, [0] * 3)[2])):
        d, s = dev.get(key, [0, 0, 0]), silver.get(key, [0, 0, 0])
        over = (d[0] >= a.min_fires and s[0] >= a.min_fires and d[1] < a.below * d[0] and s[1] < a.below * s[0])
        if a.all or over:
            print(f"{key[0]:<24} {key[1]:<18} | {d[0]:>9} {d[1]:>5} {d[2]:>5} | {s[0]:>12} {s[1]:>5} {s[2]:>5}"
                  + ("  over-claims" if over else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
