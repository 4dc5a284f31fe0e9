"""GIVEN a script whose `docker run` lines `audit --fix` patches WHEN a line holds several commands, a value is
quoted, or the text holds characters that end a line for Python but not for the shell (form feed, U+2028)
THEN each command's own `--shm-size` is set, right after its own `run`, and the script stays intact."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from oomdoctor.checks.audit.fix import fix_config
from oomdoctor.checks.audit.textedit import Editor
from oomdoctor.parsers.config_file import parse_config

RUN = "docker run --gpus all {shm}{image} python train.py --num-workers 8"


def _fixed(text: str) -> str:
    result = fix_config(parse_config(text, "x.sh"))
    assert not result.skipped
    return result.text


def _shm_sizes(text: str) -> list[str]:
    return [w.containers[0].shm_raw for w in parse_config(text, "x.sh").workloads]


def test_a_form_feed_or_line_separator_before_a_command_does_not_move_the_edit():
    for sep in ("\x0c", "\u2028", "\x1c", "\x85"):
        text = f"#!/bin/sh\necho a{sep}b\n" + RUN.format(shm="", image="img") + "\n"
        fixed = _fixed(text)
        assert fixed.startswith(f"#!/bin/sh\necho a{sep}b\ndocker run --shm-size="), repr(fixed)
        assert all(_shm_sizes(fixed)) and fixed.replace(re.search(r" --shm-size=\w+", fixed).group(), "") == text


def test_two_commands_on_one_line_each_get_their_own_option_fixed():
    text = RUN.format(shm="--shm-size 1m ", image="a") + "; " + RUN.format(shm="--shm-size 2m ", image="b") + "\n"
    fixed = _fixed(text)
    assert len(_shm_sizes(fixed)) == 2 and "1m" not in _shm_sizes(fixed) and "2m" not in _shm_sizes(fixed)
    assert fixed.count("--shm-size=") == 2 and fixed.endswith(" b python train.py --num-workers 8\n")


def test_an_argument_that_looks_like_the_option_is_not_the_one_replaced():
    text = (RUN.format(shm="", image="a") + " --shm-size 1m; "  # a's container argument, not a docker option
            + RUN.format(shm="--shm-size 2m ", image="b") + "\n")
    fixed = _fixed(text)
    assert "python train.py --num-workers 8 --shm-size 1m; docker run" in fixed  # a's argument left as it was
    assert all(_shm_sizes(fixed)) and _shm_sizes(fixed)[1] != "2m"


def test_a_quoted_value_is_replaced_with_its_quotes():
    for value in ('"64m"', "'64m'", "=64m", '="64m"'):
        text = RUN.format(shm=f"--shm-size{value if value[0] == '=' else ' ' + value} ", image="img") + "\n"
        fixed = _fixed(text)
        assert fixed.count('"') == fixed.count("'") == 0 and _shm_sizes(fixed)[0] not in ("", "64m"), fixed


_EDITS = st.lists(st.tuples(st.integers(0, 2), st.integers(0, 12), st.integers(0, 3), st.sampled_from(["", "X", "yy"])),
                  max_size=12)


@settings(max_examples=300, deadline=None)
@given(_EDITS)
def test_edits_on_one_line_applied_in_one_pass_give_what_one_by_one_gives(edits):
    """Editor.apply builds a line with many edits in one pass (one rebuild per edit was quadratic in a line
    of many commands); the result is the one-by-one result, overlapping edits included."""
    text = "docker run a; docker run b\nline two here\n\nlast"
    ed = Editor(text)
    for line, col, width, new in edits:
        ed.replace(line, col, col + width, new)
    lines = text.splitlines(keepends=True)
    for e in sorted(ed._edits, key=lambda e: (e.line, e.col, -e.seq), reverse=True):
        s = lines[e.line]
        lines[e.line] = s[:e.col] + e.text + s[e.end:]
    assert ed.apply() == "".join(lines)
