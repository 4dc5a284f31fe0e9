"""GIVEN a shell command line WHEN audit reads its words THEN they are the words shlex reads (POSIX, shell
operators split off, `#` comments), or the same error; read lazily, up to a command's end; a long word is
one regex match, not a copy per character."""

from __future__ import annotations

import os
import shlex

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from oomdoctor.parsers.shell_words import ShellSyntaxError, words

FUZZ = settings(max_examples=int(os.environ.get("FUZZ_EXAMPLES", "300")), deadline=None,
                suppress_health_check=[HealthCheck.too_slow])
_CHARS = st.sampled_from(list("ab=-./$") + [" ", "\t", "\n", "\r", "'", '"', "\\", "#", ";", "&", "|", "(", ")",
                                             "<", ">", "\x0b", "\xa0", "é"])
_LINES = st.lists(_CHARS, max_size=30).map("".join)


def _shlex(line: str):
    lex = shlex.shlex(line, posix=True, punctuation_chars=True)
    lex.whitespace_split = True
    lex.commenters = "#"
    try:
        return list(lex)
    except ValueError as exc:
        return f"error: {exc}"


def _ours(line: str, *window):
    try:
        return list(words(line, *window))
    except ShellSyntaxError as exc:
        return f"error: {exc}"


@FUZZ
@given(_LINES)
def test_words_are_the_words_shlex_reads(line):
    assert _ours(line) == _shlex(line)


@FUZZ
@given(_LINES)
def test_without_operators_words_are_what_shlex_split_reads(line):
    try:
        expected = shlex.split(line, comments=True)
    except ValueError as exc:
        expected = f"error: {exc}"
    try:
        got = list(words(line, operators=False))
    except ShellSyntaxError as exc:
        got = f"error: {exc}"
    assert got == expected


@FUZZ
@given(_LINES, st.integers(0, 30), st.integers(0, 30))
def test_a_window_of_a_line_reads_like_the_line_cut_there(line, a, b):
    a, b = sorted((min(a, len(line)), min(b, len(line))))
    assert _ours(line, a, b) == _shlex(line[a:b])


def test_quotes_escapes_operators_and_comments():
    line = """docker run -e 'A=1 2' -e "B=\\"x\\" \\y" a\\ b --x=""&&echo ok;ls # docker run c"""
    assert list(words(line)) == ["docker", "run", "-e", "A=1 2", "-e", 'B="x" \\y', "a b", "--x=", "&&", "echo",
                                 "ok", ";", "ls"]
    assert _ours("docker run 'img") == _ours('docker run "img') == "error: No closing quotation"
    assert _ours("docker run img\\") == _ours('docker run "img\\') == "error: No escaped character"


def test_words_are_read_lazily_so_a_later_unclosed_quote_is_not_reached():
    it = words('img python t.py && echo "unclosed')
    assert [next(it) for _ in range(4)] == ["img", "python", "t.py", "&&"]


def test_stop_ends_before_the_first_token_that_starts_there():
    line = "img a docker run b"
    assert list(words(line, 0, None, line.index("docker"))) == ["img", "a"]
    line = 'img "a docker run b" c'
    assert list(words(line, 0, None, line.index("docker"))) == ["img", "a docker run b"]  # started before: whole


def test_a_long_word_is_one_token():
    assert list(words("x " + "a" * 300_000 + "'b c'")) == ["x", "a" * 300_000 + "b c"]
