"""Fit explain's text prior (src/oomdoctor/explain/textmodel.json) on the dev split only.

The model reads what explain's scanner hands it (each log's head and tail, and the events' text), so
it is fitted on exactly that text of each dev report: a multinomial logistic regression (bench/logreg.py)
over the tf-idf of the VOCAB most frequent words and word pairs and the CHAR_VOCAB most frequent character
n-grams (textmodel.TextModel's tfidf form, session 17). VOCAB and the prior's weight are chosen by
cross-validation on dev (bench/explain_cv.py). Deterministic up to the BLAS's last bits: the same corpus
gives the same words and weights within CHECK_TOL (--check compares so).

It also fits the documentation model (src/oomdoctor/explain/docsmodel.json): a naive Bayes with
two classes, `report` (every dev report) against `docs` (dev benign texts of kind docs_text,
grep_output and other: documentation, FAQs, change logs, code and comments that quote OOM wording).
rank.py uses it to tell a vague OOM word in documentation from one in a report (DOCS_MIN).

The category prior also reads the silver items (tests/corpus/silver.jsonl through
explain_corpus.load_silver: labelled from search excerpts, kept away from every gold case's thread and
text); out of fold on dev they add what bench/explain_cv.py --no-silver shows against the default.

Usage: PYTHONPATH=src python bench/explain_textmodel.py [--check]
  --check: exit 1 if a stored file differs from a fresh fit (the prior: beyond CHECK_TOL) (tests/test_explain_textmodel.py runs it)
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections import Counter
from functools import lru_cache
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import explain_corpus as C  # noqa: E402

# 3000 since session 5 (was 300): out of fold on dev the prior alone gets 331 of 548 first (313 at 300)
# and 423 in its top two (392); on the 103 m/n reports scored with the rules they arrived to, explain got
# 47 first / 66 top two against 44 / 59 at 300 words (weights of rank.py). bench/explain_cv.py chooses
# between 1000 and 3000 since session 13 (300 was never chosen after session 5).
VOCAB = 3000
# The prior's form since session 13: multinomial logistic regression over the same binarised words (the
# VOCAB most informative by mutual information, as naive Bayes chose them), L2 penalty C (bench/logreg.py).
# Out of fold on dev (1026 reports, 5 folds, weights of rank.py at their best for each): naive Bayes 767
# right first / 869 top two; logistic regression at C 8 / 16 / 32 with 3000 words 777 / 778 / 775 first,
# 867 / 863 / 862 top two; 1000 words 767; every word of the dev texts 781. Its posteriors need no divisor
# (TEMPER) and no category shift (the naive Bayes PRIOR_BIAS of session 8: leak_in_code -1, true_capacity
# +1): its intercepts are fitted. (Sessions 3 and 7 tried it on 359 / 652 reports: no gain then.)
# Session 17 (2026-11-27), the tfidf form (word 1-2-grams + character 3-5-grams inside words, as scikit-learn's
# TfidfVectorizer "word" and "char_wb" with sublinear tf, each block L2-normalised): out of fold on dev (1161
# reports, 5 folds, prior weight 1.0) the binarised-word form 876 right first / 984 top two; with scikit-learn,
# 3000 words + 10000 n-grams at C 2 / 4: 890 / 993 and 886 / 988; 5000 + 20000 at C 2: 891 / 989; words alone
# (50000): 887 / 986; the numpy fit here (3000 + 10000, C 2): 891 / 994. On the 275 dev reports of rounds z-ah
# read by the rules they arrived to: 197 / 223 -> 201 / 228.
C_PENALTY = 2.0
CHAR_VOCAB = 10000  # character n-grams of the tfidf form (session 17)
DIGITS = 4  # the stored weights' rounding
# What --check allows between the stored and a fresh fit. The fit stops within ~6e-5 of the optimum
# (bench/logreg.py's tolerance; a tighter one costs minutes), and BLAS kernels (threads, AVX-512, ARM) move
# that point by as much again; with the rounding, two honest fits differ by up to ~1.6e-4 (session 13
# review). At 1e-3 a category's logit moves by at most sqrt(words present) x 1e-3 (0.01 for 100 words).
CHECK_TOL = 1e-3
DOCS_VOCAB = 300  # the documentation model: DOCS_MIN (rank.py) was chosen out of fold at this size
CATEGORIES = [c for c in C.CATEGORIES]
TEXTMODEL_PY = Path(__file__).resolve().parent.parent / "src" / "oomdoctor" / "explain" / "textmodel.py"


def model_text(text: str, tags: bool = True) -> str:
    """The text the prior sees at run time for a log (rank.prior_text: the scanner's samples, the events'
    text and, with `tags`, their kind and hint words); the documentation model reads no tags."""
    from oomdoctor.explain.events import LogScanner
    from oomdoctor.explain.rank import model_text as text_of
    from oomdoctor.explain.rank import prior_text

    scanner = LogScanner()
    scanner.feed_lines(text.splitlines())
    scan = scanner.finish()
    return prior_text(scan) if tags else text_of(scan, scan.events, tags=False)


@lru_cache(maxsize=1)
def silver_docs() -> tuple[tuple[str, str], ...]:
    """The silver items (explain_corpus.load_silver) as the prior reads them; computed once."""
    return tuple((model_text(s["text"]), s["category"]) for s in C.load_silver())


def fit_prior(docs: list[tuple[str, str]], vocab: int = VOCAB, c_penalty: float = C_PENALTY,
              chars: int = CHAR_VOCAB, categories: list[str] | None = None) -> dict:
    """The stored form of the prior from (model text, category) pairs: the idf and logistic weights of the
    `vocab` most frequent words and word pairs (in >= 2 texts) and the `chars` most frequent character
    n-grams (in >= 3 texts), as textmodel.TextModel's tfidf form reads them. Ties at the vocabulary's cut go
    by name (scikit-learn's max_features leaves their order unspecified)."""
    import logreg
    import numpy as np

    ANALYZERS, tfidf = today().ANALYZERS, today().tfidf
    cats = CATEGORIES if categories is None else categories
    n = len(docs)
    sizes = {"word": (vocab, 2), "char": (chars, 3)}
    counted = {name: [ANALYZERS[name](t) for t, _ in docs] for name in sizes}
    tables: dict[str, dict[str, float]] = {}
    for name, (size, min_df) in sizes.items():
        df: Counter[str] = Counter()
        tf: Counter[str] = Counter()
        for c in counted[name]:
            df.update(c.keys())
            tf.update(c)
        kept = sorted((t for t in df if df[t] >= min_df), key=lambda t: (-tf[t], t))[:size]
        # rounded as stored, so that the weights are fitted to the idf the package reads
        tables[name] = {t: round(math.log((1 + n) / (1 + df[t])) + 1.0, DIGITS) for t in sorted(kept)}
    columns = {(name, t): j for j, (name, t) in enumerate((nm, t) for nm in sizes for t in tables[nm])}
    X = np.zeros((n, len(columns)))
    for r in range(n):
        for name in sizes:
            for t, x in tfidf(counted[name][r], tables[name]).items():
                X[r, columns[(name, t)]] = x
    y = np.array([cats.index(c) for _, c in docs])
    W, b = logreg.fit(X, y, len(cats), c_penalty)
    blocks = {name: {t: [tables[name][t]] + [round(float(x), DIGITS) for x in W[columns[(name, t)]]]
                     for t in tables[name]} for name in sizes}
    return {"version": 3, "categories": list(cats), "form": "tfidf", "c_penalty": c_penalty,
            "docs": [int((y == i).sum()) for i in range(len(cats))],
            "intercepts": [round(float(x), DIGITS) for x in b], "blocks": blocks}


@lru_cache(maxsize=1)
def today():
    """This checkout's explain/textmodel.py, loaded by its path: bench/explain_arrival.py puts an older commit's
    code first on sys.path, and the prior it fits and reads must still be of today's form."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("oomdoctor_textmodel_today", TEXTMODEL_PY)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def fit_cases(cases: list[dict], vocab: int = VOCAB) -> dict:
    """The prior from the dev reports given and every silver item."""
    return fit_prior([(model_text(c["text"]), c["category"]) for c in cases] + list(silver_docs()), vocab)


def _rows(model: dict) -> dict[tuple[str, str], list[float]]:
    """Every stored row of numbers by (block, term): the tfidf form's blocks, or the logistic form's words."""
    if "blocks" in model:
        return {(name, t): v for name, table in model["blocks"].items() for t, v in table.items()}
    return {("word", t): v for t, v in model["weights"].items()}


def same_model(old: str, new: str) -> bool:
    """Stored and fresh prior agree: the same terms and every number within CHECK_TOL."""
    try:
        a, b = json.loads(old), json.loads(new)
        meta = ("weights", "intercepts", "blocks")
        if {k: v for k, v in a.items() if k not in meta} != {k: v for k, v in b.items() if k not in meta}:
            return False
        ra, rb = _rows(a), _rows(b)
        if ra.keys() != rb.keys():
            return False
        pairs = [(a["intercepts"], b["intercepts"])] + [(ra[k], rb[k]) for k in ra]
        return all(len(u) == len(v) and all(abs(x - y) <= CHECK_TOL for x, y in zip(u, v)) for u, v in pairs)
    except (ValueError, KeyError, TypeError, AttributeError):
        return False


DOCS_KINDS = ("docs_text", "grep_output", "other")


def docs_texts() -> list[dict]:
    """The dev benign texts the documentation model learns as `docs`. A log of a recovered OOM is a job's own
    output, not documentation (session 9: round z10's TensorRT tactic logs, of kind "other", had made
    TensorRT's error lines read as documentation)."""
    return [c for c in C.load_benign("dev") if c["kind"] in DOCS_KINDS and c.get("expect") != "recovered"]


def fit_docs() -> dict:
    from oomdoctor.explain.textmodel import DOCS_TEMPER, fit

    docs = [(model_text(c["text"], tags=False), "report") for c in C.load_reports("dev")]
    docs += [(model_text(c["text"], tags=False), "docs") for c in docs_texts()]
    return fit(docs, ["report", "docs"], DOCS_VOCAB, temper=DOCS_TEMPER)


def dumps(model: dict) -> str:
    return json.dumps(model, sort_keys=True, separators=(",", ":")) + "\n"


def main(argv: list[str] | None = None) -> int:
    from oomdoctor.explain.textmodel import MODEL_PATH

    ap = argparse.ArgumentParser()
    ap.add_argument("--check", action="store_true")
    a = ap.parse_args(argv)
    from oomdoctor.explain.textmodel import DOCS_MODEL_PATH

    outputs = ((MODEL_PATH, dumps(fit_cases(C.load_reports("dev")))), (DOCS_MODEL_PATH, dumps(fit_docs())))
    if a.check:
        for path, text in outputs:
            old = path.read_text(encoding="utf-8") if path.exists() else ""
            if old != text and not (path == MODEL_PATH and same_model(old, text)):
                print(f"{path} is stale: run PYTHONPATH=src python bench/explain_textmodel.py", file=sys.stderr)
                return 1
            print(f"{path} matches a fresh fit on dev")
        return 0
    for path, text in outputs:
        path.write_text(text, encoding="utf-8")
        print(f"wrote {path} ({len(text)} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
