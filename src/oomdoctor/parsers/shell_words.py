"""The words of a shell command line, read as `shlex.shlex(line, posix=True, punctuation_chars=True)` with
`whitespace_split = True` and `#` comments reads them, but in time linear in the line, and lazily.

Why not shlex itself: it grows a word one character at a time on an attribute (`self.token += c`, a copy
each time), so a word of n characters costs n squared, and its per-character Python loop was most of
`audit`'s time on long scripts. Here a word is one regex match. Lazily: a caller that needs one command's
words stops at the command's end instead of reading the rest of the line. tests/test_shell_words.py
checks that both read the same words, and fail alike, on generated lines.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

_BLANK = re.compile(r"[ \t\r\n]*")  # shlex's whitespace; other blanks (\f, \v, NBSP) are word characters
_OPERATOR = re.compile(r"[();<>|&]+")  # a run of these is one token (`&&`, `;;`, `>>`, even `);`)
# Possessive: an unclosed quote must not make the engine retry every shorter split of the word.
_WORD = re.compile(r"""(?:[^ \t\r\n();<>|&'"\\#]++|\\[\s\S]|'[^']*+'|"(?:[^"\\]++|\\[\s\S])*+")++""")
_PLAIN_WORD = re.compile(r"""(?:[^ \t\r\n'"\\#]++|\\[\s\S]|'[^']*+'|"(?:[^"\\]++|\\[\s\S])*+")++""")  # no operators
_PIECE = re.compile(r"""\\([\s\S])|'([^']*)'|"((?:[^"\\]|\\[\s\S])*)"|([^'"\\]+)""")
_DQ_ESCAPE = re.compile(r'\\(["\\])')  # inside "...", a backslash escapes only `"` and itself
_QUOTING = re.compile(r"""['"\\]""")
_DQ_OPEN = re.compile(r'"(?:[^"\\]++|\\[\s\S])*+')


class ShellSyntaxError(ValueError):
    """The line ends inside a quoted string or right after a backslash (shlex's two ValueErrors)."""


def words(line: str, pos: int = 0, endpos: int | None = None, stop: int | None = None,
          operators: bool = True) -> Iterator[str]:
    """The words and operator tokens of `line[pos:endpos]`, quotes removed; a `#` outside quotes starts a
    comment to the end of the line. With `stop`, ends before a token that starts at or after it. Without
    `operators`, `;&|()<>` are word characters: what `shlex.split(line, comments=True)` reads. Raises
    ShellSyntaxError only on reaching the unclosed quote."""
    word = _WORD if operators else _PLAIN_WORD
    end = len(line) if endpos is None else endpos
    last = end if stop is None else min(stop, end)
    i = pos
    while True:
        i = _BLANK.match(line, i, end).end()
        if i >= last:
            return
        ch = line[i]
        if ch == "#":
            nl = line.find("\n", i, end)
            if nl < 0:
                return
            i = nl + 1
            continue
        if operators and ch in "();<>|&":
            m = _OPERATOR.match(line, i, end)
            yield m.group()
            i = m.end()
            continue
        m = word.match(line, i, end)
        j = m.end() if m else i
        if j < end and line[j] in "'\"\\":
            raise ShellSyntaxError(_why_unclosed(line, j, end))
        yield _unquote(m.group())
        i = j


def _why_unclosed(line: str, at: int, end: int) -> str:
    if line[at] == '"' and _DQ_OPEN.match(line, at, end).end() == end:
        return "No closing quotation"
    return "No escaped character" if line[at] != "'" else "No closing quotation"


def _unquote(word: str) -> str:
    if not _QUOTING.search(word):
        return word
    out = []
    for m in _PIECE.finditer(word):
        esc, single, double, plain = m.groups()
        if esc is not None:
            out.append(esc)
        elif single is not None:
            out.append(single)
        elif double is not None:
            out.append(_DQ_ESCAPE.sub(r"\1", double))
        else:
            out.append(plain)
    return "".join(out)
