"""Top-1 / top-2 accuracy of `explain` on the labelled corpus of real reports (tests/corpus/*.yaml).

Each case is the error text as posted in a public issue thread, with the category the thread
confirmed. Prints a per-category table; `--markdown` prints it for docs/benchmarks.md.
Usage: PYTHONPATH=src python bench/explain_accuracy.py [--markdown] [--verbose]
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from pathlib import Path

from ruamel.yaml import YAML

from oomdoctor.explain.rank import explain_text

CORPUS = Path(__file__).resolve().parent.parent / "tests" / "corpus"


def load_cases(corpus: Path = CORPUS) -> list[dict]:
    y = YAML(typ="safe")
    return [y.load(p.read_text(encoding="utf-8")) | {"file": p.name} for p in sorted(corpus.glob("*.yaml"))]


def evaluate(cases: list[dict]) -> tuple[list[dict], dict[str, list[int]]]:
    rows, per = [], defaultdict(lambda: [0, 0, 0])
    for c in cases:
        ex = explain_text(c["text"].splitlines())
        ranked = [h.category for h in ex.hypotheses]
        top1 = bool(ranked) and ranked[0] == c["category"]
        top2 = c["category"] in ranked[:2]
        per[c["category"]][0] += 1
        per[c["category"]][1] += top1
        per[c["category"]][2] += top2
        rows.append({"id": c["id"], "expected": c["category"], "got": ranked[:3], "top1": top1, "top2": top2})
    return rows, per


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--verbose", action="store_true", help="list every miss")
    args = ap.parse_args(argv)
    rows, per = evaluate(load_cases())
    n = len(rows)
    t1 = sum(r["top1"] for r in rows)
    t2 = sum(r["top2"] for r in rows)
    if args.markdown:
        print("| category | cases | top-1 | top-2 |\n|---|---:|---:|---:|")
        for cat in sorted(per):
            c, a, b = per[cat]
            print(f"| {cat} | {c} | {a}/{c} | {b}/{c} |")
        print(f"| **all** | **{n}** | **{t1}/{n} = {t1 / n:.1%}** | **{t2}/{n} = {t2 / n:.1%}** |")
    else:
        print(f"{'category':<20}{'cases':>6}{'top-1':>8}{'top-2':>8}")
        for cat in sorted(per):
            c, a, b = per[cat]
            print(f"{cat:<20}{c:>6}{a:>8}{b:>8}")
        print(f"{'all':<20}{n:>6}{t1 / n:>8.1%}{t2 / n:>8.1%}")
    if args.verbose:
        for r in rows:
            if not r["top1"]:
                print(f"MISS{'' if r['top2'] else ' (not in top-2)'}: {r['id']}: expected {r['expected']}, got {r['got']}",
                      file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
