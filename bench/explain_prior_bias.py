"""How explain_textmodel.PRIOR_BIAS was chosen: a log-space shift of the word prior's leak_in_code and
true_capacity priors, selected out of fold on the dev split (the test split is never read here).

5-fold stratified CV on dev (explain_cv.folds): the prior is fitted on four folds (with the silver
items) and explain scores the fifth at the stored weight and vocabulary, for each grid point. Nested
selection: for each outer fold the grid point with the most right answers on the other four folds is
chosen (ties to the smaller shift), then its figure on the held-out fold counts. Printed: the grid, the
nested total against no shift, and the point chosen on all folds.

Usage: PYTHONPATH=src python bench/explain_prior_bias.py
"""

from __future__ import annotations

import copy
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import explain_corpus as C  # noqa: E402
import explain_cv as CV  # noqa: E402
import explain_textmodel as TM  # noqa: E402

LEAK = (0.0, -0.5, -1.0, -1.5, -2.0)
CAPACITY = (0.0, 0.5, 1.0)


def shifted(model, bias: dict[str, float]):
    m = copy.copy(model)
    m.log_prior = [lp + bias.get(c, 0.0) for lp, c in zip(model.log_prior, model.categories)]
    return m


def main() -> int:
    from oomdoctor.explain import rank

    CV.USE_BIAS = False
    cases = C.load_reports("dev")
    CV.texts[:] = [TM.model_text(c["text"]) for c in cases]
    sc = CV.Scorer(cases)
    folds = CV.folds(cases, CV.FOLDS)
    models = [CV.model_for(cases, [i for i in range(len(cases)) if i not in set(f)], TM.VOCAB) for f in folds]
    grid = [(a, b) for a in LEAK for b in CAPACITY]
    per: dict[tuple[float, float], list[int]] = {}
    print(f"dev: {len(cases)} reports; {CV.FOLDS}-fold CV, weight {rank.PRIOR_WEIGHT}, vocab {TM.VOCAB}")
    for g in grid:
        bias = {"leak_in_code": g[0], "true_capacity": g[1]}
        per[g] = [CV.tally(sc.ranked(f, shifted(m, bias), rank.PRIOR_WEIGHT))[1] for f, m in zip(folds, models)]
        print(f"  leak {g[0]:+.1f}  true_capacity {g[1]:+.1f}: {sum(per[g])} right first")
    total = 0
    for k in range(len(folds)):
        best = max(grid, key=lambda g: (sum(v for j, v in enumerate(per[g]) if j != k), -abs(g[0]) - abs(g[1])))
        total += per[best][k]
        print(f"  outer fold {k + 1}: chose {best}, {per[best][k]} right (no shift: {per[(0.0, 0.0)][k]})")
    print(f"nested: {total} right first, no shift: {sum(per[(0.0, 0.0)])}, of {len(cases)}")
    best = max(grid, key=lambda g: (sum(per[g]), -abs(g[0]) - abs(g[1])))
    print(f"chosen on all folds: leak {best[0]:+.1f}, true_capacity {best[1]:+.1f}; stored: {TM.PRIOR_BIAS}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
