"""Whether a word on a shell line stands where a command does: not inside a quoted string (unless a shell
runs that string: `bash -lc "docker run ..."`, `CMD="docker run ..."`), and not an argument of echo/printf/log.

The answer depends on everything before the word on its logical line. `CommandContext` reads a logical line
once, front to back, for all the candidate words on it (quote state, the last command separator, the first
word after it, the last `ssh`/`su`/`watch`). Re-reading the whole prefix for each candidate made a line
holding many commands quadratic.
"""

from __future__ import annotations

import re

# Commands whose arguments are text to show, not a command to run: `echo docker run ...`, `log "..."`.
PRINTERS = frozenset({"echo", "printf", "print", "cat", "log", "logger", "info", "warn", "warning", "error", "die",
                      "fail", "usage", "msg", "note", "debug", "say", "grep", "man", "read", ":", "true", "local",
                      "export", "declare", "readonly"})
_SKIPPED_WORDS = frozenset({"$", ">", "-", "*", "+", "sudo", "exec", "nohup", "command"})
_ASSIGNMENT = re.compile(r"[A-Za-z_]\w*=")
# Where a command segment starts (quotes are not considered here: a heuristic, kept as it was).
_SPLIT = re.compile(r";|&&|\|\||\||&|\(|`|\$\(|\bthen\b|\bdo\b|\belse\b")
_WORDS = re.compile(r"\S+")
# The text of a string ends, before the command in it, with something after which a command may start.
_SEPARATOR = re.compile(r"(?:;|&&|\|\||\||&|\(|\)|\{|\}|`|\$\(|\bthen\b|\bdo\b|\belse\b|\btime\b|!)\s*$")
_QUOTE_OR_ESCAPE = re.compile(r"[\\'\"]")
_MARKS = re.compile(r"\b(?:(ssh)|(su)|(watch))\b|(\n)")
_NAME_START = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz_")


class CommandContext:
    """One logical line (starting at `start` in `text`), asked about candidate offsets in increasing order."""

    def __init__(self, text: str, start: int):
        self.text, self.start = text, start
        self._qpos, self._quote, self._opened = start, "", -1
        self._split_pos, self._segment = start, start
        self._first_for, self._first_pos, self._first = -1, start, None
        self._marks_pos = start
        self._last = {"ssh": -1, "su": -1, "watch": -1}
        self._newlines = [start - 1, start - 1]  # the last two newlines seen (start - 1: none)
        self._runs_for, self._runs = -1, False

    def command_quote(self, at: int) -> str | None:
        """None: the word at `at` is not a command; '': a command; a quote character: a command inside a
        string of that quote that a shell runs."""
        self._scan_quotes(at)
        if self._quote:
            return self._quote if self._string_runs(at) else None
        for m in _SPLIT.finditer(self.text, self._split_pos, at):
            self._segment = m.end()
        self._split_pos = at
        first = self._first_word(at)
        return "" if first is None or first not in PRINTERS else None

    def _scan_quotes(self, at: int) -> None:
        t, i, quote, opened = self.text, self._qpos, self._quote, self._opened
        while i < at:
            if quote == "'":
                j = t.find("'", i, at)
                if j < 0:
                    i = at
                    break
                quote, i = "", j + 1
                continue
            m = _QUOTE_OR_ESCAPE.search(t, i, at)
            if m is None:
                i = at
                break
            j = m.start()
            ch = t[j]
            if ch == "\\":
                i = j + 2  # may pass `at`: the escaped character is the candidate's first
                continue
            if quote == '"':
                if ch == '"':
                    quote = ""
            else:
                quote, opened = ch, j
            i = j + 1
        self._qpos, self._quote, self._opened = i, quote, opened

    def _first_word(self, at: int) -> str | None:
        """The segment's first word that is not an assignment or a prefix like sudo. A word that runs into
        the candidate is not remembered: for a later candidate it is longer."""
        if self._first_for != self._segment:
            self._first_for, self._first_pos, self._first = self._segment, self._segment, None
        if self._first is not None:
            return self._first
        for m in _WORDS.finditer(self.text, self._first_pos, at):
            word, whole = m.group(), m.end() < at
            if _ASSIGNMENT.match(word) or word in _SKIPPED_WORDS:
                if whole:
                    self._first_pos = m.end()
                continue
            if whole:
                self._first = word
            return word
        return None

    def _string_runs(self, at: int) -> bool:
        t, opened = self.text, self._opened
        end = at
        while end > opened + 1 and t[end - 1].isspace():
            end -= 1
        if end > opened + 1 and not _SEPARATOR.search(t, max(opened + 1, end - 5), end):
            return False  # text before the command inside the string: an argument, not a command
        if self._runs_for != opened:
            self._scan_marks(opened)
            self._runs_for, self._runs = opened, _shell_runs(t, self.start, opened, self._last, self._newlines)
        return self._runs

    def _scan_marks(self, upto: int) -> None:
        for m in _MARKS.finditer(self.text, self._marks_pos, upto):
            if m.group(4):
                self._newlines = [self._newlines[1], m.start()]
            else:
                self._last[m.group(m.lastindex)] = m.start()
        self._marks_pos = max(self._marks_pos, upto)


