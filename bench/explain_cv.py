"""How `explain` generalises, measured on the dev split alone (the test split is never read here).

The rules are written by hand from dev, so their dev figure is in-sample whatever the folds; what is
fitted from data (the text prior, explain/textmodel.py: its word counts, vocabulary size and weight)
is scored out of sample:
- 5-fold cross-validation, stratified by category, fixed seed: the prior is fitted on four folds and
  its weight and vocabulary chosen by an inner 4-fold cross-validation on those four only, then the
  fifth is scored;
- leave-ecosystem-out: each ecosystem (pytorch, tensorflow, kubernetes, ...) is scored with a prior
  fitted on the others (weight and vocabulary as stored), the closest dev gets to a new kind of log.
Printed per fold and overall: top-1, top-2, no answer; per category; and the dev benign logs: false
alarms (none beyond the known hard negatives listed in tests/test_explain.py) and recovered OOMs
reported as recovered, with the stored prior.

The silver items (tests/corpus/silver.jsonl) join every fold's training set: they are never scored.

Usage: PYTHONPATH=src python bench/explain_cv.py [--rules-only] [--quick] [--no-silver]
  --rules-only: no prior (the figure of the rules and the no-event fallback alone)
"""

from __future__ import annotations

import argparse
import functools
import math
import random
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import explain_corpus as C  # noqa: E402
import explain_textmodel as TM  # noqa: E402

SEED = 17
FOLDS = 5
WEIGHTS = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0)
VOCABS = (1000, 3000)  # words of the prior (session 17: beside explain_textmodel.CHAR_VOCAB n-grams); 300 never chosen since session 5


def folds(cases: list[dict], k: int, seed: int = SEED) -> list[list[int]]:
    """Stratified: each category's cases shuffled with `seed`, then dealt round the folds."""
    rng = random.Random(seed)
    by: dict[str, list[int]] = defaultdict(list)
    for i, c in enumerate(cases):
        by[c["category"]].append(i)
    out: list[list[int]] = [[] for _ in range(k)]
    j = 0
    for cat in sorted(by):
        idx = by[cat]
        rng.shuffle(idx)
        for i in idx:
            out[j % k].append(i)
            j += 1
    return out


class Scorer:
    """Scans each case once; scores them under a given prior and weight."""

    def __init__(self, cases: list[dict]) -> None:
        from oomdoctor.explain.events import LogScanner

        self.cases = cases
        self.scans = []
        for c in cases:
            s = LogScanner()
            s.feed_lines(c["text"].splitlines())
            self.scans.append(s.finish())

    def ranked(self, idx: list[int], model, weight: float) -> list[tuple[str, list[str]]]:
        from oomdoctor.explain import rank

        old = rank.PRIOR_WEIGHT
        rank.PRIOR_WEIGHT = weight
        try:
            out = []
            for i in idx:
                ex = rank.explain_scan(self.scans[i], None, model)
                out.append((self.cases[i]["category"], [h.category for h in ex.hypotheses if h.category != "unknown"]))
            return out
        finally:
            rank.PRIOR_WEIGHT = old


def tally(rows: list[tuple[str, list[str]]]) -> tuple[int, int, int, int]:
    n = len(rows)
    return (n, sum(bool(r) and r[0] == t for t, r in rows), sum(t in r[:2] for t, r in rows), sum(not r for _, r in rows))


def fmt(t: tuple[int, int, int, int]) -> str:
    n, a, b, z = t
    return f"n={n:>3}  top-1 {a:>3} ({a / n:6.1%})  top-2 {b:>3} ({b / n:6.1%})  no answer {z:>3}" if n else "n=0"


USE_SILVER = True  # --no-silver: the prior from the gold folds alone


def model_for(cases: list[dict], idx: list[int], vocab: int):
    """The prior fitted on the gold cases `idx` and the silver items (never scored: all folds may use them)."""
    from oomdoctor.explain.textmodel import TextModel

    extra = list(TM.silver_docs()) if USE_SILVER else []
    return TextModel(TM.fit_prior([(texts[i], cases[i]["category"]) for i in idx] + extra, vocab))


texts: list[str] = []


def choose(sc: Scorer, train: list[int], quick: bool) -> tuple[float, int]:
    """Weight and vocabulary by an inner stratified 4-fold CV on `train` only (top-1, then top-2)."""
    sub = [sc.cases[i] for i in train]
    inner = [[train[j] for j in f] for f in folds(sub, 4, SEED + 1)]
    best = None
    for vocab in (VOCABS[-1:] if quick else VOCABS):
        models = [model_for(sc.cases, [i for f in inner if f is not g for i in f], vocab) for g in inner]
        for w in WEIGHTS:
            rows = [r for g, m in zip(inner, models) for r in sc.ranked(g, m, w)]
            _, a, b, _ = tally(rows)
            key = (a, b, -w, -vocab)
            if best is None or key > best[0]:
                best = (key, w, vocab)
    assert best is not None
    return best[1], best[2]


