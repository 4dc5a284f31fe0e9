"""GIVEN the scenario bundles WHEN `doctor --bundle` and `explain --bundle` report on them (text and JSON) THEN
no internal document is cited ("(env-facts §2)", "[TORCHDRV]" keys of docs/reference/environment-facts.md, a file
users of the package do not have), and explain's deciding commands point into the bundle, not at a live
`oomdoctor doctor` on this machine (a walkthrough, session 26)."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

from oomdoctor.cli import main

BUNDLES = Path(__file__).resolve().parent / "fixtures" / "bundles"
NAMES = sorted(p.name for p in BUNDLES.iterdir() if p.is_dir())
INTERNAL = re.compile(r"env-facts|environment-facts|§|\\u00a7|\[(?!(?:ERROR|WARNING|INFO|CRITICAL)\])[A-Z][A-Z0-9]{3,}\]")


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("command", ["doctor", "explain"])
@pytest.mark.parametrize("fmt", ["text", "json"])
def test_no_internal_citations_in_reports(name, command, fmt, capsys):
    main([command, "--bundle", str(BUNDLES / name), "--format", fmt])
    out = capsys.readouterr().out
    assert not INTERNAL.search(out), INTERNAL.findall(out)


def test_explain_bundle_points_the_deciding_facts_into_the_bundle(capsys):
    bundle = str(BUNDLES / "seed_a100_k8s")
    main(["explain", "--bundle", bundle, "--format", "json"])
    decide = json.loads(capsys.readouterr().out)["to_decide"]
    assert decide
    for d in decide:
        if d["collected_by"] != "not collected by explain":  # a fact of the machine: it is read from the bundle
            assert f"oomdoctor doctor --bundle {bundle}" in d["command"], d
    main(["explain", "--bundle", bundle])
    text = capsys.readouterr().out
    what = text.split("What decides:")[1].split("Events")[0]
    assert "oomdoctor doctor --probe" not in what and "--bundle" in what


SESSION = re.compile(r"\bsession \d+", re.IGNORECASE)


def _docstrings(tree: ast.AST) -> set[int]:
    kinds = (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    return {id(n.body[0].value) for n in ast.walk(tree) if isinstance(n, kinds) and n.body
            and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}


def test_no_internal_session_names_in_user_text():
    """Strings of the code that can reach a user (not docstrings, not comments) never name an internal work session
    ("a recording made before session 27" was printed in a report)."""
    src = Path(__file__).resolve().parents[1] / "src" / "oomdoctor"
    found = []
    for f in sorted(src.rglob("*.py")):
        tree = ast.parse(f.read_text(encoding="utf-8"))
        docs = _docstrings(tree)
        found += [f"{f.relative_to(src)}:{n.lineno}: {n.value[:80]}" for n in ast.walk(tree)
                  if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs
                  and SESSION.search(n.value)]
    assert not found, found


# The user guides speak to users, who have no "sessions": the project's own history belongs in the records
# (CHANGELOG.md, docs/explain-design.md, docs/benchmarks.md, docs/validation/), not in the README or a guide.
RECORDS = {"explain-design.md", "benchmarks.md"}
GUIDES = [Path(__file__).resolve().parent.parent / "README.md"] + sorted(
    p for p in (Path(__file__).resolve().parent.parent / "docs").glob("*.md") if p.name not in RECORDS)
HISTORY = re.compile(r"\bsessions? \d+\b|\b(?:first|second|third|\w+th|\w+-\w+th) session\b", re.I)


@pytest.mark.parametrize("path", GUIDES, ids=lambda p: p.name)
def test_user_guides_carry_no_session_history(path):
    found = HISTORY.findall(path.read_text(encoding="utf-8"))
    assert not found, f"{path.name}: {found}"
