"""Does `explain` need more labelled reports? Dev out-of-fold top-1 with less training data (the test split is
never read here).

The 5 folds of bench/explain_cv.py; in each, the text prior is fitted on a random fraction of the four training
folds' reports and of the silver items (the rules are the same throughout), then the fifth fold is scored with the
stored weight and vocabulary. Two draws per fraction below 1. A curve still rising at 100% says more data of the
same kind would help; a flat one says it would not.

Usage: PYTHONPATH=src python bench/explain_learning_curve.py   (about 5 minutes on 2 CPUs)
"""

from __future__ import annotations

import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import explain_corpus as C  # noqa: E402
import explain_cv as CV  # noqa: E402
import explain_textmodel as TM  # noqa: E402

FRACTIONS = (0.1, 0.25, 0.5, 0.75, 1.0)


def main() -> int:
    from oomdoctor.explain import rank
    from oomdoctor.explain.textmodel import TextModel

    cases = C.load_reports("dev")
    CV.texts[:] = [TM.model_text(c["text"]) for c in cases]
    sc = CV.Scorer(cases)
    silver = list(TM.silver_docs())
    folds = CV.folds(cases, CV.FOLDS)
    print(f"dev reports {len(cases)}, silver items {len(silver)}")
    print(f"{'fraction':>8}  {'top-1 (draws)':>16}  {'top-2 (draws)':>16}")
    for frac in FRACTIONS:
        top1, top2 = [], []
        for draw in range(2 if frac < 1 else 1):
            rng = random.Random(100 + draw)
            rows = []
            for test in folds:
                held = set(test)
                train = [i for i in range(len(cases)) if i not in held]
                gold = [(CV.texts[i], cases[i]["category"]) for i in rng.sample(train, int(len(train) * frac))]
                model = TextModel(TM.fit_prior(gold + rng.sample(silver, int(len(silver) * frac)), TM.VOCAB))
                rows += sc.ranked(test, model, rank.PRIOR_WEIGHT)
            _, a, b, _ = CV.tally(rows)
            top1.append(a)
            top2.append(b)
        print(f"{frac:>8.2f}  {'/'.join(map(str, top1)):>16}  {'/'.join(map(str, top2)):>16}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