def per_category(rows: list[tuple[str, list[str]]]) -> dict[str, tuple[int, int, int, int]]:
    by: dict[str, list] = defaultdict(list)
    for r in rows:
        by[r[0]].append(r)
    return {c: tally(v) for c, v in sorted(by.items())}


def _top(scores: dict[str, float], t: float, none: float, cap: float = 0.99) -> tuple[str, float] | None:
    """The top answer and its confidence as rank._rank states it (clamped, rounded)."""
    items = [(c, s) for c, s in scores.items() if s > 0]
    if not items:
        return None
    top = max(none, max(s for _, s in items))
    z = sum(math.exp((s - top) / t) for _, s in items) + math.exp((none - top) / t)
    c, s = max(items, key=lambda kv: kv[1])
    return c, min(cap, round(max(0.01, min(0.99, math.exp((s - top) / t) / z)), 2))


def top_loss(rows: list[tuple[str, dict[str, float]]], t: float, none: float, cap: float = 0.99) -> tuple[float, float]:
    """(binary log loss of "the top answer is right", expected calibration error): what the calibration
    table on test measures."""
    pts = []
    for truth, scores in rows:
        got = _top(scores, t, none, cap)
        if got is not None:
            pts.append((got[1], got[0] == truth))
    if not pts:
        return 0.0, 0.0
    ll = -sum(math.log(max(c if ok else 1 - c, 1e-6)) for c, ok in pts) / len(pts)
    ece = 0.0
    for lo, hi in C.CALIBRATION_BINS:
        inside = [(c, ok) for c, ok in pts if lo <= c < hi]
        ece += abs(sum(c for c, _ in inside) - sum(ok for _, ok in inside))
    return ll, ece / len(pts)


GRID = [(t / 20, n / 10) for t in (2, 3) for n in range(-30, 41, 2)] + [(t / 10, n / 10) for t in range(2, 41) for n in range(-30, 41, 2)]


def calibrate(sc: Scorer, cases: list[dict]) -> None:
    """rank.TEMPERATURE / NONE_SCORE (answers with a failure line) and rank.TEMPERATURE_WORDS / NONE_SCORE_WORDS
    (the words-only leaning) fitted on out-of-fold scores (the prior fitted without the case it scores, at the
    stored weight and vocabulary: on in-sample scores the prior would look surer than it is on new logs), to
    the binary log loss of the top answer being right (session 18; before, the log loss of the confirmed
    category, which left the top answer under-confident)."""
    from explain_calibrate import log_loss

    from oomdoctor.explain import rank

    rows: dict[bool, list[tuple[str, dict[str, float]]]] = {False: [], True: []}
    for test in folds(cases, FOLDS):
        train = [i for i in range(len(cases)) if i not in set(test)]
        m = model_for(cases, train, TM.VOCAB)
        for i in test:
            ex = rank.explain_scan(sc.scans[i], None, m)
            sc_ = {h.category: h.score for h in ex.hypotheses if h.category != "unknown"}
            rows[bool(ex.hypotheses) and not ex.events].append((cases[i]["category"], sc_))
    for words, (t, n) in ((False, (rank.TEMPERATURE, rank.NONE_SCORE)), (True, (rank.TEMPERATURE_WORDS, rank.NONE_SCORE_WORDS))):
        r = rows[words]
        loss = functools.partial(top_loss, cap=rank.WORDS_MAX_CONFIDENCE if words else 0.99)
        best = min(GRID, key=lambda p: loss(r, *p)[0])
        name = "words-only leaning" if words else "answers with a failure line"
        print(f"confidence, {name} ({len(r)} out of fold): stored T={t} none={n} top log loss {loss(r, t, n)[0]:.3f} "
              f"ECE {loss(r, t, n)[1]:.3f}; fitted T={best[0]} none={best[1]} top log loss "
              f"{loss(r, *best)[0]:.3f} ECE {loss(r, *best)[1]:.3f}")
        # the fit itself judged out of sample: fitted on four fifths of these rows, scored on the fifth
        rng = random.Random(SEED)
        order = list(range(len(r)))
        rng.shuffle(order)
        fifths = [[r[j] for j in order[k::5]] for k in range(5)]
        held = [loss(fifths[k], *min(GRID, key=lambda p: loss([x for g in range(5) if g != k for x in fifths[g]], *p)[0]))
                for k in range(5)]
        stored = [loss(fifths[k], t, n) for k in range(5)]
        print(f"  5-fold over these rows, held-out fifths: fitted top log loss {sum(h[0] for h in held) / 5:.3f} ECE "
              f"{sum(h[1] for h in held) / 5:.3f}; stored {sum(h[0] for h in stored) / 5:.3f} ECE {sum(h[1] for h in stored) / 5:.3f}")
        if words:  # the cap (rank.WORDS_MAX_CONFIDENCE) chosen inside the same folds, at the stored T and none
            caps = (0.8, 0.85, 0.9, 0.95, 0.99)
            rest = [[x for g in range(5) if g != k for x in fifths[g]] for k in range(5)]
            chosen = [min(caps, key=lambda c, k=k: top_loss(rest[k], t, n, c)[0]) for k in range(5)]
            print(f"  cap chosen inside the folds ({', '.join(map(str, chosen))}): top log loss "
                  f"{sum(top_loss(fifths[k], t, n, chosen[k])[0] for k in range(5)) / 5:.3f}; no cap "
                  f"{sum(top_loss(fifths[k], t, n)[0] for k in range(5)) / 5:.3f}")
    a, b = rows[False], rows[True]
    both = (log_loss(a, rank.TEMPERATURE, rank.NONE_SCORE) * len(a)
            + log_loss(b, rank.TEMPERATURE_WORDS, rank.NONE_SCORE_WORDS) * len(b)) / max(1, len(a) + len(b))
    print(f"log loss of the confirmed category (all {len(a) + len(b)} out of fold, stored values): {both:.3f}")


