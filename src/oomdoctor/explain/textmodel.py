"""A small learned prior over the root-cause categories, from the words of a log or report.

The rules (explain/rules.py) read what a message's wording and numbers mean; they say nothing when a
report is written in prose ("it ooms because of fragmentation", "killed while loading shards") or
when several causes score alike. This model fills that gap with a multinomial logistic regression over
the tf-idf of word unigrams and bigrams (lower-cased, letters only; rank.event_tags adds one word per
event for its kind and hint) and of character n-grams inside words (since session 17: CHAR_NGRAMS),
whose weights are fitted on the dev split of the labelled corpus and the silver items, never on test
(bench/explain_textmodel.py; the same script with --check fails if the stored weights differ from a
fresh fit, tests/test_explain_textmodel.py). Sessions 13-16 it was a logistic regression over binarised
words, before that a naive Bayes; the documentation model (docsmodel.json, report against
documentation) still is a naive Bayes, and every form loads here.
rank.py adds `PRIOR_WEIGHT * p(category | words)` to each category's rule score; the weight and the
vocabulary size were chosen out of fold on dev (docs/explain-design.md). Pure: text in, numbers out; the
weights are package data (textmodel.json).
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from functools import lru_cache
from pathlib import Path
from typing import Any

MODEL_PATH = Path(__file__).with_name("textmodel.json")
DOCS_MODEL_PATH = Path(__file__).with_name("docsmodel.json")  # report vs documentation (rank.DOCS_MIN)
MAX_TEXT = 64 * 1024  # characters of text looked at (the scanner hands over a bounded sample)
ALPHA = 0.5  # additive smoothing of the per-category token counts
# Divisor of the words' log-likelihood (TextModel.posterior). Chosen out of fold on dev (5 folds, 347
# reports, 2026-11-26): the prior's own log loss 3.12 / 2.13 / 1.74 / 1.52 / 1.50 at 1 / 2 / 3 / 5 / 8;
# explain's top-1 265-268 of 347 from 1 to 3, fewer answers above (the words-only leaning is reached
# less often). 3: the prior stops saying p = 1.00 on words that do not settle anything.
# Session 5 (2026-11-26), with the vocabulary grown from 300 to 3000 words: 5 out of fold on dev (548
# reports, prior alone 329 -> 331 right first) and on the 103 m/n reports scored with the rules they arrived
# to (prior alone 50 -> 52; explain 49 / 65 in the top one / two at 3 and 5 alike, weights 1.0 / 2.0).
# Each model file stores its own divisor ("temper"); this is the default for a naive Bayes file without one
# (the category prior was one until session 13; the documentation model still is, with DOCS_TEMPER).
TEMPER = 5.0
DOCS_TEMPER = 3.0  # the documentation model (docsmodel.json) keeps the divisor DOCS_MIN was chosen with

# Words of 2+ letters (identifiers keep their underscores); digits, paths' hashes and hex ids carry no
# cause and only let the model memorise one report.
_WORD = re.compile(r"[A-Za-z][A-Za-z_']*[A-Za-z]")
_STOP = frozenset("""a an and are as at be been but by can could did do does for from had has have i if in into is it
its me my of on or our so than that the their them then there these they this to too us was we were what when where
which while who will with would you your""".split())


TAG_PREFIX = "oomdoctor_"  # words rank.event_tags writes for an event's kind and hint: unigrams only


def tokens(text: str) -> set[str]:
    """The distinct unigrams and bigrams of `text` (binarised: a word counts once per document)."""
    words = [w.lower() for w in _WORD.findall(text[:MAX_TEXT])]
    words = [w for w in words if w not in _STOP and len(w) <= 40]
    out = set(words)
    out.update(f"{a} {b}" for a, b in zip(words, words[1:])
               if not a.startswith(TAG_PREFIX) and not b.startswith(TAG_PREFIX))
    return out


# The prior's form since session 17: tf-idf of word unigrams and bigrams and of characters n-grams inside
# words (as scikit-learn's TfidfVectorizer with analyzer "word" and "char_wb", sublinear tf, smooth idf, each
# block L2-normalised on its own), then a multinomial logistic regression (bench/explain_textmodel.py).
# Character n-grams read what word splitting loses: identifiers (CUBLAS_STATUS_ALLOC_FAILED, OutOfMemoryError),
# flags and paths cut at different places, misspellings. Out of fold on dev (1161 reports, before round ai) the
# prior alone 831 -> 852 right first; explain 876 -> 891, top two 984 -> 994; on the 275 dev reports of rounds z
# to ah, read by the rules they arrived to, 197 -> 201 first, 223 -> 228 top two (docs/explain-design.md).
# The counts are scikit-learn's; the vocabulary's ties at its cut are broken by name (scikit-learn's order is
# unspecified), and word pairs include the event tags (`oomdoctor_hint_host_oom when`), unlike `tokens`.
CHAR_NGRAMS = (3, 5)
_SPACE = re.compile(r"\s+")


def word_counts(text: str) -> dict[str, int]:
    """Word unigrams and bigrams (lower-cased, letters only: _WORD) with their counts."""
    words = _WORD.findall(text[:MAX_TEXT].lower())
    return dict(Counter(words) + Counter(f"{a} {b}" for a, b in zip(words, words[1:])))


def char_counts(text: str) -> dict[str, int]:
    """Character n-grams inside whitespace-separated words, each padded with one space (char_wb)."""
    lo, hi = CHAR_NGRAMS
    out: dict[str, int] = {}
    for w in _SPACE.split(text[:MAX_TEXT].lower()):
        if not w:
            continue
        w = f" {w} "
        m = len(w)
        for n in range(lo, hi + 1):
            if m < n:
                # scikit-learn counts a word shorter than n once, whole
                if n == lo:
                    out[w] = out.get(w, 0) + 1
                break
            for i in range(m - n + 1):
                g = w[i:i + n]
                out[g] = out.get(g, 0) + 1
    return out


ANALYZERS = {"word": word_counts, "char": char_counts}


def tfidf(counts: dict[str, int], idf: dict[str, float]) -> dict[str, float]:
    """(1 + ln tf) x idf of the terms in the table, L2-normalised over them; in sorted order."""
    v = {t: (1.0 + math.log(c)) * idf[t] for t, c in sorted((t, c) for t, c in counts.items() if t in idf)}
    norm = math.sqrt(sum(x * x for x in v.values()))
    return {t: x / norm for t, x in v.items()} if norm > 0 else {}


class TextModel:
    """p(category | text): naive Bayes from per-category document counts of each token ("counts"; the
    documentation model), multinomial logistic regression over binarised tokens ("weights", the category
    prior in sessions 13-16) or over the tf-idf of words and character n-grams ("form": "tfidf", "blocks":
    the category prior since session 17). bench/explain_textmodel.py says why."""

    def __init__(self, data: dict[str, Any]) -> None:
        self.categories: list[str] = list(data["categories"])
        self.weights: dict[str, list[float]] | None = None
        self.blocks: dict[str, tuple[dict[str, float], dict[str, list[float]]]] | None = None
        if not self.categories or len(set(self.categories)) != len(self.categories):
            raise ValueError("no categories, or a category twice")
        if data.get("form") == "tfidf":
            self._load_tfidf(data)
            return
        if "weights" in data:
            k = len(self.categories)
            if not isinstance(data["weights"], dict):
                raise ValueError("weights are not a table of words")
            self.weights = {str(t): [float(x) for x in v] for t, v in data["weights"].items()}
            self.intercepts = [float(x) for x in data["intercepts"]]
            if len(self.intercepts) != k or any(len(v) != k for v in self.weights.values()):
                raise ValueError("weights of the wrong size")
            if not all(math.isfinite(x) and abs(x) < 1e6 for v in [self.intercepts, *self.weights.values()] for x in v):
                raise ValueError("weights that are not finite numbers")
            return
        self.docs: list[int] = [int(x) for x in data["docs"]]
        self.alpha = float(data.get("alpha", ALPHA))
        self.temper = float(data.get("temper", TEMPER))
        vocab: dict[str, list[int]] = data["counts"]
        n = sum(self.docs)
        k = len(self.categories)
        # "bias": a log-space shift of a category's prior (naive Bayes; the category prior had one until session 13)
        bias = data.get("bias") or {}
        self.log_prior = [math.log((d + 1) / (n + k)) + float(bias.get(c, 0.0)) for d, c in zip(self.docs, self.categories)]
        # Bernoulli-style presence with a multinomial normalisation: log p(token | category).
        tot = [sum(v[i] for v in vocab.values()) for i in range(k)]
        denom = [t + self.alpha * len(vocab) for t in tot]
        self.log_p = {t: [math.log((v[i] + self.alpha) / denom[i]) for i in range(k)] for t, v in vocab.items()}

    def _load_tfidf(self, data: dict[str, Any]) -> None:
        k = len(self.categories)
        if not isinstance(data["intercepts"], list) or not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in data["intercepts"]):
            raise ValueError("intercepts are not a list of numbers")
        self.intercepts = [float(x) for x in data["intercepts"]]
        if len(self.intercepts) != k or not isinstance(data["blocks"], dict) or not data["blocks"]:
            raise ValueError("intercepts of the wrong size, or no blocks")
        self.blocks = {}
        for name, table in data["blocks"].items():
            if name not in ANALYZERS or not isinstance(table, dict):
                raise ValueError(f"unknown block {name!r}")
            if not all(isinstance(v, list) and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in v) for v in table.values()):
                raise ValueError("a term's row is not a list of numbers")
            rows = {str(t): [float(x) for x in v] for t, v in table.items()}
            # an idf is ln((1 + n) / (1 + df)) + 1: at least 1, and far below 1e3 for any corpus
            if any(len(v) != k + 1 or not (math.isfinite(v[0]) and 1.0 <= v[0] < 1e3) for v in rows.values()):
                raise ValueError("a term's row is not its idf and one weight per category")
            self.blocks[name] = ({t: v[0] for t, v in rows.items()}, {t: v[1:] for t, v in rows.items()})
        if not all(math.isfinite(x) and abs(x) < 1e6 for v in [self.intercepts] + [r for _, w in self.blocks.values()
                                                                               for r in w.values()] for x in v):
            raise ValueError("weights that are not finite numbers")

    def posterior(self, text: str, temper: float | None = None) -> dict[str, float]:
        """p(category | words); the words' summed log-likelihood is divided by `temper` (naive Bayes
        counts correlated words as independent evidence, so untempered posteriors are near 0 or 1). A
        logistic model's posterior is its own (no divisor): softmax of the intercepts plus the present
        words' weights, each scaled by 1/sqrt(words present) as it was fitted; a tfidf model's, softmax of the
        intercepts plus each block's normalised tf-idf times its weights (`temper` is for naive Bayes only)."""
        if self.blocks is not None:
            return self._tfidf(text)
        if self.weights is not None:
            return self._logistic(text)
        toks = [t for t in tokens(text) if t in self.log_p]
        k = len(self.categories)
        tau = self.temper if temper is None else temper
        ll = [0.0] * k
        for t in toks:
            lp = self.log_p[t]
            for i in range(k):
                ll[i] += lp[i]
        s = [self.log_prior[i] + ll[i] / tau for i in range(k)]
        m = max(s)
        e = [math.exp(x - m) for x in s]
        z = sum(e)
        return {c: e[i] / z for i, c in enumerate(self.categories)}

    def _tfidf(self, text: str) -> dict[str, float]:
        k = len(self.categories)
        z = list(self.intercepts)
        for name, (idf, weights) in (self.blocks or {}).items():
            for t, x in tfidf(ANALYZERS[name](text), idf).items():
                r = weights[t]
                for i in range(k):
                    z[i] += x * r[i]
        return _softmax(z, self.categories)

    def _logistic(self, text: str) -> dict[str, float]:
        weights = self.weights or {}
        # in a fixed order: a set's order changes with the hash seed, and so would the sums' last bits
        rows = [weights[t] for t in sorted(tokens(text)) if t in weights]
        k = len(self.categories)
        scale = 1.0 / math.sqrt(len(rows)) if rows else 0.0
        return _softmax([self.intercepts[i] + scale * sum(r[i] for r in rows) for i in range(k)], self.categories)