def shell_runs(prefix: str) -> bool:
    """Whether a string opened right after `prefix` is run by a shell: `bash -lc `, `ssh host `, `eval `,
    `su user -c `, `watch `, `CMD=`. (The whole-string form of what CommandContext reads incrementally.)"""
    marks = {"ssh": -1, "su": -1, "watch": -1}
    newlines = [-1, -1]
    for m in _MARKS.finditer(prefix):
        if m.group(4):
            newlines = [newlines[1], m.start()]
        else:
            marks[m.group(m.lastindex)] = m.start()
    return _shell_runs(prefix, 0, len(prefix), marks, newlines)


def _shell_runs(t: str, lo: int, hi: int, last: dict[str, int], newlines: list[int]) -> bool:
    """`t[lo:hi]` (the logical line up to the quote) ends so that a shell runs the string: the reading of

        (?:\\beval|\\bssh\\b.*|\\b\\w*sh\\s+(?:-\\w+\\s+)*-\\w*c|\\bsu\\b.*-c|\\bwatch\\b.*)\\s*$
        |(?:^|[\\s;&|(])(?:export\\s+|local\\s+|readonly\\s+)?[A-Za-z_]\\w*=$

    done backwards from the end, with the last `ssh`/`su`/`watch` before `hi` given: the regex search
    tried every start, and its `.*` and `(?:-\\w+\\s+)*` backtracked over the line, quadratic in it."""
    if hi > lo and t[hi - 1] == "=":  # CMD="docker run ..."
        r = _word_start(t, lo, hi - 1)
        if r < hi - 1 and t[r] in _NAME_START and (r == lo or t[r - 1].isspace() or t[r - 1] in ";&|("):
            return True
    e = hi
    while e > lo and t[e - 1].isspace():
        e -= 1
    if e == lo:
        return False
    line = newlines[1] if newlines[1] < e else newlines[0] if newlines[0] < e else t.rfind("\n", lo, e)
    line = max(line, lo - 1)  # `.*` stays on the physical line of the last word
    if last["ssh"] > line or last["watch"] > line:
        return True
    if t[e - 2:e] == "-c" and e - 2 >= lo and last["su"] > line:
        return True
    if e - 4 >= lo and t[e - 4:e] == "eval" and (e - 4 == lo or not _is_word(t[e - 5])):
        return True
    return _shell_dash_c(t, lo, e)


def _shell_dash_c(t: str, lo: int, e: int) -> bool:
    """`t[lo:e]` ends with a word ending in `sh`, then `-x` options, the last one ending in `c` (`bash -lc`)."""
    if t[e - 1] != "c":
        return False
    k = _word_start(t, lo, e)
    while k > lo and t[k - 1] == "-":  # at an option: whitespace, then a word, before its dash
        dash = k - 1
        w = dash
        while w > lo and t[w - 1].isspace():
            w -= 1
        if w == dash:
            return False
        k = _word_start(t, lo, w)
        if k == w:
            return False
        if t[w - 2:w] == "sh" and w - 2 >= k:
            return True
    return False


def _word_start(t: str, lo: int, end: int) -> int:
    k = end
    while k > lo and _is_word(t[k - 1]):
        k -= 1
    return k


def _is_word(ch: str) -> bool:
    return ch.isalnum() or ch == "_"  # the regex \w
