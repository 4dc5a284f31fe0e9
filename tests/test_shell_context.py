"""GIVEN a logical shell line with candidate `docker run` words WHEN CommandContext reads it front to back
once THEN each candidate gets the answer that reading the whole prefix before it gives (the reference below:
the reading audit did per candidate, quadratic in a line of many commands), and `shell_runs` agrees with
the regex it replaces, which backtracked quadratically."""

from __future__ import annotations

import os
import re

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from oomdoctor.parsers.docker_run import _RUN
from oomdoctor.parsers.shell_context import PRINTERS, CommandContext, shell_runs

FUZZ = settings(max_examples=int(os.environ.get("FUZZ_EXAMPLES", "300")), deadline=None,
                suppress_health_check=[HealthCheck.too_slow])

# The reference: the whole-prefix reading (what audit did per candidate until now).
_SEPARATOR = re.compile(r"(?:;|&&|\|\||\||&|\(|\)|\{|\}|`|\$\(|\bthen\b|\bdo\b|\belse\b|\btime\b|!)\s*$")
_RUNS_STRING = re.compile(r"(?:\beval|\bssh\b.*|\b\w*sh\s+(?:-\w+\s+)*-\w*c|\bsu\b.*-c|\bwatch\b.*)\s*$"
                          r"|(?:^|[\s;&|(])(?:export\s+|local\s+|readonly\s+)?[A-Za-z_]\w*=$")


def _reference(prefix: str) -> str | None:
    quote, opened, i = "", -1, 0
    while i < len(prefix):
        ch = prefix[i]
        if quote == "'":
            if ch == "'":
                quote = ""
        elif ch == "\\":
            i += 1
        elif quote == '"':
            if ch == '"':
                quote = ""
        elif ch in "'\"":
            quote, opened = ch, i
        i += 1
    if quote:
        inside = prefix[opened + 1:]
        runs = (not inside.strip() or bool(_SEPARATOR.search(inside))) and bool(_RUNS_STRING.search(prefix[:opened]))
        return quote if runs else None
    segment = re.split(r";|&&|\|\||\||&|\(|`|\$\(|\bthen\b|\bdo\b|\belse\b", prefix)[-1].split()
    words = [w for w in segment if not re.match(r"^[A-Za-z_]\w*=", w) and w not in ("$", ">", "-", "*", "+", "sudo",
                                                                                  "exec", "nohup", "command")]
    return "" if not words or words[0] not in PRINTERS else None


_ATOMS = st.sampled_from([
    "docker run", " docker run", "/usr/bin/docker run", "=docker run", "\\docker run", " img", " -e X=1", " ;", ";",
    " &&", " |", "(", ")", " $(", "`", " then ", " do ", " else ", " time ", " !", " {", " }", " '", ' "', "'", '"',
    "\\", " \\\n", " echo ", " printf ", " sudo ", " nohup ", " X=", " CMD=", " export ", " local ", " bash -c ",
    " bash -lc ", " sh -x -c ", " -ash", " ssh host ", " ssh", "sshd ", " su u -c ", " su", " -c", " watch ",
    " eval ", "eval", " ", "  ", "\t", "é", "_", "x", " $", " >",
])
_PREFIX_ATOMS = st.sampled_from([
    " ", "\t", "\n", "\\\n", "x", "é", "_", "-", "=", ";", "&", "|", "(", "'", "ssh", "su", "watch", "eval", "sh",
    "bash", "-c", "-lc", "-x", "-ash", "c", "export", "CMD", "9", "sshd", "host", "$",
])


@FUZZ
@given(st.lists(_ATOMS, max_size=20).map("".join))
def test_each_candidate_gets_the_whole_prefix_answer(line):
    ctx = CommandContext(line, 0)
    for m in _RUN.finditer(line):
        assert ctx.command_quote(m.start()) == _reference(line[:m.start()]), (line, m.start())


@FUZZ
@given(st.lists(_PREFIX_ATOMS, max_size=16).map("".join))
def test_shell_runs_agrees_with_the_regex(prefix):
    assert shell_runs(prefix) == bool(_RUNS_STRING.search(prefix))


def test_shell_runs_examples():
    for prefix in ("bash -lc ", "sh -x -c ", "/bin/bash -c", "ssh host ", "ssh host \\\n  ", "su u -c ", "eval ",
                   "watch -n1 ", "CMD=", "export CMD=", "a; X="):
        assert shell_runs(prefix), prefix
    for prefix in ("echo ", "bash --login -c ", "ssh host\\\nfoo ", "9X=", "x-X=", "-ash -ash -ash ", "sudo "):
        assert not shell_runs(prefix), prefix


def test_a_line_of_many_commands_is_read_once():
    """Candidate after candidate on one line: each answer right (the quadratic reading gave the same)."""
    line = 'echo docker run a; docker run b && bash -c "docker run c; docker run d" ; CMD="docker run e" x'
    ctx = CommandContext(line, 0)
    answers = [ctx.command_quote(m.start()) for m in _RUN.finditer(line)]
    assert answers == [None, "", '"', '"', '"']
