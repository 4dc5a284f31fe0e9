"""How many lines of the corpora's logs the redactor changes: a measure of over-redaction.

The corpora (tests/corpus/reports, tests/corpus/benign) are public reports and logs, with almost no
real secrets in them, so nearly every changed line is text hidden for nothing. A change to the
redactor should not raise the count except for a true secret. Prints counts only, per corpus and
split; `--lines` lists the changed lines of the `dev` split (test cases are never printed).

Usage: PYTHONPATH=src python bench/redact_corpus.py [--lines]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import explain_corpus as C  # noqa: E402

from oomdoctor.redact import redact_text  # noqa: E402


def changed_lines(text: str) -> list[tuple[str, str]]:
    """The (before, after) pairs of the lines redaction changed (a text whose line count changed counts
    each line from the first difference on)."""
    before, after = text.splitlines(), redact_text(text).splitlines()
    if len(before) != len(after):
        first = next((i for i, (a, b) in enumerate(zip(before, after)) if a != b), min(len(before), len(after)))
        return [(b, "") for b in before[first:]]
    return [(a, b) for a, b in zip(before, after) if a != b]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lines", action="store_true", help="list the dev split's changed lines")
    args = ap.parse_args(argv)
    total = 0
    for corpus, cases in (("reports", C.load_reports()), ("benign", C.load_benign())):
        for split in ("dev", "test"):
            n = 0
            for c in (c for c in cases if c["split"] == split):
                pairs = changed_lines(c["text"])
                n += len(pairs)
                if args.lines and split == "dev":
                    for a, b in pairs:
                        print(f"{c['file']}:\n  - {a[:300]}\n  + {b[:300]}")
            print(f"{corpus} {split}: {n} line(s) changed")
            total += n
    print(f"total: {total} line(s) changed")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