def main(argv: list[str] | None = None) -> int:
    from oomdoctor.explain import rank
    from oomdoctor.explain.textmodel import default_model

    ap = argparse.ArgumentParser()
    ap.add_argument("--rules-only", action="store_true")
    ap.add_argument("--quick", action="store_true", help="one vocabulary size in the inner search")
    ap.add_argument("--misses", action="store_true", help="list the dev cases missed out of sample (dev only)")
    ap.add_argument("--no-silver", action="store_true", help="fit the prior on the gold folds only")
    a = ap.parse_args(argv)
    global USE_SILVER
    USE_SILVER = not a.no_silver
    cases = C.load_reports("dev")
    texts[:] = [TM.model_text(c["text"]) for c in cases]
    sc = Scorer(cases)
    all_rows: list[tuple[str, list[str]]] = []
    print(f"dev: {len(cases)} reports; {FOLDS}-fold stratified CV, seed {SEED}"
          + (" (rules only)" if a.rules_only else ""))
    for k, test in enumerate(folds(cases, FOLDS)):
        train = [i for i in range(len(cases)) if i not in set(test)]
        if a.rules_only:
            rows, note = sc.ranked(test, None, 0.0), ""
        else:
            w, vocab = choose(sc, train, a.quick)
            rows, note = sc.ranked(test, model_for(cases, train, vocab), w), f"  (weight {w}, vocab {vocab})"
        all_rows += rows
        if a.misses:
            for i, (t, r) in zip(test, rows):
                if not r or r[0] != t:
                    print(f"    miss {cases[i]['id']}: {t} -> {r[:3]}")
        print(f"fold {k + 1}: {fmt(tally(rows))}{note}")
    print(f"CV overall: {fmt(tally(all_rows))}")
    if not a.rules_only:
        w, vocab = choose(sc, list(range(len(cases))), a.quick)
        print(f"chosen by 4-fold CV on all of dev (what rank.PRIOR_WEIGHT and explain_textmodel.VOCAB should be): "
              f"weight {w}, vocab {vocab}; stored: weight {rank.PRIOR_WEIGHT}, vocab {TM.VOCAB}")
    for cat, t in per_category(all_rows).items():
        print(f"  {cat:<20} {fmt(t)}")

    print("leave-ecosystem-out" + (" (rules only)" if a.rules_only else f" (weight {rank.PRIOR_WEIGHT})"))
    eco: dict[str, list[int]] = defaultdict(list)
    for i, c in enumerate(cases):
        eco[c["ecosystem"]].append(i)
    lo_rows: list[tuple[str, list[str]]] = []
    for name, idx in sorted(eco.items(), key=lambda kv: -len(kv[1])):
        if a.rules_only:
            rows = sc.ranked(idx, None, 0.0)
        else:
            others = [i for i in range(len(cases)) if i not in set(idx)]
            rows = sc.ranked(idx, model_for(cases, others, TM.VOCAB), rank.PRIOR_WEIGHT)
        lo_rows += rows
        print(f"  {name:<12} {fmt(tally(rows))}")
    print(f"leave-ecosystem-out overall: {fmt(tally(lo_rows))}")

    if not a.rules_only:
        calibrate(sc, cases)

    stored = None if a.rules_only else default_model()
    bad, rec, rec_ok = [], 0, 0
    for c in C.load_benign("dev"):
        ex = rank.explain_text(c["text"].splitlines(), prior=stored)
        if ex.failures:
            bad.append(c["id"])
        if c["expect"] == "recovered":
            rec += 1
            rec_ok += bool(ex.recovered) and not ex.failures
    print(f"dev benign: {len(C.load_benign('dev'))} logs, {len(bad)} false alarm(s) {bad}; "
          f"{rec_ok}/{rec} recovered OOMs reported as recovered")
    return 0


if __name__ == "__main__":
    sys.exit(main())
