"""Whether a change to `explain` that should not change any answer (a speed-up) changed one: the JSON and the text
output of `explain` on every corpus text (reports and benign logs, both splits), saved before and compared after.

Each text is written to a file and explained as the CLI does (reader, scanner, ranking, redaction, renderers), so
every stage's output is compared, not only the category. `--save FILE` records the outputs; `--compare FILE`
prints how many differ per corpus and split, and names the differing `dev` cases only: `test` cases are never
listed one by one (bench/explain_corpus.py), nor is any text printed.
Usage: PYTHONPATH=src python bench/explain_same_answers.py --save /tmp/before.json
       PYTHONPATH=src python bench/explain_same_answers.py --compare /tmp/before.json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import explain_corpus as C  # noqa: E402

from oomdoctor.cli.explain import _redact, _scan_files  # noqa: E402
from oomdoctor.errors import InputError  # noqa: E402
from oomdoctor.explain.events import LogScanner  # noqa: E402
from oomdoctor.explain.rank import explain_scan  # noqa: E402
from oomdoctor.render import explain as render  # noqa: E402


def outputs(text: str, tmp: Path) -> dict[str, object]:
    path = tmp / "case.log"
    path.write_text(text, encoding="utf-8")
    scanner = LogScanner()
    _scan_files(scanner, [str(path)], ["case.log"], None)
    scan = scanner.finish()
    refused = _refusal(scan)
    if refused:  # the CLI would stop there (exit 2, one line): an answer that changed too
        return {"refused": refused}
    ex = explain_scan(scan, None)
    _redact(ex)
    js = json.loads(render.to_json(ex))
    js.pop("tool_version", None)
    return {"json": js, "text": render.to_text(ex, color=False, width=120), "explained": bool(ex.explained)}


def _refusal(scan) -> str:
    """The one line the CLI stops with for this input, if any (code that has none refuses nothing)."""
    try:
        from oomdoctor.cli.explain import _refuse_binary
    except ImportError:
        return ""
    try:
        _refuse_binary(scan)
    except InputError as exc:
        return str(exc)
    return ""


def collect() -> dict[str, dict[str, object]]:
    out: dict[str, dict[str, object]] = {}
    with tempfile.TemporaryDirectory() as d:
        for corpus, cases in (("reports", C.load_reports()), ("benign", C.load_benign())):
            for c in cases:
                o = outputs(c["text"], Path(d))
                digest = hashlib.sha256(json.dumps(o, sort_keys=True).encode()).hexdigest()
                out[f"{corpus}/{c['file']}"] = {"split": c["split"], "digest": digest}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--save", metavar="FILE")
    g.add_argument("--compare", metavar="FILE")
    a = ap.parse_args()
    now = collect()
    if a.save:
        Path(a.save).write_text(json.dumps(now, indent=0, sort_keys=True), encoding="utf-8")
        print(f"saved the outputs' digests of {len(now)} texts to {a.save}")
        return
    before = json.loads(Path(a.compare).read_text(encoding="utf-8"))
    bad = 0
    for corpus in ("reports", "benign"):
        for split in ("dev", "test"):
            keys = [k for k, v in now.items() if k.startswith(corpus + "/") and v["split"] == split]
            diff = [k for k in keys if before.get(k, {}).get("digest") != now[k]["digest"]]
            bad += len(diff)
            print(f"{corpus:8} {split:5} {len(keys):5} texts, {len(keys) - len(diff):5} same, {len(diff):4} differ")
            if split == "dev":
                for k in diff:
                    print(f"    differs: {k}")
    missing = sorted(set(before) - set(now))
    if missing:
        print(f"{len(missing)} texts saved before are gone")
    print("identical" if not bad and not missing else "DIFFERENT")
    raise SystemExit(1 if bad or missing else 0)


if __name__ == "__main__":
    main()
