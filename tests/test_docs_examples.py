"""The `explain` examples in README.md and docs/explain.md are the output of today's code.

Each refit of the word prior moves confidences; the README's example said 0.96 / p = 0.67 for sessions after
the code printed 0.98 / 0.59. Every block that starts `$ oomdoctor explain ...` is run again here and each
figure it shows (confidences, p, the categories in their order) must be what the command prints now.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from oomdoctor.cli import main

ROOT = Path(__file__).resolve().parents[1]
# the log names the examples use -> the real text they were made from
INPUTS = {"oom.log": ROOT / "tests/fixtures/docs/oom.log",
          "seed.log": ROOT / "examples/seed-a100-k8s/logs/seed-traceback.txt"}
FIGURES = re.compile(r"confidence \d\.\d\d|p = \d\.\d\d|^\d\. [a-z_]+|^Answer: [a-z_]+", re.M)


def _examples() -> list[tuple[str, str, str]]:
    out = []
    for doc in ("README.md", "docs/explain.md"):
        text = (ROOT / doc).read_text(encoding="utf-8")
        for block in re.findall(r"```\n(\$ oomdoctor explain [^\n]*\n.*?)```", text, re.S):
            cmd, _, shown = block.partition("\n")
            out.append((doc, cmd, shown))
    return out


EXAMPLES = _examples()


def test_the_docs_have_explain_examples():
    assert {d for d, _, _ in EXAMPLES} == {"README.md", "docs/explain.md"}
    assert len(EXAMPLES) >= 4


@pytest.mark.parametrize(("doc", "cmd", "shown"), EXAMPLES, ids=[f"{d}:{c}" for d, c, _ in EXAMPLES])
def test_example_is_what_explain_prints(doc, cmd, shown, tmp_path, monkeypatch, capsys):
    args = cmd.split()[2:]  # after "$ oomdoctor"
    for i, a in enumerate(args):
        if a in INPUTS:
            shutil.copy(INPUTS[a], tmp_path / a)
        elif not a.startswith("-") and (ROOT / a).exists():
            args[i] = str(ROOT / a)
    monkeypatch.chdir(tmp_path)
    main(args)
    printed = capsys.readouterr().out
    want = FIGURES.findall(shown)
    assert want, f"{doc}: no figures in the example of `{cmd}`"
    # the example may cut lines and blocks, never change what it shows: its figures are, in order, among the output's
    got = iter(FIGURES.findall(printed))
    missing = [w for w in want if not any(g == w for g in got)]
    assert not missing, f"{doc}: `{cmd}` now prints other figures than the example shows: {missing}"
