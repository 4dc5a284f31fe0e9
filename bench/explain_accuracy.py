"""How often `explain` ranks the confirmed cause first, on reports it was not built from.

Prints, for the `dev` split (rules are written from it) and the held-out `test` split (never read
while writing rules), top-1 and top-2 accuracy with 95% Wilson intervals and per category; the
calibration of the stated confidence on `test`; and the false alarms on the benign logs (logs of
healthy or recovered runs that `explain` would report as a failure, exit 1), per split.
See bench/explain_corpus.py for the split rule.

Usage: PYTHONPATH=src python bench/explain_accuracy.py [--markdown] [--misses]
`--misses` lists the dev split's misses only: test cases are never listed one by one.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import explain_corpus as C  # noqa: E402


def _pct(k: int, n: int) -> str:
    return f"{k / n:.1%}" if n else "n/a"


def _ci(ci: tuple[float, float]) -> str:
    return f"[{ci[0]:.0%}, {ci[1]:.0%}]"


def _accuracy_table(s_dev: dict, s_test: dict, md: bool) -> list[str]:
    cats = sorted(set(s_dev["per_category"]) | set(s_test["per_category"]))
    out = []
    if md:
        out += ["| category | test cases | test top-1 | test top-2 | dev cases | dev top-1 | dev top-2 |",
                "|---|---:|---:|---:|---:|---:|---:|"]
    else:
        out.append(f"{'category':<20}{'test n':>7}{'top-1':>8}{'top-2':>8}   {'dev n':>6}{'top-1':>8}{'top-2':>8}")
    for cat in cats:
        tn, t1, t2 = s_test["per_category"].get(cat, (0, 0, 0))
        dn, d1, d2 = s_dev["per_category"].get(cat, (0, 0, 0))
        if md:
            out.append(f"| {cat} | {tn} | {t1}/{tn} | {t2}/{tn} | {dn} | {d1}/{dn} | {d2}/{dn} |")
        else:
            out.append(f"{cat:<20}{tn:>7}{_pct(t1, tn):>8}{_pct(t2, tn):>8}   {dn:>6}{_pct(d1, dn):>8}{_pct(d2, dn):>8}")
    for name, s in (("test", s_test), ("dev", s_dev)):
        n = s["n"]
        line = (f"{name}: {n} cases, top-1 {s['top1']}/{n} = {_pct(s['top1'], n)} {_ci(s['top1_ci'])}, "
                f"top-2 {s['top2']}/{n} = {_pct(s['top2'], n)} {_ci(s['top2_ci'])}")
        out.append(("**" + line + "**  ") if md else line)
    return out


def _calibration_table(scored: list[C.Scored], md: bool) -> list[str]:
    rows = C.calibration(scored)
    out = ["| stated confidence | answers | mean confidence | right |", "|---|---:|---:|---:|"] if md else \
        [f"{'stated confidence':<18}{'answers':>8}{'mean':>8}{'right':>8}"]
    for b, k, conf, acc in rows:
        if md:
            out.append(f"| {b} | {k} | {conf:.2f} | {acc:.0%} |" if k else f"| {b} | 0 | - | - |")
        else:
            out.append(f"{b:<18}{k:>8}{conf:>8.2f}{acc:>8.0%}" if k else f"{b:<18}{k:>8}{'-':>8}{'-':>8}")
    out.append(f"expected calibration error: {C.expected_calibration_error(scored):.3f}")
    return out


def _benign_lines(dev: list[C.BenignResult], test: list[C.BenignResult], md: bool) -> list[str]:
    out = []
    for name, rs in (("test", test), ("dev", dev)):
        alarms = sum(r.false_alarm for r in rs)
        rec = [r for r in rs if r.expect == "recovered"]
        rec_ok = sum(r.recovered > 0 and not r.false_alarm for r in rec)
        line = (f"benign {name}: {len(rs)} logs, {alarms} false alarm(s) (exit 1 on a log with no failure); "
                f"{rec_ok}/{len(rec)} recovered OOMs reported as recovered")
        out.append(("- " + line) if md else line)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--markdown", action="store_true", help="tables for docs/benchmarks.md")
    ap.add_argument("--misses", action="store_true", help="list the dev split's misses and false alarms")
    args = ap.parse_args(argv)
    dev, test = C.score_reports(C.load_reports("dev")), C.score_reports(C.load_reports("test"))
    bdev, btest = C.score_benign(C.load_benign("dev")), C.score_benign(C.load_benign("test"))
    md = args.markdown
    print("\n".join(_accuracy_table(C.summary(dev), C.summary(test), md)))
    for name, rows in (("test", test), ("dev", dev)):
        none = sum(1 for r in rows if not r.ranked)
        words = [r for r in rows if r.words_only]
        print(("- " if md else "") + f"{name}: {none} of {len(rows)} reports with no answer; {len(words)} answered from "
              f"the words alone (no failure line found; exit 0), {sum(r.top1 for r in words)} of them right")
    print()
    print("Calibration of the top answer's confidence, test split:")
    print("\n".join(_calibration_table(test, md)))
    print()
    print("\n".join(_benign_lines(bdev, btest, md)))
    if args.misses:
        for s in dev:
            if not s.top1:
                print(f"MISS{'' if s.top2 else ' (not in top-2)'}: {s.id}: expected {s.expected}, got {s.ranked[:3]} "
                      f"({s.confidence:.2f})", file=sys.stderr)
        for r in bdev:
            if r.false_alarm or (r.expect == "recovered" and not r.recovered):
                print(f"BENIGN: {r.id}: {r.events} failure event(s), {r.recovered} recovered, expected {r.expect}",
                      file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
