"""How rank.DOCS_MIN is chosen: the documentation model's threshold, out of fold on dev (test never read).

The documentation model (explain/textmodel.py, fitted by bench/explain_textmodel.py) tells a README's or
a docs page's vague OOM wording ("OOM error with large-v2 on 8GB cards") from a report's. Here it is
refitted 5 times, each without the fifth of the dev texts it then scores (reports against the dev benign
texts of kind docs_text, grep_output or other), and for each threshold the table prints how many dev
reports whose failures are all vague (rank.DOCS_WEAK_KINDS) would be silenced as documentation (and how
many of those explain answers right, the cost) and how many documentation texts reach it (the gain).

With --arrival FILE (the ids bench/explain_arrival.py --benign --write FILE lists: dev benign texts that
were false alarms with the code their round arrived to), a second table for rank.DOCS_MIN_ANY, the gate
on events of any kind: dev reports whose p(docs) reaches the threshold and no event of which has the
allocator's figures, a traceback or the machine (the cost: they would be silenced; with the gate off
today's answer is counted), and how many of those false alarms reach it (the gain). A text that is not
documentation (a healthy log) is scored by the first fold's model, which never saw it.

Usage: PYTHONPATH=src python bench/explain_docs_cv.py [--arrival FILE]
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import explain_corpus as C  # noqa: E402
import explain_textmodel as TM  # noqa: E402

from oomdoctor.explain import rank  # noqa: E402
from oomdoctor.explain.rank import DOCS_WEAK_KINDS, explain_text  # noqa: E402
from oomdoctor.explain.textmodel import DOCS_TEMPER, TextModel, fit  # noqa: E402

THRESHOLDS = (0.9, 0.95, 0.97, 0.98, 0.99)
SEED = 5


ANY_THRESHOLDS = (0.95, 0.98, 0.99, 0.995)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--arrival", help="JSON list of dev benign ids that were false alarms on arrival")
    a = ap.parse_args(argv)
    reps = C.load_reports("dev")
    docs = TM.docs_texts()
    items = ([(TM.model_text(c["text"], tags=False), "report", c) for c in reps]
             + [(TM.model_text(b["text"], tags=False), "docs", b) for b in docs])
    idx = list(range(len(items)))
    random.Random(SEED).shuffle(idx)
    folds = [idx[i::5] for i in range(5)]
    p_docs: dict[int, float] = {}
    first = None
    for held in folds:
        train = [i for f in folds if f is not held for i in f]
        model = TextModel(fit([items[i][:2] for i in train], ["report", "docs"], TM.DOCS_VOCAB, temper=DOCS_TEMPER))
        first = first or model
        for i in held:
            p_docs[i] = model.posterior(items[i][0])["docs"]
    stored, rank.DOCS_MIN = rank.DOCS_MIN, 1.0  # the answers without the gate: what the gate would silence
    stored_any, rank.DOCS_MIN_ANY = rank.DOCS_MIN_ANY, 1.0
    answers = {i: explain_text(items[i][2]["text"].splitlines()) for i in range(len(items)) if items[i][1] == "report"}
    rank.DOCS_MIN, rank.DOCS_MIN_ANY = stored, stored_any
    print(f"dev: {len(reps)} reports, {len(docs)} documentation texts; 5 folds, seed {SEED}; stored DOCS_MIN {stored}")
    print("threshold  reports silenced (answered right)  documentation recognised")
    for t in THRESHOLDS:
        silenced = [i for i, ex in answers.items() if p_docs[i] >= t and ex.primary is not None
                    and all(e.kind in DOCS_WEAK_KINDS for e in ex.failures)]
        right = [i for i in silenced if answers[i].hypotheses and answers[i].hypotheses[0].category == items[i][2]["category"]]
        recognised = sum(1 for i in range(len(items)) if items[i][1] == "docs" and p_docs[i] >= t)
        print(f"{t:9}  {len(silenced):16} ({len(right)})                  {recognised} of {len(docs)}")
    if a.arrival:
        _any_kind(items, p_docs, answers, first, json.loads(Path(a.arrival).read_text(encoding="utf-8")), stored_any)
    return 0


def _any_kind(items: list, p_docs: dict[int, float], answers: dict, first: TextModel, arrival: list[str],
              stored: float) -> None:
    from oomdoctor.explain.rank import job_output

    def own_output(ex) -> bool:
        return job_output(ex.events, ex.scan.env)

    at = {items[i][2]["id"]: i for i in range(len(items))}
    benign = {b["id"]: b for b in C.load_benign("dev")}
    p_fa, own_fa = {}, {}
    for fid in arrival:
        text = benign[fid]["text"]
        p_fa[fid] = p_docs[at[fid]] if fid in at else first.posterior(TM.model_text(text, tags=False))["docs"]
        own_fa[fid] = own_output(explain_text(text.splitlines()))
    print(f"\nany kind (rank.DOCS_MIN_ANY, stored {stored}); {len(arrival)} dev texts that were false alarms on arrival")
    print("threshold  reports silenced (answered right)  false alarms on arrival recognised")
    for t in ANY_THRESHOLDS:
        silenced = [i for i, ex in answers.items() if ex.failures and p_docs[i] >= t and not own_output(ex)]
        right = [i for i in silenced if answers[i].hypotheses and answers[i].hypotheses[0].category == items[i][2]["category"]]
        caught = sum(p_fa[f] >= t and not own_fa[f] for f in arrival)
        print(f"{t:9}  {len(silenced):16} ({len(right)})                  {caught} of {len(arrival)}")


if __name__ == "__main__":
    raise SystemExit(main())
