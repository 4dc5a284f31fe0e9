"""The labelled corpora of `explain`, their dev/test split, and how they are scored.

tests/corpus/reports/*.yaml: real public reports of memory failures (text as posted, link, date,
ecosystem, the category the thread confirmed, why). tests/corpus/benign/*.yaml: real logs with no
memory failure (healthy runs, start-up logs, allocator tables, grep output quoting OOM strings) or with
an OOM that was caught and recovered from.

The split cannot be tuned to: a case is `test` when the SHA-256 of its URL, as a number, is 60 or
more modulo 100, else `dev`, and the file says so in its `split` field (checked by the tests). The only
exception goes one way: a case whose text was read while writing rules is `dev` whatever its hash, with
`split_note` saying why (the first 68 reports, from which the rules were first written; any `test` case
that ever drives a change). Rules may be written and debugged on `dev` only; `test` is scored by
bench/explain_accuracy.py, which never lists `test` cases one by one.

tests/corpus/silver.jsonl: more real texts, labelled from what a search excerpt shows (the thread's
title, the resolution when it is visible) rather than from the whole thread: cheaper, noisier. They train
the word prior only (bench/explain_textmodel.py) and are never scored. load_silver() keeps out any item
whose link is a gold case's thread (normalised: scheme, query, anchor, forum slugs dropped), whose
text is mostly gold text (SHINGLE words in a row) or shares SHARED_RUNS runs found in one gold case only
(test cases included: the items kept depend on the test split, which only ever removes items).
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML

ROOT = Path(__file__).resolve().parent.parent
REPORTS = ROOT / "tests" / "corpus" / "reports"
BENIGN = ROOT / "tests" / "corpus" / "benign"
SILVER = ROOT / "tests" / "corpus" / "silver.jsonl"
SILVER_KEYS = ("url", "category", "confidence", "basis", "text")
SHINGLE = 8  # words in a row: a silver text sharing half its 8-word runs with the gold texts is one of them
SHARED_RUNS = 3  # or sharing this many of one gold text's own 8-word runs (in no other gold text)
CATEGORIES = ("true_capacity", "fragmentation", "other_process", "leak_in_code", "context_or_driver",
              "shm_exhausted", "host_oom", "gpu_sharing_limit", "not_oom")
REPORT_KEYS = ("id", "url", "date", "ecosystem", "category", "why", "split", "text")
BENIGN_KEYS = ("id", "url", "date", "kind", "expect", "why", "split", "text")
TEST_SHARE = 40  # percent


def split_of(url: str) -> str:
    """dev or test, from the URL alone (about 60/40)."""
    return "test" if int(hashlib.sha256(url.encode("utf-8")).hexdigest(), 16) % 100 >= 100 - TEST_SHARE else "dev"


def load(directory: Path) -> list[dict[str, Any]]:
    y = YAML(typ="safe")
    return [y.load(p.read_text(encoding="utf-8")) | {"file": p.name} for p in sorted(directory.glob("*.yaml"))]


def load_reports(split: str | None = None) -> list[dict[str, Any]]:
    return [c for c in load(REPORTS) if split is None or c["split"] == split]


def load_benign(split: str | None = None) -> list[dict[str, Any]]:
    return [c for c in load(BENIGN) if split is None or c["split"] == split]


def thread_key(url: str) -> str:
    """One key per thread: GitHub issue and pull numbers, Discourse and Stack Exchange ids, no slugs."""
    u = re.sub(r"^https?://(?:www\.)?", "", url.strip().lower()).split("#")[0].split("?")[0].rstrip("/")
    u = re.sub(r"^(github\.com/[^/]+/[^/]+)/(?:issues|pull|discussions)/(\d+).*", r"\1/\2", u)
    # Discourse: /t/slug/id, /t/id, /t/slug/id/post, /t/id/post (a slug is not all digits)
    u = re.sub(r"^([^/]+(?:/[^/]+)*?)/t/(?:[^/]*[^\d/][^/]*/)?(\d+)(?:/\d+)?$", r"\1/t/\2", u)
    return re.sub(r"^([^/]+)/(questions|q)/(\d+).*", r"\1/q/\3", u)  # Stack Exchange


def _shingles(text: str) -> set[tuple[str, ...]]:
    w = re.findall(r"[a-z0-9_]+", text.lower())
    return {tuple(w[i:i + SHINGLE]) for i in range(len(w) - SHINGLE + 1)}


def load_silver(path: Path = SILVER) -> list[dict[str, Any]]:
    """Silver items that may train the prior: not a gold case's thread, not a copy of a gold case's text."""
    if not path.exists():
        return []
    gold = load_reports() + load_benign()
    keys = {thread_key(c["url"]) for c in gold}
    per_case = [_shingles(str(c["text"])) for c in gold]
    gold_sh: set[tuple[str, ...]] = set().union(*per_case)
    seen_in: dict[tuple[str, ...], int] = defaultdict(int)
    for g in per_case:
        for r in g:
            seen_in[r] += 1
    rare = [{r for r in g if seen_in[r] == 1} for g in per_case]  # not a library's boilerplate
    out, seen = [], set()
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        item = json.loads(line)
        k = thread_key(item["url"])
        if k in keys or k in seen or item["category"] not in CATEGORIES:
            continue
        sh = _shingles(item["text"])
        if sh and (len(sh & gold_sh) >= len(sh) / 2 or any(len(sh & g) >= SHARED_RUNS for g in rare)):
            continue
        seen.add(k)
        out.append(item)
    return out


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """95% Wilson score interval of a proportion k/n (fine for small n and proportions near 1)."""
    if n == 0:
        return (0.0, 1.0)
    p = k / n
    d = 1 + z * z / n
    c = (p + z * z / (2 * n)) / d
    h = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / d
    return (max(0.0, c - h), min(1.0, c + h))


@dataclass
class Scored:
    id: str
    expected: str
    ranked: list[str]
    confidence: float
    words_only: bool = False  # no failure line found: the answer is the words' leaning (rank._words_only)

    @property
    def top1(self) -> bool:
        return bool(self.ranked) and self.ranked[0] == self.expected

    @property
    def top2(self) -> bool:
        return self.expected in self.ranked[:2]


def score_reports(cases: list[dict[str, Any]]) -> list[Scored]:
    from oomdoctor.explain.rank import explain_text

    out = []
    for c in cases:
        ex = explain_text(c["text"].splitlines())
        out.append(Scored(c["id"], c["category"], [h.category for h in ex.hypotheses],
                          ex.hypotheses[0].confidence if ex.hypotheses else 0.0,
                          words_only=bool(ex.hypotheses) and not ex.events))
    return out


@dataclass
class BenignResult:
    id: str
    expect: str
    events: int  # events reported as failures (not recovered)
    recovered: int
    exit_code: int  # what `oomdoctor explain` would exit with

    @property
    def false_alarm(self) -> bool:
        return self.exit_code != 0


def score_benign(cases: list[dict[str, Any]]) -> list[BenignResult]:
    from oomdoctor.explain.rank import explain_text

    out = []
    for c in cases:
        ex = explain_text(c["text"].splitlines())
        failed = ex.failures
        out.append(BenignResult(c["id"], c["expect"], len(failed), len(ex.events) - len(failed),
                                1 if failed else 0))
    return out


def summary(scored: list[Scored]) -> dict[str, Any]:
    n = len(scored)
    t1 = sum(s.top1 for s in scored)
    t2 = sum(s.top2 for s in scored)
    per: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
    for s in scored:
        per[s.expected][0] += 1
        per[s.expected][1] += s.top1
        per[s.expected][2] += s.top2
    return {"n": n, "top1": t1, "top2": t2, "top1_ci": wilson(t1, n), "top2_ci": wilson(t2, n),
            "per_category": {c: tuple(v) for c, v in sorted(per.items())}}


CALIBRATION_BINS = ((0.0, 0.4), (0.4, 0.55), (0.55, 0.7), (0.7, 0.85), (0.85, 1.01))


def calibration(scored: list[Scored]) -> list[tuple[str, int, float, float]]:
    """(bin, answers, mean stated confidence, share right) for the top answer."""
    rows = []
    for lo, hi in CALIBRATION_BINS:
        inside = [s for s in scored if lo <= s.confidence < hi]
        if inside:
            rows.append((f"{lo:.2f}-{min(hi, 1.0):.2f}", len(inside),
                         sum(s.confidence for s in inside) / len(inside), sum(s.top1 for s in inside) / len(inside)))
        else:
            rows.append((f"{lo:.2f}-{min(hi, 1.0):.2f}", 0, float("nan"), float("nan")))
    return rows


def expected_calibration_error(scored: list[Scored]) -> float:
    n = len(scored)
    return sum(k * abs(conf - acc) for _, k, conf, acc in calibration(scored) if k) / n if n else float("nan")
