"""How far the corpus labels themselves can be trusted: an independent re-labelling from the threads.

Session 17 (2026-11-27): 200 reports drawn at random (seed 20261127; 120 dev, 80 test) were handed to five
helpers with the link, the date and the posted text only (no label, no `why`, no file name), told to find
each thread's resolution with the search tools and name the one category it confirmed, a second choice, and
what they based it on: `resolution` (a confirmed cause they saw), `thread` (the thread, no clear
resolution) or `text` (thread not found). Their answers are bench/explain_label_audit.jsonl, with the label
the corpus had then (`label_then`). Agreement with the corpus bounds what top-1 can honestly reach: where
two careful readers of the same thread differ, the category boundary (a leak in a dataset cache: host RAM
or leak? JAX's pool starving another library: another holder or a framework's pool?) is the cause, not
explain. Test labels are never changed from it (dev disagreements were looked at one by one: docs/benchmarks.md,
"Label audit").

Prints agreement (audit == corpus label) and "in the audit's two" per split and basis; no test item is
printed. Usage: python bench/explain_label_audit.py
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import explain_corpus as C  # noqa: E402

AUDIT = Path(__file__).resolve().parent / "explain_label_audit.jsonl"


def load() -> list[dict]:
    return [json.loads(line) for line in AUDIT.read_text(encoding="utf-8").splitlines() if line.strip()]


def table(rows: list[dict], label_key: str, now: dict[str, str]) -> dict[str, tuple[int, int, int]]:
    t: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
    for r in rows:
        label = r["label_then"] if label_key == "then" else now.get(r["id"], "(report gone)")
        for k in (r["split"], f"{r['split']} / {r['basis']}", "all"):
            t[k][0] += 1
            t[k][1] += r["audit"] == label
            t[k][2] += label in (r["audit"], r["second"])
    return {k: (n, a, b) for k, (n, a, b) in sorted(t.items())}


def main() -> int:
    rows = load()
    now = {c["id"]: c["category"] for c in C.load_reports()}
    for key, title in (("then", "labels as audited"), ("now", "labels now")):
        print(f"\n{title}\n| set | reports | audit agrees | label in the audit's two |\n|---|---:|---:|---:|")
        for k, (n, a, b) in table(rows, key, now).items():
            lo, hi = C.wilson(a, n)
            print(f"| {k} | {n} | {a} ({a / n:.0%}, CI {lo:.0%}-{hi:.0%}) | {b} ({b / n:.0%}) |")
    changed = [r["id"] for r in rows if r["split"] == "dev" and r["label_then"] != now.get(r["id"])]
    print(f"\ndev labels changed after the audit: {', '.join(changed) or 'none'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
