"""GIVEN the scenario bundles WHEN `doctor --bundle` and `explain --bundle` report on them (text and JSON) THEN
no internal document is cited ("(env-facts §2)", "[TORCHDRV]" keys of docs/reference/environment-facts.md, a file
users of the package do not have), and explain's deciding commands point into the bundle, not at a live
`oomdoctor doctor` on this machine (a walkthrough, session 26)."""

from __future__ import annotations

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