def _softmax(z: list[float], categories: list[str]) -> dict[str, float]:
    m = max(z)
    e = [math.exp(x - m) for x in z]
    s = sum(e)
    return {c: e[i] / s for i, c in enumerate(categories)}


def fit(docs: list[tuple[str, str]], categories: list[str], vocab_size: int, min_docs: int = 2,
        alpha: float = ALPHA, temper: float | None = None, bias: dict[str, float] | None = None) -> dict[str, Any]:
    """Counts for a TextModel from (text, category) pairs: tokens in at least `min_docs` documents,
    the `vocab_size` most informative (mutual information with the category), ties by name, so the
    result depends on the data alone."""
    idx = {c: i for i, c in enumerate(categories)}
    k = len(categories)
    counts: dict[str, list[int]] = {}
    ndocs = [0] * k
    for text, cat in docs:
        i = idx[cat]
        ndocs[i] += 1
        for t in tokens(text):
            counts.setdefault(t, [0] * k)[i] += 1
    n = sum(ndocs)
    kept = {t: v for t, v in counts.items() if sum(v) >= min_docs}

    def mi(v: list[int]) -> float:
        df = sum(v)
        out = 0.0
        for i in range(k):
            for present, joint in ((1, v[i]), (0, ndocs[i] - v[i])):
                if joint <= 0:
                    continue
                px = df / n if present else 1 - df / n
                out += joint / n * math.log(joint / n / (px * ndocs[i] / n))
        return out

    ranked = sorted(kept.items(), key=lambda kv: (-round(mi(kv[1]), 12), kv[0]))[:vocab_size]
    out = {"version": 1, "categories": list(categories), "docs": ndocs, "alpha": alpha,
           "temper": TEMPER if temper is None else temper, "counts": dict(sorted(ranked))}
    if bias:
        out["bias"] = {c: float(bias[c]) for c in sorted(bias) if c in idx}
    return out


def _load(path: Path) -> TextModel | None:
    try:
        return TextModel(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError):
        return None


@lru_cache(maxsize=1)
def docs_model() -> TextModel | None:
    """p(docs | words): documentation, FAQs, change logs and code against users' reports; None if missing."""
    return _load(DOCS_MODEL_PATH)


@lru_cache(maxsize=1)
def default_model() -> TextModel | None:
    """The stored model, or None if its file is missing or unreadable (explain then uses its rules only)."""
    return _load(MODEL_PATH)
