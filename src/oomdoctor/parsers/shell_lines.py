"""Physical and logical lines of a shell script, for offsets visited front to back.

A logical line is what `\\<newline>` continuations join. Each physical line is looked at a bounded number
of times however many commands a logical line holds: walking back to the logical line's start, or joining
it from there, once per command made a script of one logical line over thousands of physical lines
quadratic (2,000 lines took 46 s).
"""

from __future__ import annotations

import re

_LEADING_BLANKS = re.compile(r"\s*")
_DQ_STRING_BODY = re.compile(r'(?:[^"\\]++|\\[\s\S]?)*+')  # up to the first `"` that no backslash escapes


def continues(text: str, start: int, newline: int) -> bool:
    """Whether the physical line `text[start:newline]` ends in a continuation: its last character before
    any `\\r` is a backslash, and not the second of two."""
    k = newline
    while k > start and text[k - 1] == "\r":
        k -= 1
    return k > start and text[k - 1] == "\\" and not (k - 1 > start and text[k - 2] == "\\")


class ScriptLines:
    """The physical line of an offset, for offsets that only grow: newlines are counted on from the last
    offset, not from the start of the file."""

    def __init__(self, text: str):
        self.text = text
        self.index = 0  # 0-based number of the physical line of the last offset visited
        self.start = 0  # where that line starts
        self._counted = 0
        self._known_line, self._known_logical = 0, 0  # a physical line's start and its logical line's start
        self._comment_line, self._comment = -1, False

    def visit(self, pos: int) -> None:
        t = self.text
        n = t.count("\n", self._counted, pos)
        if n:
            self.index += n
            self.start = t.rfind("\n", self._counted, pos) + 1
        self._counted = pos

    def commented(self, pos: int) -> bool:
        """Whether the physical line of `pos` starts, before `pos`, with `#`. One answer per line: every
        offset after the first one visited on it has the same first non-blank character before it."""
        if self._comment_line != self.start:
            first = _LEADING_BLANKS.match(self.text, self.start, pos).end()
            self._comment_line, self._comment = self.start, first < pos and self.text[first] == "#"
        return self._comment

    def logical_start(self) -> int:
        """Where the logical line of the current physical line starts: back over continued lines, but
        no further back than a line whose logical start is already known."""
        if self._known_line == self.start:
            return self._known_logical
        t, s = self.text, self.start
        while s > 0 and s != self._known_line:
            prev = t.rfind("\n", 0, s - 1) + 1
            if not continues(t, prev, s - 1):
                break
            s = prev
        logical = self._known_logical if s == self._known_line else s
        self._known_line, self._known_logical = self.start, logical
        return logical


class LogicalLine:
    """One logical line: its text with each continuation's `\\<newline>` read as a space, and where each of
    its physical lines begins in that text. A file's last line (no newline) is taken as it is."""

    def __init__(self, text: str, start: int):
        parts: list[str] = []
        self._bases: dict[int, int] = {}  # physical line start in the file -> its offset in `self.text`
        i, n, size = start, len(text), 0
        while i < n:
            self._bases[i] = size
            j = text.find("\n", i)
            if j < 0:
                parts.append(text[i:])
                break
            seg = text[i:j].rstrip("\r")
            if seg.endswith("\\") and not seg.endswith("\\\\"):
                parts.append(seg[:-1] + " ")
                size += len(seg)
                i = j + 1
                continue
            parts.append(seg)
            break
        self.start = start
        self.text = "".join(parts)
        self._string_ends: dict[str, tuple[int, int]] = {}

    def offset(self, line_start: int, pos: int) -> int:
        """`pos` in the file (on the physical line starting at `line_start`) as an offset in `self.text`."""
        return self._bases[line_start] + (pos - line_start)

    def string_end(self, off: int, quote: str) -> int:
        """Where a quoted string that a command starts inside ends: the first `quote` from `off` (inside
        `"..."` one that no backslash escapes), or the line's end. Remembered: the commands inside one
        string share its end, and searching from each of them to a far (or missing) quote was quadratic."""
        seen = self._string_ends.get(quote)
        if seen and seen[0] <= off <= seen[1]:
            return seen[1]  # offsets passed in end a word (`run`), so a scan from `seen[0]` passes them unescaped
        if quote == "'":
            end = self.text.find("'", off)
            end = len(self.text) if end < 0 else end
        else:
            end = _DQ_STRING_BODY.match(self.text, off).end()
        self._string_ends[quote] = (off, end)
        return end
