"""explain on reports its rules were NOT written from: each fresh round scored with the code it arrived to.

Cross-validation on dev measures the learned parts out of sample but the hand-written rules in sample
(they were written from dev). Each round of reports below was scored on arrival, before any rule was
written from it; this script re-creates that: the round's dev reports are read by the rules of the
commit they arrived to (a temporary `git worktree` of that commit), with a word prior of today's form
(bench/explain_textmodel.fit_prior: today's tfidf form and sizes, read by today's textmodel.py) fitted on today's dev
split minus the round, plus the silver items, at several prior weights. The prior reads the words as
that commit's code hands them over (its tokens, its event tags, its vocabulary selection). It also prints the arrival figure (that commit's own stored prior) and
the rules alone. Test cases are never read. Dev benign texts of the same rounds: false alarms with
that commit's code (what a documentation threshold can be checked against: rank.DOCS_MIN_ANY).

Usage: PYTHONPATH=src python bench/explain_arrival.py [--benign [--write FILE]]
  --write: the false alarms' ids as JSON (bench/explain_docs_cv.py --arrival FILE reads them)
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
# (commit the round arrived to, the round's id prefixes): sessions 9-12 (docs/benchmarks.md)
ROUNDS = (("d9de226", ("z",)), ("d1712bf", ("aa",)), ("aca0956", ("ab", "ac")), ("0ec6913", ("ad",)))
WEIGHTS = ((0.5, 2.0), (1.0, 2.0), (1.0, 3.0), (1.5, 4.0), (2.0, 4.0), (3.0, 6.0))


def _in_round(case_id: str, prefixes: tuple[str, ...]) -> bool:
    return any(case_id.startswith(p) and case_id[len(p):len(p) + 1].isdigit() for p in prefixes)


def child(prefixes: tuple[str, ...], benign: bool) -> dict:
    """Runs with the old commit's src first on sys.path (main() arranges it)."""
    import explain_corpus as C
    import explain_textmodel as TM

    from oomdoctor.explain import rank, textmodel
    from oomdoctor.explain.events import LogScanner
    from oomdoctor.explain.rank import explain_text, prior_text

    if benign:
        rows = [(b["id"], bool(explain_text(b["text"].splitlines()).failures))
                for b in C.load_benign("dev") if _in_round(b["id"], prefixes)]
        return {"benign": len(rows), "false_alarms": [i for i, fa in rows if fa]}

    def scan(text: str):
        s = LogScanner()
        s.feed_lines(text.splitlines())
        return s.finish()

    dev = C.load_reports("dev")
    rnd = [c for c in dev if _in_round(c["id"], prefixes)]
    ids = {c["id"] for c in rnd}
    docs = [(prior_text(scan(c["text"])), c["category"]) for c in dev if c["id"] not in ids]
    docs += [(prior_text(scan(s["text"])), s["category"]) for s in C.load_silver()]
    model = TM.today().TextModel(TM.fit_prior(docs))
    scans = [scan(c["text"]) for c in rnd]

    def tally(m, w: float, v: float) -> tuple[int, int]:
        rank.PRIOR_WEIGHT, rank.PRIOR_WEIGHT_VAGUE = w, v
        a = b = 0
        for c, s in zip(rnd, scans):
            r = [h.category for h in rank.explain_scan(s, None, m).hypotheses if h.category != "unknown"]
            a += bool(r) and r[0] == c["category"]
            b += c["category"] in r[:2]
        return a, b

    out = {"reports": len(rnd), "arrival": tally(textmodel.default_model(), rank.PRIOR_WEIGHT, rank.PRIOR_WEIGHT_VAGUE),
           "rules_only": tally(None, 0.0, 0.0)}
    for w, v in WEIGHTS:
        out[f"{w}/{v}"] = tally(model, w, v)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--benign", action="store_true", help="false alarms of the rounds' dev benign texts instead")
    ap.add_argument("--write", help="with --benign: write the false alarms' ids to this JSON file")
    ap.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child:
        sys.path[:0] = [a.child[0], str(BENCH)]
        print(json.dumps(child(tuple(a.child[1].split(",")), a.benign)))
        return 0
    total: dict[str, list[int]] = {}
    false_alarms: list[str] = []
    for commit, prefixes in ROUNDS:
        with tempfile.TemporaryDirectory() as tmp:
            wt = Path(tmp) / "wt"
            subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "-q", "--detach", str(wt), commit], check=True)
            try:
                r = subprocess.run([sys.executable, __file__, "--child", str(wt / "src"), ",".join(prefixes)]
                                   + (["--benign"] if a.benign else []), capture_output=True, text=True,
                                   env={"PATH": "", "OMP_NUM_THREADS": "2"})
            finally:
                subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(wt)], check=False)
                subprocess.run(["git", "-C", str(ROOT), "worktree", "prune"], check=False)
        if r.returncode != 0:
            print(f"{commit}: the child failed:\n{r.stderr}", file=sys.stderr)
            return 1
        res = json.loads(r.stdout)
        false_alarms += res.get("false_alarms", [])
        print(commit, "+".join(prefixes), json.dumps(res))
        for k, v in res.items():
            if isinstance(v, list) and v and isinstance(v[0], int):
                t = total.setdefault(k, [0, 0])
                t[0] += v[0]
                t[1] += v[1]
            elif isinstance(v, int):
                total.setdefault(k, [0, 0])[0] += v
            else:
                total.setdefault(k, [0, 0])[0] += len(v)
    print("all rounds:", {k: tuple(v) for k, v in total.items()})
    if a.write:
        Path(a.write).write_text(json.dumps(sorted(false_alarms)) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
