"""Fit explain's confidence (rank.TEMPERATURE, rank.NONE_SCORE) on the dev split only.

The confidence of a category is softmax(score / T) over the categories' scores plus a "none of
these" score. This grid search picks T and the none-score that minimise the log loss of the
confirmed category on `dev`; the test split is never read here (its calibration table is printed
by bench/explain_accuracy.py). Prints the fitted values and dev's log loss for the current ones.

Superseded for the stored values (session 18): bench/explain_cv.py fits them on out-of-fold scores to the
binary log loss of the top answer, words-only leaning apart; this script is kept for its log_loss.

Since the text prior (explain/textmodel.py) is fitted on dev too, dev's in-sample scores overstate
how sure it is on new logs: bench/explain_cv.py fits the same two values on out-of-fold scores (the
prior fitted without the case it scores), and those are the ones to use (2026-11-25: T=0.7,
none=0.6, log loss 0.596 against 0.609 for the current T=0.6, none=1.1, kept).

Usage: PYTHONPATH=src python bench/explain_calibrate.py
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import explain_corpus as C  # noqa: E402


def _scores(cases):
    from oomdoctor.explain.rank import explain_text

    out = []
    for c in cases:
        ex = explain_text(c["text"].splitlines())
        out.append((c["category"], {h.category: h.score for h in ex.hypotheses if h.category != "unknown"}))
    return out


def log_loss(rows, t: float, none: float) -> float:
    total = 0.0
    for truth, scores in rows:
        z = sum(math.exp(s / t) for s in scores.values()) + math.exp(none / t)
        if truth in scores:
            p = math.exp(scores[truth] / t) / z
        else:  # the none-mass, spread over the 8 other categories
            p = math.exp(none / t) / z / 8
        total -= math.log(max(p, 1e-6))
    return total / len(rows)


def main() -> int:
    from oomdoctor.explain import rank

    rows = _scores(C.load_reports("dev"))
    best = min((log_loss(rows, t / 10, n / 10), t / 10, n / 10) for t in range(3, 41) for n in range(-20, 41))
    print(f"dev cases: {len(rows)}")
    print(f"current  T={rank.TEMPERATURE} none={rank.NONE_SCORE}: log loss {log_loss(rows, rank.TEMPERATURE, rank.NONE_SCORE):.3f}")
    print(f"fitted   T={best[1]} none={best[2]}: log loss {best[0]:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
