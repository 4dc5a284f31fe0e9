"""A careful reader's answers on the same texts: how much do the texts themselves tell?

bench/explain_blind_reading.jsonl holds, for 220 dev reports drawn at random (seed 17) from the 445 dev
reports of 2026-11-26 (batch "random-dev") and for the 60 dev reports of the fourth session's fresh
batches (m1-m6, batch "fresh-m", read before any rule was written from them), the top two causes an expert reader gave from the text alone (a language-model
helper told to read each text as an experienced ML/GPU engineer, with no search, no link, no label, no
file name that hints at the case, and nothing else from the repository), and (batch "random-dev-s10",
session 10, 2026-11-27) 150 reports drawn at random (seed 20261127) from the 950 dev reports of that day,
read the same way by two such helpers, 75 each, who also gave a probability for their first answer. Dev only: no test text was
shown to anyone. The reader may have met some of these public threads before (training data), so this
is an upper reference for what the text says, not a peer tool. This script compares it with explain
on the same reports (explain's dev figure is in-sample: its rules were written from dev; on the fresh
batch, explain's on-arrival figure is in docs/benchmarks.md).

Usage: PYTHONPATH=src python bench/explain_blind.py [--markdown]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import explain_corpus as C  # noqa: E402

from oomdoctor.explain.rank import explain_text  # noqa: E402

READING = Path(__file__).with_name("explain_blind_reading.jsonl")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--markdown", action="store_true")
    a = ap.parse_args()
    labels = {c["id"]: c for c in C.load_reports("dev")}
    rows = [json.loads(x) for x in READING.read_text().splitlines() if x.strip()]
    rows = [r for r in rows if r["id"] in labels]  # a case moved out of dev drops out
    for batch in sorted({r["batch"] for r in rows}):
        print(f"\n{batch}:" + ("\n" if a.markdown else ""))
        _table([r for r in rows if r["batch"] == batch], labels, a.markdown)


def _table(rows: list[dict], labels: dict, markdown: bool) -> None:
    per: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0, 0, 0])
    for r in rows:
        cat = labels[r["id"]]["category"]
        ranked = [h.category for h in explain_text(labels[r["id"]]["text"].splitlines()).hypotheses]
        p = per[cat]
        p[0] += 1
        p[1] += r["top1"] == cat
        p[2] += cat in (r["top1"], r["top2"])
        p[3] += bool(ranked) and ranked[0] == cat
        p[4] += cat in ranked[:2]
    tot = [sum(v[i] for v in per.values()) for i in range(5)]
    n = tot[0]
    if markdown:
        print("| category | reports | reader top-1 | reader top-2 | explain top-1 | explain top-2 |")
        print("|---|---:|---:|---:|---:|---:|")
        for cat, v in sorted(per.items()):
            print(f"| {cat} | {v[0]} | {v[1]} | {v[2]} | {v[3]} | {v[4]} |")
        print(f"| **all** | {n} | {tot[1]} ({tot[1] / n:.1%}) | {tot[2]} ({tot[2] / n:.1%}) | {tot[3]} ({tot[3] / n:.1%}) "
              f"| {tot[4]} ({tot[4] / n:.1%}) |")
    else:
        print(f"{'category':20s} {'n':>4s} {'reader1':>8s} {'reader2':>8s} {'explain1':>9s} {'explain2':>9s}")
        for cat, v in sorted(per.items()):
            print(f"{cat:20s} {v[0]:4d} {v[1]:8d} {v[2]:8d} {v[3]:9d} {v[4]:9d}")
        print(f"{'all':20s} {n:4d} {tot[1]:8d} {tot[2]:8d} {tot[3]:9d} {tot[4]:9d}")


if __name__ == "__main__":
    main()
