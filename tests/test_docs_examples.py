"""The `explain` examples in README.md and docs/explain.md are the output of today's code, and the design record's
headings give today's values of rank.py's constants.

Each refit of the word prior moves confidences; the README's example said 0.96 / p = 0.67 for sessions after
the code printed 0.98 / 0.59. Every text block that starts `$ oomdoctor explain ...` is run again here: the
answer, the event's place, each confidence and p it shows (the ranked causes and the "also ranked" ones), the
events' kind -> category lines and the bundle facts used must be what the command prints now, in that order. The
JSON example's categories, confidences and event fields are checked the same way.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from oomdoctor.cli import main
from oomdoctor.explain import rank

ROOT = Path(__file__).resolve().parents[1]
# the log names the examples use -> the real text they were made from (the guide names these paths)
INPUTS = {"oom.log": ROOT / "tests/fixtures/docs/oom.log",
          "seed.log": ROOT / "examples/seed-a100-k8s/logs/seed-traceback.txt"}
FIGURES = re.compile(r"^Answer: [a-z_]+ \(confidence \d\.\d\d\) for the event at \S+"  # answer, confidence, place
                     r"|^\d\. [a-z_]+  confidence \d\.\d\d"                           # a ranked cause
                     r"|p = \d\.\d\d"                                                 # the words' p
                     r"|(?<=also ranked: )[^(\n]*?(?= \(|$)"                          # "not_oom 0.03, true_capacity 0.03"
                     r"|^\s+\S+:\d+\s+[a-z_0-9]+ -> [a-z_]+"                          # an event line: place, kind -> category
                     r"|^Bundle facts used: .*$", re.M)
JSON_EXAMPLE = re.compile(r"JSON \(`--format json`, on `([^`]+)`, abridged\):\n\n```json\n(.*?)```", re.S)


def _examples() -> list[tuple[str, str, str]]:
    out = []
    for doc in ("README.md", "docs/explain.md"):
        text = (ROOT / doc).read_text(encoding="utf-8")
        for block in re.findall(r"```[a-z]*\n(\$ oomdoctor explain [^\n]*\n.*?)```", text, re.S):
            cmd, _, shown = block.partition("\n")
            out.append((doc, cmd, shown))
    return out


EXAMPLES = _examples()


def test_the_docs_have_their_explain_examples():
    assert [(d, c) for d, c, _ in EXAMPLES] == [
        ("README.md", "$ oomdoctor explain oom.log"),
        ("docs/explain.md", "$ oomdoctor explain oom.log"),
        ("docs/explain.md", "$ oomdoctor explain seed.log"),
        ("docs/explain.md", "$ oomdoctor explain --bundle tests/fixtures/bundles/cgroup_oom_137")]


def _run(cmd: str, tmp_path: Path) -> int:
    args = cmd.split()[2:]  # after "$ oomdoctor"
    for i, a in enumerate(args):
        if a in INPUTS:
            shutil.copy(INPUTS[a], tmp_path / a)
        elif i > 0 and args[i - 1] == "--bundle":
            args[i] = str(ROOT / a)
    return main(args)


@pytest.mark.parametrize(("doc", "cmd", "shown"), EXAMPLES, ids=[f"{d}:{c}" for d, c, _ in EXAMPLES])
def test_example_is_what_explain_prints(doc, cmd, shown, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    rc = _run(cmd, tmp_path)
    printed = capsys.readouterr().out
    assert rc == 1, f"{doc}: `{cmd}` exits {rc}; the docs show an explained failure (exit 1)"
    want = [w.strip() for w in FIGURES.findall(shown)]
    assert len(want) >= 3, f"{doc}: too few figures found in the example of `{cmd}`: {want}"
    # the example may cut lines and leave blocks out, never change what it shows: in order, among the output's
    got = iter(g.strip() for g in FIGURES.findall(printed))
    missing = [w for w in want if not any(_same(w, g) for g in got)]
    assert not missing, f"{doc}: `{cmd}` now prints other figures than the example shows: {missing}"


def _same(shown: str, printed: str) -> bool:
    """An event line in the docs may be cut ("... -> host_oom  text..."): compare up to the category."""
    return shown == printed or (re.match(r"\S+:\d+\s", shown) is not None and printed.startswith(shown))


def test_the_json_example_is_what_explain_prints(capsys):
    text = (ROOT / "docs/explain.md").read_text(encoding="utf-8")
    m = JSON_EXAMPLE.search(text)
    assert m, "docs/explain.md: the JSON example (`JSON (--format json, on `PATH`, abridged):`) is gone"
    path, shown = ROOT / m.group(1), m.group(2)
    assert main(["explain", "--format", "json", str(path)]) == 1
    d = json.loads(capsys.readouterr().out)
    hyps = re.findall(r'"category": "([a-z_]+)", "confidence": (\d\.\d\d)', shown)
    assert hyps and hyps == [(h["category"], f'{h["confidence"]:.2f}') for h in d["hypotheses"]][:len(hyps)]
    ev = d["events"][0]
    for key in ("kind", "line", "category", "primary", "recovered"):
        assert f'"{key}": {json.dumps(ev[key])}' in shown, key
    for key, value in ev["numbers"].items():
        assert f'"{key}": {value}' in shown, key
    assert f'"failed": {json.dumps(d["failed"])}, "ambiguous": {json.dumps(d["ambiguous"])}' in shown


def test_the_design_record_headings_give_the_values_in_the_code():
    """docs/explain-design.md, "The constants of rank.py": every heading's NAME = value is rank.NAME."""
    text = (ROOT / "docs/explain-design.md").read_text(encoding="utf-8")
    section = text[text.index("## The constants of rank.py"):]
    section = section[:section.index("\n## ", 1)]
    pairs = [p for h in re.findall(r"^### (.+)$", section, re.M) for p in re.findall(r"`([A-Z_]+)` = `([^`]+)`", h)]
    assert len(pairs) == 15  # twelve headings, three of which name two constants (SIGKILL_MAX_CONFIDENCE: session 27)
    for name, value in pairs:
        real = getattr(rank, name)
        shown = sorted(v.strip() for v in value.split(",")) if isinstance(real, frozenset) else float(value)
        assert shown == (sorted(real) if isinstance(real, frozenset) else real), name
